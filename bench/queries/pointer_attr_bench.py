#!/usr/bin/env python3
"""The driver's pointer-attribute calls: the driver alone beside memhook's
answers (``MEMHOOK_POINTER_ATTRIBUTES=1``), in one process.

    python bench/queries/pointer_attr_bench.py [CALLS] [MODE]   # after `pip install -e .`

Builds bench/queries/pointer_attr_bench.c against the tree's header and
libmemhook.so and runs it as ``memhook run --pointer-attributes`` would:
the core in LD_PRELOAD, the hooks installed at load in MODE (default
bistro,reloc), the simulator as the driver (memhook.sim.environ()), or the
real driver with MEMHOOK_BENCH_REAL_DRIVER=1.  It prints, per call and
pointer (malloc'd host memory, a device allocation), the ns of
cuPointerGetAttribute(MEMORY_TYPE) and of cuPointerGetAttributes(MEMORY_TYPE,
DEVICE_ORDINAL, RANGE_START_ADDR, RANGE_SIZE) through the real entry
(memhook_hooks_original) and through memhook.  CALLS (200,000) per round.
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
    calls = argv[0] if argv else "200000"
    mode = argv[1] if len(argv) > 1 else "bistro,reloc"
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "pointer_attr_bench"
        subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        f"-I{ROOT / 'csrc' / 'include'}", str(HERE / "pointer_attr_bench.c"),
                        "-o", str(exe), f"-L{lib.parent}", "-lmemhook", "-ldl"],
                       check=True)
        real = bool(os.environ.get("MEMHOOK_BENCH_REAL_DRIVER"))
        env = dict(os.environ) if real else memhook.sim.environ()
        env.update(LD_PRELOAD=str(lib), LD_LIBRARY_PATH=":".join(
            [str(lib.parent), *[p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]]),
            MEMHOOK_INSTALL_AT_LOAD="1", MEMHOOK_POINTER_ATTRIBUTES="1", MEMHOOK_CUDA_MODE=mode)
        print(f"driver: {'real' if real else 'simulator'}; mode {mode}", flush=True)
        return subprocess.run([str(exe), calls], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
