"""The first of the two files whose allocations tests/pyframes names: the
driver through ctypes.  CDLL calls release the GIL around the call (the
common case: the thread state is detached while the hook runs); PyDLL
calls keep it."""

from __future__ import annotations

import ctypes
import os

_cuda = ctypes.CDLL("libcuda.so.1")
_cuda_gil = ctypes.PyDLL("libcuda.so.1")
_context: dict[int, ctypes.c_void_p] = {}


def ensure_context() -> ctypes.c_void_p:
    """The primary context, current on the calling thread (made once per
    process: a fork child must not use its parent's)."""
    ctx = _context.get(os.getpid())
    if ctx is None:
        assert _cuda.cuInit(0) == 0
        dev = ctypes.c_int()
        assert _cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
        ctx = ctypes.c_void_p()
        assert _cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        _context[os.getpid()] = ctx
    assert _cuda.cuCtxSetCurrent(ctx) == 0
    return ctx


def alloc_ctypes(size: int, hold_gil: bool = False) -> int:
    ensure_context()
    lib = _cuda_gil if hold_gil else _cuda
    ptr = ctypes.c_uint64()
    rc = lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))  # ALLOC: alloc_ctypes
    assert rc == 0, rc
    return ptr.value


def free_ctypes(ptr: int) -> None:
    assert _cuda.cuMemFree_v2(ctypes.c_uint64(ptr)) == 0
