"""The workload of bench/hooks/pyframes_bench.py: ``python pyframes_loop.py N
DEPTH``: N cuMemAlloc_v2 calls (ctypes, the GIL released around each, as
the common libraries do) DEPTH Python frames deep, then their frees, three
times; prints the best round's ns per allocation (the loop alone), in the
allocating thread's CPU time: the hook runs on that thread, and CPU time
leaves out what other processes take from it (the collector among them, on
a small shared box), which wall time would count."""

from __future__ import annotations

import ctypes
import sys
import time
from typing import Callable

cuda = ctypes.CDLL("libcuda.so.1")


def setup() -> None:
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    ctx = ctypes.c_void_p()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0


def allocate(n: int) -> float:
    alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
    ptr = ctypes.c_uint64()
    ref, size = ctypes.byref(ptr), ctypes.c_size_t(4096)
    ptrs = []
    t0 = time.thread_time_ns()
    for _ in range(n):
        alloc(ref, size)
        ptrs.append(ptr.value)
    elapsed = time.thread_time_ns() - t0
    for p in ptrs:
        free(ctypes.c_uint64(p))
    return elapsed / n


def nest(depth: int) -> Callable[[int], float]:
    """DEPTH distinct functions calling one another down to allocate(): a
    stack of distinct code objects, as a program's is (a recursion repeats
    code objects, which the capture looks up once a walk)."""
    space: dict = {"allocate": allocate}
    callee = "allocate"
    for level in range(depth - 1):
        exec(compile(f"def level_{level}(n):\n    return {callee}(n)\n",
                     f"<bench level {level}>", "exec"), space)
        callee = f"level_{level}"
    return space[callee]


if __name__ == "__main__":
    n, depth = int(sys.argv[1]), int(sys.argv[2])
    setup()
    run = nest(depth)
    run(1000)  # warm: code records written, caches filled
    print(f"ns_per_alloc {min(run(n) for _ in range(3)):.1f}", flush=True)
