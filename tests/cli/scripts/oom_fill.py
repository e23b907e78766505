"""A traced program that runs a 32 MiB simulated device out of memory
(``MEMHOOK_SIM_DEVICE_MEMORY=32M``) from two libraries and three Python
functions, then fails one request, and ends as its argument says:
``exit`` (normally, having freed ``weights()``'s memory after the
failure), ``_exit`` (``os._exit``) or ``kill`` (SIGKILL to
itself right after the failed call).

* ``weights()``: 3 x 6 MiB through cuda-python (its driver binding library);
* ``activations()``: 2 x 4 MiB through ctypes (libffi);
* ``scratch()``: 1 MiB through ctypes, freed before the failure;
* ``grow()``: a 16 MiB request through ctypes, which fails.

Prints ``failed N`` (the failed call's result) before it ends.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from cuda.bindings import driver as cu

MiB = 1 << 20
libcuda = ctypes.CDLL("libcuda.so.1")


def check(result):
    err, *values = result
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else tuple(values)


# Each function calls the driver itself, so each is a call site of its own.

def weights() -> list:
    out = []
    for _ in range(3):
        out.append(check(cu.cuMemAlloc(6 * MiB)))
    return out


def activations() -> list[int]:
    out = []
    for _ in range(2):
        ptr = ctypes.c_uint64(0)
        assert libcuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(4 * MiB)) == 0
        out.append(ptr.value)
    return out


def scratch() -> None:
    ptr = ctypes.c_uint64(0)
    assert libcuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 * MiB)) == 0
    assert libcuda.cuMemFree_v2(ptr) == 0


def grow() -> int:
    ptr = ctypes.c_uint64(0)
    return libcuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(16 * MiB))


def main() -> int:
    how = sys.argv[1]
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    held = weights(), activations()
    scratch()
    rc = grow()
    print(f"failed {rc}", flush=True)
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "_exit":
        os._exit(3)
    for ptr in held[0]:  # (what the report shows is what was live at the failure)
        check(cu.cuMemFree(ptr))
    return 0


if __name__ == "__main__":
    sys.exit(main())
