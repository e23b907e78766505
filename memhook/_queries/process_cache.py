"""The process cache as a :class:`~memhook.MemtypeCache`: a view of the one
cache the core keeps (csrc/cache/, ``memhook_cache_*`` in memhook.h).

:func:`memhook.cache.process_cache` returns this view.  Its methods have
``MemtypeCache``'s signatures and semantics, and read and write the core's
cache, which the hooks feed and every asker in the process reads
(``memhook_query`` in C, :func:`memhook.memory_type` in Python): a
transport that knows of memory the hooks cannot see records it here, and
the queries see it at once.  Like a ``MemtypeCache`` it answers from what
it holds - no driver call - while the module-level queries also ask the
driver where the hooks do not vouch.

The core keeps regions per allocation (each with its id).  ``regions()`` and
``len()`` merge touching regions of one type and device, as
``MemtypeCache`` does; ``lookup()`` of a range inside one allocation gives
that allocation (a ``MemtypeCache`` would give the merged run around it: the
same type and device, a wider extent), and of a range over touching
allocations of one type, the run, as ``MemtypeCache`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .._binding.core import ffi, lib
from .inputs import address_array, byte_range
from .._values.types import MemoryType, Region, _make_region
from ..cache import MemtypeCache, _as_device, _as_memory_type, _checked_range

__all__ = ["ProcessCache"]

_TYPES = tuple(MemoryType)
_UNKNOWN = MemoryType.UNKNOWN
_IN, _RUN = 1, 2  # memhook_cache_lookup's answers (0: no region, 3: mixed)


def _check(rc: int, what: str) -> None:
    if rc == -12:  # -ENOMEM
        raise MemoryError(f"memhook: the process cache could not map memory for {what}")
    if rc != 0:  # (the arguments were checked: a core that disagrees is a bug)
        raise ValueError(f"memhook: the process cache refused {what} (error {-rc})")


class ProcessCache(MemtypeCache):
    """The core's process cache, with :class:`~memhook.MemtypeCache`'s
    methods (see the module docstring)."""

    __slots__ = ()  # (MemtypeCache's own map stays empty: every method below is the core's)

    # ------------------------------------------------------------------ reads

    def _classify_range(self, start: int, n: int) -> tuple[int, Any]:
        out = ffi.new("memhook_region *", {"struct_size": ffi.sizeof("memhook_region")})
        if start + n == 1 << 64:  # (the core's ranges end by 2**64 - 1: no region holds that byte)
            n -= 1
            if n == 0:
                return 0, out
        k = int(lib.memhook_cache_lookup(ffi.cast("void *", start), n, out))
        return k, out

    def lookup(self, ptr: Any, size: Any = 1) -> Region | None:
        """:meth:`MemtypeCache.lookup` of the process cache (no driver call)."""
        start, n = byte_range(ptr, size)
        k, out = self._classify_range(start, n)
        if k == _IN or k == _RUN:
            return _make_region(int(out.base), int(out.size), _TYPES[out.mem_type],
                                int(out.device))
        if k == 0:
            return None
        return _make_region(start, n, _UNKNOWN, -1)

    def memory_type(self, ptr: Any, size: Any = 1) -> MemoryType:
        """:meth:`MemtypeCache.memory_type` of the process cache (no driver call)."""
        start, n = byte_range(ptr, size)
        k, out = self._classify_range(start, n)
        if k == 0:
            return MemoryType.HOST
        return _TYPES[out.mem_type] if k in (_IN, _RUN) else _UNKNOWN

    def memory_types(self, ptrs: Any) -> np.ndarray:
        """:meth:`MemtypeCache.memory_types` of the process cache (no driver call)."""
        arr = np.ascontiguousarray(address_array(ptrs))
        out = np.empty(arr.shape, dtype=np.uint8)
        lib.memhook_cache_regions(ffi.NULL, 0)  # (brings the snapshot up to date)
        lib.memhook_query_types_cached(ffi.from_buffer("uint64_t[]", arr), len(arr),
                                       ffi.from_buffer("uint8_t[]", out))
        shape = getattr(ptrs, "shape", None)
        return out.reshape(shape) if shape is not None and len(shape) != 1 else out

    def regions(self) -> list[Region]:
        """The regions in address order, touching ones of one type and device
        merged (a copy)."""
        cap = 0
        while True:
            buf = ffi.new("memhook_region[]", max(cap, 1))
            n = int(lib.memhook_cache_regions(buf, cap))
            if n <= cap:
                break
            cap = n + 64  # (grown meanwhile: ask again)
        merged: list[Region] = []
        last_end = -1
        for i in range(n):
            r = buf[i]
            start, size, t, dev = int(r.base), int(r.size), int(r.mem_type), int(r.device)
            if merged and last_end == start and merged[-1].mem_type is _TYPES[t] and \
                    merged[-1].device == dev:
                prev = merged[-1]
                merged[-1] = _make_region(prev.start, prev.size + size, prev.mem_type, dev)
            else:
                merged.append(_make_region(start, size, _TYPES[t], dev))
            last_end = start + size
        return merged

    def __len__(self) -> int:
        return len(self.regions())

    def __iter__(self) -> Iterator[Region]:
        return iter(self.regions())

    def __repr__(self) -> str:
        return f"<process cache (memhook's core): {len(self)} regions>"

    # ----------------------------------------------------------------- writes

    def update(self, start: Any, size: Any, mem_type: Any, device: Any = -1) -> None:
        """:meth:`MemtypeCache.update` of the process cache: queued after
        every event published before the call."""
        start, size = _checked_range(start, size)
        t = _as_memory_type(mem_type)
        dev = _as_device(device)
        if dev > 0x7FFF:
            raise ValueError(f"device {dev} is past the core's device ordinals (0-32767)")
        _check(lib.memhook_cache_update(start, size, int(t), dev), "an update")

    def remove(self, start: Any, size: Any) -> None:
        """:meth:`MemtypeCache.remove` of the process cache."""
        start, size = _checked_range(start, size)
        _check(lib.memhook_cache_remove(start, size), "a remove")

    def clear(self) -> None:
        """Forget every region of the process cache."""
        _check(lib.memhook_cache_clear(), "a clear")
