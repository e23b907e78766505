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
  ``memhook_loader_generation``: a Python callback would leave a
  writable+executable libffi page in the process) has changed.
* The query is ``cuPointerGetAttributes`` (MEMORY_TYPE, IS_MANAGED,
  DEVICE_ORDINAL, RANGE_START_ADDR, RANGE_SIZE, MAPPING_BASE_ADDR,
  MAPPING_SIZE), found with ``dlsym`` on the loaded driver's own handle and
  called through a function-pointer type of memhook's cffi extension
  (``DRIVER_CDEF`` in memhook/_ffi_build.py, checked against cuda_abi.h by
  the compiler): the same driver function cuda-python's
  ``cuPointerGetAttributes`` calls, at a fraction of the cost and without
  importing cuda-python.  It never
  initialises CUDA: before ``cuInit`` it answers CUDA_ERROR_NOT_INITIALIZED,
  which means "no answer" (as does any other error, e.g. in a forked child).
* The extent remembered is the allocation's range (RANGE_START_ADDR/SIZE)
  cut to the physical mapping that holds the pointer (MAPPING_BASE_ADDR/SIZE)
  where the driver has those attributes - so a VMM reservation mapped piece by
  piece is remembered piece by piece - falling back to
  ``cuMemGetAddressRange_v2`` and finally to the range asked about.
"""

from __future__ import annotations

import os
import threading
from typing import Any, NamedTuple

from .._objects.sonames import LIBCUDA_SONAME
from .._values.types import MemoryType

try:
    from .core import ffi as _ffi
    from .core import lib as _core_lib
except ImportError:  # the source tree without its native build (bench on a bare host):
    _ffi = _core_lib = None  # no binding, so no driver answers

__all__ = ["DriverAnswer", "driver_loaded", "is_cuda", "query", "type_at"]

_SONAME = LIBCUDA_SONAME.encode()

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


_ZEROS = [0] * 7


def _signed32(value: int) -> int:
    """The low 32 bits of ``value`` as a signed int (an int attribute written
    into an 8-byte slot)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _mem_type(cu_type: int, managed: bool) -> MemoryType:
    """The MemoryType of a CUmemorytype (0: the driver does not know the
    pointer) and the IS_MANAGED attribute."""
    if cu_type == 0:
        return MemoryType.HOST
    if managed or cu_type == _CU_UNIFIED:
        return MemoryType.CUDA_MANAGED
    if cu_type == _CU_HOST:
        return MemoryType.CUDA_HOST
    return MemoryType.CUDA  # DEVICE, ARRAY


class _Driver:
    """The loaded driver's entry points, found lazily and never loaded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        # cffi function pointers (mh_cuPointerGetAttributes_fn,
        # mh_cuMemGetAddressRange_fn), bound lazily; Any: cffi has no stubs.
        self._get_attributes: Any = None
        self._get_range: Any = None
        self._with_mapping = True
        self._seen_adds = -1

    def bind(self) -> bool:
        """True once the process has libcuda.so.1 loaded (it never unloads)."""
        if self._get_attributes is not None:
            return True
        if _core_lib is None:
            return False
        with self._lock:
            if self._get_attributes is not None:
                return True
            generation = int(_core_lib.memhook_loader_generation())
            if generation == self._seen_adds:
                return False
            self._seen_adds = generation
            # The handle is kept for the process's life: the driver never
            # unloads, and the pointers below must stay valid.
            handle = _core_lib.dlopen(_SONAME, _core_lib.RTLD_NOW | _core_lib.RTLD_NOLOAD)
            if handle == _ffi.NULL:
                return False
            fn = _core_lib.dlsym(handle, b"cuPointerGetAttributes")
            if fn == _ffi.NULL:  # pragma: no cover - not a CUDA driver
                return False
            rng = _core_lib.dlsym(handle, b"cuMemGetAddressRange_v2")
            self._get_range = (None if rng == _ffi.NULL  # (an ancient driver)
                               else _ffi.cast("mh_cuMemGetAddressRange_fn", rng))
            self._get_attributes = _ffi.cast("mh_cuPointerGetAttributes_fn", fn)
            return True

    def _buffers(self) -> tuple[tuple[Any, Any, Any, Any], list[Any]]:
        """An argument block for one call, and the list to give it back to
        when done: taken off this thread's free list, or made.  Per thread,
        so concurrent queries never share memory; one per call, because a
        query in a signal handler that interrupted a query on the same
        thread must not write into the block the interrupted one is about
        to read (it would read the handler's answer: HOST for a live
        allocation, seen under load).  The handler's call takes another
        block (made the first time), so a thread has as many as its
        deepest nesting.  A block lost to an exception between take and
        give-back is only memory."""
        try:
            free = self._local.free
        except AttributeError:
            free = self._local.free = []
        if free:
            return free.pop(), free
        attrs = _ffi.new("CUpointer_attribute[7]",
                         [_MEMORY_TYPE, _IS_MANAGED, _DEVICE_ORDINAL, _RANGE_START_ADDR,
                          _RANGE_SIZE, _MAPPING_BASE_ADDR, _MAPPING_SIZE])
        values = _ffi.new("uint64_t[7]")
        data = _ffi.new("void *[7]", [values + i for i in range(7)])
        pair = (_ffi.new("CUdeviceptr *"), _ffi.new("size_t *"))
        return (attrs, values, data, pair), free

    def is_cuda(self, ptr: int) -> bool:
        """True when the driver knows ``ptr`` as CUDA memory (one attribute,
        one call); False for host memory and when there is no answer."""
        fn = self._get_attributes
        if fn is None:
            if not self.bind():
                return False
            fn = self._get_attributes
        bufs, free = self._buffers()
        attrs, values, data, _ = bufs
        values[0] = 0
        known = fn(1, attrs, data, ptr) == _CUDA_SUCCESS and values[0] & 0xFFFFFFFF != 0
        free.append(bufs)
        return known

    def type_at(self, ptr: int) -> DriverAnswer | None:
        """The type and device of the byte at ``ptr`` in one call (three
        attributes, no extent: the answer's range is that one byte), or
        None when there is no answer."""
        fn = self._get_attributes
        if fn is None:
            if not self.bind():
                return None
            fn = self._get_attributes
        bufs, free = self._buffers()
        attrs, values, data, _ = bufs
        values[0:3] = _ZEROS[:3]
        rc = fn(3, attrs, data, ptr)
        free.append(bufs)
        if rc != _CUDA_SUCCESS:
            return None
        mem_type = _mem_type(values[0] & 0xFFFFFFFF, (values[1] & 0xFFFFFFFF) != 0)
        if mem_type is MemoryType.HOST:
            return DriverAnswer(mem_type, -1, ptr, 1)
        device = _signed32(values[2])
        return DriverAnswer(mem_type, device if device >= 0 else -1, ptr, 1)

    def query(self, ptr: int, size: int) -> DriverAnswer | None:
        """The driver's answer for ``ptr``, or None when there is no answer
        (no driver loaded, not initialised, or an error)."""
        fn = self._get_attributes
        if fn is None and not self.bind():
            return None
        fn = self._get_attributes
        bufs, free = self._buffers()
        try:
            return self._query(fn, bufs, ptr, size)
        finally:
            free.append(bufs)

    def _query(self, fn: Any, bufs: tuple[Any, Any, Any, Any], ptr: int, size: int) \
            -> DriverAnswer | None:
        attrs, values, data, pair = bufs
        # First only MEMORY_TYPE: most pointers asked about are not CUDA's.
        values[0] = 0
        if fn(1, attrs, data, ptr) != _CUDA_SUCCESS:
            return None  # not initialised (or a forked child, or an error): no answer
        if values[0] & 0xFFFFFFFF == 0:
            return DriverAnswer(MemoryType.HOST, -1, ptr, size)
        values[0:7] = _ZEROS
        count = 7 if self._with_mapping else 5
        rc = fn(count, attrs, data, ptr)
        if rc != _CUDA_SUCCESS and count == 7:
            # A driver without the MAPPING_* attributes refuses the whole call.
            values[0:7] = _ZEROS
            if fn(5, attrs, data, ptr) == _CUDA_SUCCESS:
                self._with_mapping = False
                rc = _CUDA_SUCCESS
        if rc != _CUDA_SUCCESS:
            return None
        cu_type = values[0] & 0xFFFFFFFF
        if cu_type == 0:  # (freed between the two calls)
            return DriverAnswer(MemoryType.HOST, -1, ptr, size)
        mem_type = _mem_type(cu_type, (values[1] & 0xFFFFFFFF) != 0)
        device = _signed32(values[2])
        start, length = values[3], values[4]
        if (not (length and start <= ptr < start + length) and self._get_range is not None
                and self._get_range(pair[0], pair[1], ptr) == _CUDA_SUCCESS):
            start, length = pair[0][0], pair[1][0]
        if not (length and start <= ptr < start + length):
            start, length = ptr, size
        map_start, map_len = values[5], values[6]
        if map_len and map_start <= ptr < map_start + map_len:
            lo = max(start, map_start)
            hi = min(start + length, map_start + map_len)
            start, length = lo, hi - lo
        return DriverAnswer(mem_type, device if device >= 0 else -1, start, length)


_driver = _Driver()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have been inside bind() at fork():
    # the child has no such thread, and bind() publishes its results whole.
    _driver._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def driver_loaded() -> bool:
    """True when libcuda.so.1 is loaded in this process (never loads it)."""
    return _driver.bind()


is_cuda = _driver.is_cuda


type_at = _driver.type_at


def query(ptr: int, size: int = 1) -> DriverAnswer | None:
    """Ask the already-loaded driver about ``ptr``; None means no answer."""
    return _driver.query(ptr, size)
