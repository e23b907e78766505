"""A traced program with three call sites of its own, for `memhook diff`
and `memhook merge`: ``weights`` holds one buffer until the end, ``scratch``
allocates and frees, ``cache`` allocates and frees - except with the
argument ``leak``, when it keeps its 3 allocations (never freed).

Prints ``done`` at the end.
"""

from __future__ import annotations

import sys

from cuda.bindings import driver as cu

MiB = 1 << 20


def check(result):
    err, *values = result
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else tuple(values)


def weights():
    return check(cu.cuMemAlloc(8 * MiB))


def scratch(n):
    ptr = check(cu.cuMemAlloc(n))
    check(cu.cuMemFree(ptr))


def cache(keep):
    ptr = check(cu.cuMemAlloc(64 * 1024))
    if not keep:
        check(cu.cuMemFree(ptr))


def main() -> int:
    leak = sys.argv[1:] == ["leak"]
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    kept = weights()
    for _ in range(3):
        scratch(2 * MiB)
        cache(leak)
    check(cu.cuMemFree(kept))
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
