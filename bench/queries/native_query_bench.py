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

Then, as the baseline of the backlog, Python's path in a child process:
``install()``, the feeder held off while BACKLOG/2 cuMemAlloc/cuMemFree
pairs are made through ctypes, then one ``memhook.flush()`` (Python's drain
applying them to its cache, and the core feeding its own on the way).
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


PYTHON_BASELINE = r"""
import ctypes, sys, time
import memhook, memhook._feeder as feeder
backlog = int(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
memhook.install()
held = feeder._feed
feeder._feed = lambda drain: None          # no background drain meanwhile
ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
memhook.flush()
alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
for i in range(backlog // 2):
    alloc(ctypes.byref(ptr), ctypes.c_size_t(4096 * (1 + i % 8)))
    free(ptr)
t0 = time.thread_time()
n = memhook.flush()
print(f"python_flush_events {n} python_flush_ms {(time.thread_time() - t0) * 1e3:.2f}")
feeder._feed = held
"""


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
        rc = subprocess.run([str(exe), *argv], env=env).returncode
        if rc != 0:
            return rc
        env.pop("LD_PRELOAD")
        backlog = argv[1] if len(argv) > 1 else "1000000"
        return subprocess.run([sys.executable, "-c", PYTHON_BASELINE, backlog],
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
