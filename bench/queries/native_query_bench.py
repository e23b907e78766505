#!/usr/bin/env python3
"""memhook_query from C, beside the driver, on the bundled simulator.

    python bench/queries/native_query_bench.py [REGIONS [BACKLOG]]   # after `pip install -e .`

Builds bench/queries/native_query_bench.c against the tree's header and
libmemhook.so and runs it with the core in LD_PRELOAD and the simulator as
the driver (memhook.sim.environ()): no Python in the measured process.  It
prints memhook_query on a hooked device pointer and on malloc'd memory, the
simulator's cuPointerGetAttribute(MEMORY_TYPE) on the same pointers, the
batch (memhook_query_types) ns per pointer over REGIONS (10,000) live
allocations, and how long the first query takes to absorb a backlog of
BACKLOG (1,000,000) events.  On a GPU host, put the real driver first in
LD_LIBRARY_PATH instead (MEMHOOK_BENCH_REAL_DRIVER=1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import memhook
import memhook.sim

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def main(argv: list[str]) -> int:
    lib = Path(memhook.library_path())
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "native_query_bench"
        subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        f"-I{ROOT / 'csrc' / 'include'}", str(HERE / "native_query_bench.c"),
                        "-o", str(exe), f"-L{lib.parent}", "-lmemhook", "-ldl", "-lpthread"],
                       check=True)
        env = dict(os.environ) if os.environ.get("MEMHOOK_BENCH_REAL_DRIVER") else \
            memhook.sim.environ()
        env["LD_PRELOAD"] = str(lib)
        return subprocess.run([str(exe), *argv], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
