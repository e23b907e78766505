#!/usr/bin/env python3
"""A Python program that asks about each buffer it makes: ``memory_type``
of every new allocation, beside other cores in the same run.

    python bench/queries/churn_bench.py [--regions 100,1000,2000,10000]
        [--core DIR ...] [--repeats 3]

Each case is a child process on the simulator: ``memhook.install()``,
REGIONS separate allocations live (2 x REGIONS made through ctypes, every
other one freed, so that no two merge), ``memhook.flush()``, then 2,000
times ``cuMemAlloc_v2``, ``memhook.memory_type`` of the new pointer (it must
answer CUDA) and ``cuMemFree_v2``: each query finds the two events pending,
drains them and publishes the core's map (a map under 2,048 regions at the
drain's commit, a larger one at the query).  The figure is the median of 5
passes, us an iteration, in the thread's CPU time.

``--core DIR`` (repeatable) preloads DIR/libmemhook.so in the child (a
``python csrc/build_native.py OUT`` build: pass OUT/memhook), named by
OUT; without it, the package's core.  A core must export what this tree's
extension links against (main's parent before a new testing entry point
may not load).  The cores run in turn, --repeats rounds.  The C path's
counterpart is ``native_query_bench.py --parts churn``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import memhook.sim

CHILD = r"""
import ctypes, sys, time
import memhook
regions = int(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
memhook.install()
ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
live = []
for i in range(2 * regions):
    assert alloc(ctypes.byref(ptr), ctypes.c_size_t(4096 * (1 + i % 4))) == 0
    live.append(ptr.value)
for p in live[::2]:
    free(ctypes.c_uint64(p))
memhook.flush()
memory_type, cuda_type = memhook.memory_type, memhook.MemoryType.CUDA
passes = []
for _ in range(5):
    t0 = time.thread_time_ns()
    for _ in range(2000):
        alloc(ctypes.byref(ptr), ctypes.c_size_t(4096))
        if memory_type(ptr.value) is not cuda_type:
            sys.exit(f"memory_type({ptr.value:#x}) did not answer CUDA")
        free(ptr)
    passes.append((time.thread_time_ns() - t0) / 2000 / 1e3)
print(f"churn_us {sorted(passes)[2]:.2f} core {memhook.library_path()}")
"""


def run(regions: int, lib: Path | None) -> float:
    env = memhook.sim.environ()
    if lib is not None:
        env["LD_PRELOAD"] = str(lib)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(regions)], env=env,
                          capture_output=True, text=True)
    found = re.search(r"churn_us (\S+) core (\S+)", proc.stdout)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"the child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    if lib is not None and Path(found.group(2)).resolve() != lib.resolve():
        raise SystemExit(f"the child loaded {found.group(2)}, not {lib}")
    return float(found.group(1))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regions", default="100,1000,2000,10000",
                    help="comma-separated counts of live regions")
    ap.add_argument("--core", type=Path, action="append",
                    help="folder with a libmemhook.so (repeatable; default: the package's)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in args.regions.split(",")]
    except ValueError:
        ap.error(f"--regions: comma-separated integers, not {args.regions!r}")
    if any(n < 1 for n in sizes):
        ap.error("--regions: each count must be at least 1")
    cores: dict[str, Path | None] = {"package": None}
    if args.core:
        cores = {d.resolve().parent.name: d.resolve() / "libmemhook.so" for d in args.core}
        if len(cores) != len(args.core):
            ap.error("--core: the folders' parents must be named apart")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for n in sizes:
        figures: dict[str, list[float]] = {name: [] for name in cores}
        for _ in range(args.repeats):
            for name, lib in cores.items():
                figures[name].append(run(n, lib))
        cells = " | ".join(f"{name} {' / '.join(f'{x:.2f}' for x in xs)}"
                           for name, xs in figures.items())
        print(f"regions {n:6d}: us an alloc + memory_type + free: {cells}", flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
