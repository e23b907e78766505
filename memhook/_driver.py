"""Asking the CUDA driver what a pointer is - without ever loading or
initialising it.

The module-level queries (:func:`memhook.memory_type` and friends) come here
for what the cache cannot vouch for.  Rules:

* The driver is only used when ``libcuda.so.1`` is *already* loaded in the
  process (``dlopen(RTLD_NOLOAD)``): memhook never loads a driver, so a
  process that does not use CUDA keeps not using it.  ``dlopen(RTLD_NOLOAD)``
  of a library that is not loaded costs tens of microseconds (it searches the
  library path), so it is repeated only when the loader's object count
  (``dl_iterate_phdr``'s ``dlpi_adds``, read by the core's
  ``memhook_loader_generation``: a ctypes callback would leave a
  writable+executable libffi page in the process) has changed.
* The query is ``cuPointerGetAttributes`` (MEMORY_TYPE, IS_MANAGED,
  DEVICE_ORDINAL, RANGE_START_ADDR, RANGE_SIZE, MAPPING_BASE_ADDR,
  MAPPING_SIZE), called through ctypes on the loaded driver's own handle: the
  same driver function cuda-python's ``cuPointerGetAttributes`` calls, at a
  fraction of the cost and without importing cuda-python.  It never
  initialises CUDA: before ``cuInit`` it answers CUDA_ERROR_NOT_INITIALIZED,
  which means "no answer" (as does any other error, e.g. in a forked child).
* The extent remembered is the allocation's range (RANGE_START_ADDR/SIZE)
  cut to the physical mapping that holds the pointer (MAPPING_BASE_ADDR/SIZE)
  where the driver has those attributes - so a VMM reservation mapped piece by
  piece is remembered piece by piece - falling back to
  ``cuMemGetAddressRange_v2`` and finally to the range asked about.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, NamedTuple

from ._types import MemoryType

try:
    from ._core import lib as _core_lib
except ImportError:  # the source tree without its native build (bench on a bare host)
    _core_lib = None

__all__ = ["DriverAnswer", "driver_loaded", "is_cuda", "query"]

_SONAME = b"libcuda.so.1"

# CUpointer_attribute
_MEMORY_TYPE = 2
_IS_MANAGED = 8
_DEVICE_ORDINAL = 9
_RANGE_START_ADDR = 11
_RANGE_SIZE = 12
_MAPPING_SIZE = 18
_MAPPING_BASE_ADDR = 19
# CUmemorytype
_CU_HOST, _CU_DEVICE, _CU_ARRAY, _CU_UNIFIED = 1, 2, 3, 4
_CUDA_SUCCESS = 0


class DriverAnswer(NamedTuple):
    """What the driver said about one pointer.  ``mem_type`` is HOST when the
    driver does not know the pointer; ``start``/``size`` is the extent to
    remember (only for CUDA-known memory)."""

    mem_type: MemoryType
    device: int
    start: int
    size: int


class _Driver:
    """The loaded driver's entry points, found lazily and never loaded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        # ctypes function pointers, bound lazily (Any: ctypes has no precise type for them)
        self._get_attributes: Any = None
        self._get_range: Any = None
        self._with_mapping = True
        self._seen_adds = -1
        libc = ctypes.CDLL(None)
        self._dlopen = libc.dlopen
        self._dlopen.restype = ctypes.c_void_p
        self._dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]

    def _loader_generation(self) -> int:
        if _core_lib is None:  # no cheap counter: look every time
            return self._seen_adds + 1
        return int(_core_lib.memhook_loader_generation())

    def bind(self) -> bool:
        """True once the process has libcuda.so.1 loaded (it never unloads)."""
        if self._get_attributes is not None:
            return True
        with self._lock:
            if self._get_attributes is not None:
                return True
            generation = self._loader_generation()
            if generation == self._seen_adds:
                return False
            self._seen_adds = generation
            if not self._dlopen(_SONAME, os.RTLD_NOW | os.RTLD_NOLOAD):
                return False
            lib = ctypes.CDLL(_SONAME.decode(), mode=os.RTLD_NOW | os.RTLD_NOLOAD)
            fn = lib.cuPointerGetAttributes
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
            try:
                rng = lib.cuMemGetAddressRange_v2
                rng.restype = ctypes.c_int
                rng.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
                self._get_range = rng
            except AttributeError:  # pragma: no cover - ancient driver
                self._get_range = None
            self._get_attributes = fn
            return True

    def _buffers(self):  # type: ignore[no-untyped-def]
        """Per-thread argument blocks, so concurrent queries never share memory."""
        bufs = getattr(self._local, "bufs", None)
        if bufs is None:
            attrs = (ctypes.c_int * 7)(_MEMORY_TYPE, _IS_MANAGED, _DEVICE_ORDINAL,
                                       _RANGE_START_ADDR, _RANGE_SIZE,
                                       _MAPPING_BASE_ADDR, _MAPPING_SIZE)
            values = (ctypes.c_uint64 * 7)()
            data = (ctypes.c_void_p * 7)(*[ctypes.addressof(values) + 8 * i for i in range(7)])
            pair = (ctypes.c_uint64 * 2)()
            bufs = self._local.bufs = (attrs, values, data, pair)
        return bufs

    def is_cuda(self, ptr: int) -> bool:
        """True when the driver knows ``ptr`` as CUDA memory (one attribute,
        one call); False for host memory and when there is no answer."""
        fn = self._get_attributes
        if fn is None:
            if not self.bind():
                return False
            fn = self._get_attributes
        try:
            attrs, values, data, _ = self._local.bufs
        except AttributeError:
            attrs, values, data, _ = self._buffers()
        values[0] = 0
        return fn(1, attrs, data, ptr) == _CUDA_SUCCESS and values[0] & 0xFFFFFFFF != 0

    def query(self, ptr: int, size: int) -> DriverAnswer | None:
        """The driver's answer for ``ptr``, or None when there is no answer
        (no driver loaded, not initialised, or an error)."""
        fn = self._get_attributes
        if fn is None and not self.bind():
            return None
        fn = self._get_attributes
        attrs, values, data, pair = self._buffers()
        # First only MEMORY_TYPE: most pointers asked about are not CUDA's.
        values[0] = 0
        if fn(1, attrs, data, ptr) != _CUDA_SUCCESS:
            return None  # not initialised (or a forked child, or an error): no answer
        if values[0] & 0xFFFFFFFF == 0:
            return DriverAnswer(MemoryType.HOST, -1, ptr, size)
        ctypes.memset(values, 0, ctypes.sizeof(values))
        count = 7 if self._with_mapping else 5
        rc = fn(count, attrs, data, ptr)
        if rc != _CUDA_SUCCESS and count == 7:
            # A driver without the MAPPING_* attributes refuses the whole call.
            ctypes.memset(values, 0, ctypes.sizeof(values))
            if fn(5, attrs, data, ptr) == _CUDA_SUCCESS:
                self._with_mapping = False
                rc = _CUDA_SUCCESS
        if rc != _CUDA_SUCCESS:
            return None
        cu_type = values[0] & 0xFFFFFFFF
        if cu_type == 0:  # (freed between the two calls)
            return DriverAnswer(MemoryType.HOST, -1, ptr, size)
        managed = (values[1] & 0xFFFFFFFF) != 0
        device = ctypes.c_int32(values[2] & 0xFFFFFFFF).value
        if managed or cu_type == _CU_UNIFIED:
            mem_type = MemoryType.CUDA_MANAGED
        elif cu_type == _CU_HOST:
            mem_type = MemoryType.CUDA_HOST
        else:  # DEVICE, ARRAY
            mem_type = MemoryType.CUDA
        start, length = values[3], values[4]
        if (not (length and start <= ptr < start + length) and self._get_range is not None
                and self._get_range(ctypes.byref(pair, 0), ctypes.byref(pair, 8), ptr) == 0):
            start, length = pair[0], pair[1]
        if not (length and start <= ptr < start + length):
            start, length = ptr, size
        map_start, map_len = values[5], values[6]
        if map_len and map_start <= ptr < map_start + map_len:
            lo = max(start, map_start)
            hi = min(start + length, map_start + map_len)
            start, length = lo, hi - lo
        return DriverAnswer(mem_type, device if device >= 0 else -1, start, length)


_driver = _Driver()


def driver_loaded() -> bool:
    """True when libcuda.so.1 is loaded in this process (never loads it)."""
    return _driver.bind()


is_cuda = _driver.is_cuda


def query(ptr: int, size: int = 1) -> DriverAnswer | None:
    """Ask the already-loaded driver about ``ptr``; None means no answer."""
    return _driver.query(ptr, size)
