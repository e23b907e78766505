"""A traced program that writes garbage over its own trace area's header,
for tests/cli/test_trace_area_corrupt.py.  ``python scribble.py N``: N
allocations and frees through cuda-python on memhook's simulator, then
256 seeded random bytes over the start of the area (its identity, offsets
and counters: what the hooks no longer read once it stops recording), then
``_exit(0)``.  Prints ``scribbled at ADDRESS``.
"""

from __future__ import annotations

import ctypes
import os
import random
import sys

from cuda.bindings import driver as cu


def area_start() -> int:
    for line in open("/proc/self/maps", encoding="utf-8", errors="replace"):
        fields = line.split()
        if len(fields) >= 6 and fields[5].startswith("/memfd:memhook-trace") \
                and int(fields[2], 16) == 0:
            return int(fields[0].split("-")[0], 16)
    raise SystemExit("scribble.py: no trace area mapped here (run it under memhook trace)")


def main() -> int:
    n = int(sys.argv[1])
    assert cu.cuInit(0)[0] == cu.CUresult.CUDA_SUCCESS
    _, dev = cu.cuDeviceGet(0)
    _, ctx = cu.cuDevicePrimaryCtxRetain(dev)
    cu.cuCtxSetCurrent(ctx)
    for _ in range(n):
        err, ptr = cu.cuMemAlloc(4096)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        assert cu.cuMemFree(ptr)[0] == cu.CUresult.CUDA_SUCCESS
    start = area_start()
    garbage = random.Random(33).getrandbits(256 * 8).to_bytes(256, "little")
    ctypes.memmove(start, garbage, len(garbage))
    print(f"scribbled at {start:#x}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
