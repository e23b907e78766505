"""Issue 36's case for ``memhook trace --python``: one helper, ``alloc()``,
makes every allocation through ctypes; a weight load calls it for 128 MiB
(freed at the end, or kept: ``keep``), a worker thread calls it three times
for 1 MiB and leaks them, and a cuda-python call leaks 2 MiB more.  Run
as ``helper_leak.py free|keep``."""

from __future__ import annotations

import ctypes
import sys
import threading

from cuda.bindings import driver as cu

MiB = 1 << 20
libcuda = ctypes.CDLL("libcuda.so.1")


def alloc(nbytes: int) -> int:
    ptr = ctypes.c_uint64(0)
    assert libcuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)) == 0
    return ptr.value


def load_weights() -> int:
    return alloc(128 * MiB)


def worker(ctx: object) -> None:
    assert cu.cuCtxSetCurrent(ctx)[0] == cu.CUresult.CUDA_SUCCESS
    for _ in range(3):
        alloc(1 * MiB)


def scratch() -> None:
    err, _ = cu.cuMemAlloc(2 * MiB)
    assert err == cu.CUresult.CUDA_SUCCESS, err


def main() -> int:
    keep = sys.argv[1:] == ["keep"]
    assert cu.cuInit(0)[0] == cu.CUresult.CUDA_SUCCESS
    _, dev = cu.cuDeviceGet(0)
    _, ctx = cu.cuDevicePrimaryCtxRetain(dev)
    assert cu.cuCtxSetCurrent(ctx)[0] == cu.CUresult.CUDA_SUCCESS
    weights = load_weights()
    thread = threading.Thread(target=worker, args=(ctx,))
    thread.start()
    thread.join()
    scratch()
    if not keep:
        assert libcuda.cuMemFree_v2(ctypes.c_uint64(weights)) == 0
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
