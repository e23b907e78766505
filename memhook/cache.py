"""The memory-type cache: which address ranges are which kind of memory.

:class:`MemtypeCache` is a standalone, thread-safe interval map with UCX's
memtype-cache semantics, and then some:

* regions are half-open ``[start, start + size)``, never overlapping;
* :meth:`~MemtypeCache.update` merges with the regions of the same type and
  device it overlaps *or touches*, and over other regions replaces only the
  overlapped part (the rest of them stays);
* :meth:`~MemtypeCache.remove` punches a hole: what lies outside it stays;
* a query ``[ptr, ptr + size)`` wholly inside one region gets that region;
  one covered by several touching regions of one type (they differ in device,
  or they would have been merged) gets that type, as one region with device
  -1; any other range that touches a region - running past a region's end
  into a gap or into another type, or starting in a gap and running into a
  region - is ``UNKNOWN``; a range that touches no region is ``None`` from
  :meth:`~MemtypeCache.lookup` and ``HOST`` from
  :meth:`~MemtypeCache.memory_type`.

Reads take no lock (but to answer again the rare read a write overlapped):
each write publishes the cache's state as one new tuple, in one call into
C, so ^C never leaves it half written (docs/design/python-cache.md has the
argument, the memo and the flat copy).

The process-wide cache and the module-level queries over it
(:func:`memory_type`, :func:`lookup`, :func:`memory_types`,
:func:`process_cache`) live in :mod:`memhook._queries.query`; they are named here
too, as they always were.
"""

from __future__ import annotations

import enum
import operator
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import chain, cycle
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from sortedcontainers import SortedKeyList

from ._queries import inputs as _inputs
from ._queries.search import snapshot_memory_types
from ._queries.inputs import ADDRESS_LIMIT, address_array, byte_range
from ._values.types import MemoryType, Region, _make_region
from ._events.atomic import commit, held_here

if TYPE_CHECKING:
    from ._queries.query import lookup, memory_type, memory_types, process_cache

__all__ = [
    "HOT_LIMIT",
    "MemtypeCache",
    "lookup",
    "memory_type",
    "memory_types",
    "process_cache",
]

HOST = MemoryType.HOST
UNKNOWN = MemoryType.UNKNOWN
_ADDRESS_MAX = ADDRESS_LIMIT - 1
_MEMORY_TYPES = tuple(MemoryType)

_ONE = 1
_ALL = slice(None)
_setitem = operator.setitem
HOT_LIMIT = 8192
"""Entries of the per-pointer memo before it is emptied and refilled."""

FLAT_LIMIT = 64
"""Up to this many regions, every write makes a new flat copy of the regions
for single lookups to read.  A larger cache makes one only once it has
answered ``FLAT_AFTER`` times its number of regions in lookups since its last
write (a read-mostly cache), and drops it at the next write."""

FLAT_AFTER = 4
"""See ``FLAT_LIMIT``: so a flat copy costs at most about a quarter of a
region's copy per lookup, however writes and lookups interleave."""

LOAD = 250
"""The sorted list's sublist length (sortedcontainers' ``_load``; its default
is 1000): shorter sublists make the inserts and deletes of updates cheaper
(they shift the sublist), at no cost to lookups."""

FLAT_HOT_LIMIT = 256
"""The memo's limit for such a small cache: its lookups are cheap anyway, and a
small memo costs a cold lookup less."""

MEMO_SAMPLE = 4
"""A single-byte answer not found in the memo is put there one time in this
many (process-wide turns, read once: ``_memo_turn``), so that lookups of
pointers asked about once mostly skip the insert, and a pointer asked about
again and again is memoised after a few asks."""

_memo_turn = cycle((True,) + (False,) * (MEMO_SAMPLE - 1))
"""``next(_memo_turn)``: whether this fresh answer goes into the memo (a C
iterator: thread-safe, and cheaper than a counter kept in Python)."""

# What _classify found for a range.
_FOUND = 0    # wholly inside one region (returned)
_RUN = 1      # covered by touching regions of one type (a synthesised region)
_MIXED = 2    # touches a region but is not covered by one type
_ABSENT = 3   # touches no region
_BLOCKED = 4  # not read: a write is under way (_classify_checked with wait_s)

_ABSENT_CODE = 255  # internal code for "no region" in batch answers

_State = tuple[Optional[list[int]], Optional[list[Optional[MemoryType]]], dict[int, MemoryType], int]

_BUSY: _State = ([], [None], {}, 0)
"""What ``MemtypeCache._flat`` holds while a write is under way: its lookups find
nothing (the memo stays empty), so readers take the locked path."""

for _name in ("_maxes", "_keys", "_lists", "_delete", "_expand", "_len", "_load", "_index",
              "_reset"):
    if not hasattr(SortedKeyList(key=abs), _name):  # pragma: no cover - sortedcontainers 3?
        raise ImportError(f"memhook.cache needs sortedcontainers 2.x (SortedKeyList.{_name} "
                          "is missing); install sortedcontainers>=2.4,<3")


def _flat_copy(regions: list[Region], ends: list[int]) \
        -> tuple[list[int], list[MemoryType | None]]:
    """``(bounds, types)`` for regions in address order and their ends: the
    region starts and ends interleaved, between 0 and 2**64, so that
    ``types[bisect_right(bounds, ptr)]`` is the type of ``ptr`` - HOST in a
    gap, None out of range.  A gap of no length (touching regions) is a pair
    of equal bounds, which ``bisect_right`` steps over."""
    n = len(regions)
    bounds: list[int] = [0] * (2 * n + 2)
    bounds[1:-1:2] = map(_get_start, regions)
    bounds[2:-1:2] = ends
    bounds[-1] = ADDRESS_LIMIT
    types: list[MemoryType | None] = [HOST] * (2 * n + 3)
    types[0] = types[-1] = None
    types[2:-1:2] = map(_get_type, regions)
    return bounds, types


def _region_builder() -> type | None:
    """A plain class with Region's slots: an instance of it, its fields
    stored, becomes a Region by assigning ``__class__`` - about half the cost
    of setting a frozen Region's fields through their descriptors, and
    updates make one Region each.  None where that does not work (Python
    3.9: Region has no slots)."""
    slots = getattr(Region, "__slots__", None)
    if not slots:  # pragma: no cover - Python 3.9
        return None
    builder = type("_RegionBuilder", (), {"__slots__": tuple(slots)})
    try:
        r = builder()
        for name, value in zip(("start", "size", "mem_type", "device"), (1, 2, HOST, -1)):
            setattr(r, name, value)
        r.__class__ = Region
    except (TypeError, AttributeError):  # pragma: no cover - a Region of another shape
        return None
    if r != Region(1, 2, HOST, -1):  # pragma: no cover
        return None
    return builder


_RegionBuilder = _region_builder()


def _end_of(region: Region) -> int:
    return region.start + region.size


_get_start = attrgetter("start")
_get_type = attrgetter("mem_type")


_MEMORY_TYPE_FORMS = (f"a MemoryType, its code (0-{len(_MEMORY_TYPES) - 1}) or its name "
                      f"({', '.join(MemoryType.__members__)})")


def _as_memory_type(value: object) -> MemoryType:
    """``mem_type`` as update() takes it: a MemoryType member, its int code
    (an int, numpy or ctypes integer) or its name (any case).  A bool is
    refused (``True`` is not a code: a flag passed for a type is a bug), and
    so is a member of another enumeration (cuda-python's ``CUmemorytype``
    numbers the kinds differently: its DEVICE is 2, MemoryType's CUDA is 1)."""
    if type(value) is MemoryType:
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        member = MemoryType.__members__.get(value.upper())
        if member is None:
            raise ValueError(f"mem_type {value!r} is not a MemoryType name; valid: "
                             f"{_MEMORY_TYPE_FORMS}")
        return member
    if isinstance(value, int) and type(value) is not int and not isinstance(value, bool) and (
            isinstance(value, enum.Enum) or hasattr(type(value), "__members__")):
        raise TypeError(f"mem_type must be a MemoryType, not {type(value).__name__} (another "
                        f"enumeration: its codes are not MemoryType's); valid: "
                        f"{_MEMORY_TYPE_FORMS}")
    code = _inputs.integer(value, "mem_type", _MEMORY_TYPE_FORMS, "a MemoryType")
    if not 0 <= code < len(_MEMORY_TYPES):
        raise ValueError(f"mem_type {code} is not a MemoryType code; valid: {_MEMORY_TYPE_FORMS}")
    return _MEMORY_TYPES[code]


_DEVICE_FORMS = ("a device ordinal (0, 1, ...) or -1 (unknown), as an int, a numpy or ctypes "
                 "integer, or a handle with __int__ such as cuda-python's CUdevice")


def _as_device(value: object) -> int:
    """``device`` as update() takes it: an ordinal (an int, numpy or ctypes
    integer, or a handle with ``__int__`` such as cuda-python's ``CUdevice``)
    or -1 for unknown; a bool is refused, as for ``mem_type``."""
    device = _inputs.integer(value, "device", _DEVICE_FORMS)
    if device < -1:
        raise ValueError(f"device must be a device ordinal or -1 (unknown), got {device}; "
                         f"valid: {_DEVICE_FORMS}")
    return device


def _checked_range(start: Any, size: Any) -> tuple[int, int]:
    """An int ``(start, size)`` for update/remove, or TypeError/ValueError."""
    if (type(start) is int and type(size) is int and start >= 0 and size >= 1
            and start + size <= ADDRESS_LIMIT):
        return start, size
    start = _inputs.address(start, "start")
    size = _inputs.size(size)
    if start + size > ADDRESS_LIMIT:
        raise ValueError(f"the range [{start:#x}, {start:#x} + {size}) runs past the end of "
                         "the 64-bit address space")
    return start, size


class MemtypeCache:
    """A thread-safe map from address ranges to (memory type, device).

    See the module docstring for the semantics and the design.  All methods
    may be called from any thread; readers never block each other and take
    no lock in the common case.  A cache made by hand answers only from what
    it was told: it never drains hooks and never asks a driver (the
    module-level :func:`memory_type` and friends do, on the process-wide
    cache).

    In the complexity lines, *n* is the number of regions and *k* the number
    of regions a range overlaps or touches.

    >>> from memhook import MemtypeCache, MemoryType
    >>> cache = MemtypeCache()
    >>> cache.update(0x10000, 0x1000, MemoryType.CUDA, device=0)
    >>> cache.memory_type(0x10800)
    <MemoryType.CUDA: 1>
    >>> cache.memory_type(0x20000)      # in no region
    <MemoryType.HOST: 0>
    >>> len(cache)
    1
    """

    __slots__ = (
        "__weakref__",
        "_delete",
        "_flat",
        "_half_load",
        "_keys",
        "_lists",
        "_load2",
        "_lock",
        "_maxes",
        "_quiet",
        "_regions",
        "_snapshot",
        "_version",
    )

    def __init__(self) -> None:
        # An RLock for _is_owned (a write never takes it twice: _writing).
        self._lock = threading.RLock()
        self._regions = SortedKeyList(key=_end_of)
        self._regions._reset(LOAD)
        # sortedcontainers mutates these three lists in place, never rebinds them.
        self._maxes: list[int] = self._regions._maxes
        self._keys: list[list[int]] = self._regions._keys
        self._lists: list[list[Region]] = self._regions._lists
        self._delete = self._regions._delete
        self._load2 = self._regions._load << 1
        self._half_load = (self._regions._load >> 1) + 1  # a sublist longer keeps its place
        # The published state (see the module docstring): every write stores
        # _BUSY, changes the regions, then stores a new tuple.  So "self._flat
        # is the tuple I started with" proves to a reader that no write
        # overlapped its read of the sorted list.
        self._version = 0
        self._quiet = (0, 0)  # (version, lookups since it), counted as the memo fills
        self._flat: _State = ([0, ADDRESS_LIMIT], [None, HOST, None], {}, FLAT_HOT_LIMIT)
        self._snapshot: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _set_load(self, load: int) -> None:
        """Re-chunk the sorted list with sublists of ``load`` (tests use tiny
        loads so that splits and merges happen at a few regions)."""
        with self._lock:
            self._flat = _BUSY  # readers: a write is under way
            try:
                self._regions._reset(load)
                self._load2 = load << 1
                self._half_load = (load >> 1) + 1
            finally:
                self._published()

    # ------------------------------------------------------------------ reads

    def memory_type(self, ptr: Any, size: Any = 1) -> MemoryType:
        """The memory type of ``[ptr, ptr + size)``: the region's type when one
        region holds it all, UNKNOWN when it touches regions but no single
        type covers it, HOST when it touches none.

        ``ptr`` is an address in ``[0, 2**64)`` - an int, a numpy integer, a
        ctypes integer or pointer (``c_uint64``, ``c_void_p``, a
        ``POINTER(T)``: the address it holds), or a pointer handle with
        ``__int__`` such as cuda-python's ``CUdeviceptr``; a bool is
        refused - or an object exposing ``__cuda_array_interface__``,
        ``__array_interface__``, DLPack or the buffer protocol: then its
        whole extent is asked about, and ``size`` must be left at 1.  An
        empty object (``np.zeros(0)``, ``b''``, ``torch.empty(0)``) gets the
        type of the byte at its data pointer: HOST for a NULL one.  ``size``
        is at least 1.  Bad arguments raise TypeError or ValueError saying
        what was wrong and what is valid (see :mod:`memhook._queries.inputs`).

        Runtime complexity: O(1) for a pointer asked about recently (the
        memo), else O(log n).

        >>> import ctypes
        >>> from memhook import MemtypeCache, MemoryType
        >>> cache = MemtypeCache()
        >>> cache.update(0x10000, 0x1000, MemoryType.CUDA_MANAGED)
        >>> cache.memory_type(0x10000)
        <MemoryType.CUDA_MANAGED: 2>
        >>> cache.memory_type(0x10000, 0x1000)   # the whole region
        <MemoryType.CUDA_MANAGED: 2>
        >>> cache.memory_type(0x10800, 0x1000)   # runs past its end
        <MemoryType.UNKNOWN: 4>
        >>> cache.memory_type(0x9000)
        <MemoryType.HOST: 0>
        >>> cache.memory_type(ctypes.c_void_p(0x10040))   # the address it holds
        <MemoryType.CUDA_MANAGED: 2>
        >>> cache.memory_type(b"")                        # empty: where it points
        <MemoryType.HOST: 0>
        """
        # The module-level memory_type() repeats this fast path (a call less);
        # keep the two in step.
        if size is _ONE and type(ptr) is int:  # (any int equal to 1 is the cached 1)
            flat = self._flat
            bounds, types, hot, limit = flat
            t = hot.get(ptr)
            if t is not None:
                return t
            if bounds is not None:  # a flat copy: one snapshot, nothing to validate
                t = types[bisect_right(bounds, ptr)]  # type: ignore[index]
                if t is not None:  # (None: an address out of range, or _BUSY)
                    if next(_memo_turn):
                        if len(hot) >= limit:
                            hot.clear()
                        hot[ptr] = t
                    return t
            else:
                try:
                    # The first region whose end is greater than ptr.
                    maxes = self._maxes
                    pos = bisect_right(maxes, ptr)
                    if pos != len(maxes):
                        r = self._lists[pos][bisect_right(self._keys[pos], ptr)]
                        t = r.mem_type if r.start <= ptr else HOST
                    else:
                        t = HOST
                except IndexError:  # a write got in the way
                    pass
                else:
                    # (only a HOST answer can come from an address out of range)
                    if self._flat is flat and (t is not HOST or 0 <= ptr <= _ADDRESS_MAX):
                        if next(_memo_turn):
                            if len(hot) >= limit:
                                self._memo_full(flat)
                            hot[ptr] = t
                        return t
        return self._memory_type_checked(ptr, size)

    def _memory_type_checked(self, ptr: Any, size: Any) -> MemoryType:
        kind, region = self._classify_checked(*byte_range(ptr, size))
        if kind is _FOUND or kind is _RUN:
            return region.mem_type  # type: ignore[union-attr]
        return UNKNOWN if kind is _MIXED else HOST

    def lookup(self, ptr: Any, size: Any = 1) -> Region | None:
        """The region holding ``[ptr, ptr + size)``; None when the range
        touches no region; ``Region(ptr, size, UNKNOWN, -1)`` when it touches
        regions but no single type covers it; for a range covered by touching
        regions of one type (different devices), one region spanning them with
        device -1.  Arguments as for :meth:`memory_type`.

        Runtime complexity: O(log n + k).

        >>> from memhook import MemtypeCache, MemoryType
        >>> cache = MemtypeCache()
        >>> cache.update(0x10000, 0x1000, MemoryType.CUDA, device=0)
        >>> cache.update(0x11000, 0x1000, MemoryType.CUDA, device=1)
        >>> cache.lookup(0x10010, 16)
        Region(start=0x10000, size=4096, mem_type=CUDA, device=0)
        >>> cache.lookup(0x10800, 0x1000)      # one type, two devices
        Region(start=0x10000, size=8192, mem_type=CUDA, device=-1)
        >>> cache.lookup(0x11800, 0x1000)      # runs into a gap
        Region(start=0x11800, size=4096, mem_type=UNKNOWN, device=-1)
        >>> cache.lookup(0x50000) is None
        True
        """
        start, n = byte_range(ptr, size)
        kind, region = self._classify_checked(start, n)
        if kind is _MIXED:
            return _make_region(start, n, UNKNOWN, -1)
        return region

    def memory_types(self, ptrs: Any) -> np.ndarray:
        """Memory types of many single-byte addresses at once, as ``uint8``
        :class:`MemoryType` codes shaped like ``ptrs`` (a numpy integer array
        or a sequence of addresses: ints, or any address form
        :meth:`memory_type` takes, such as ``CUdeviceptr`` or ``c_void_p``;
        not arrays or buffers, whose extents :meth:`memory_type` answers
        for).  The answer for each address is what :meth:`memory_type`
        gives for it.

        Runtime complexity: O(m log n) for m addresses, plus O(n) once after
        each write (the sorted snapshot the batch searches is rebuilt).

        >>> import numpy as np
        >>> from memhook import MemtypeCache, MemoryType
        >>> cache = MemtypeCache()
        >>> cache.update(0x10000, 0x1000, MemoryType.CUDA)
        >>> cache.update(0x20000, 0x1000, MemoryType.CUDA_HOST)
        >>> codes = cache.memory_types(np.array([0x10000, 0x20fff, 0x30000], dtype=np.uint64))
        >>> codes.tolist()
        [1, 3, 0]
        >>> [MemoryType(c).name for c in codes]
        ['CUDA', 'CUDA_HOST', 'HOST']
        """
        arr = address_array(ptrs)
        out, _ = self._memory_types(arr, False)  # type: ignore[misc]  # (waits: never None)
        shape = getattr(ptrs, "shape", None)
        return out.reshape(shape) if shape is not None and len(shape) != 1 else out

    def regions(self) -> list[Region]:
        """All regions, in address order (a copy).

        Runtime complexity: O(n).

        >>> from memhook import MemtypeCache, MemoryType
        >>> cache = MemtypeCache()
        >>> cache.update(0x20000, 0x1000, MemoryType.CUDA_HOST)
        >>> cache.update(0x10000, 0x1000, MemoryType.CUDA, device=0)
        >>> for region in cache.regions():
        ...     print(region)
        Region(start=0x10000, size=4096, mem_type=CUDA, device=0)
        Region(start=0x20000, size=4096, mem_type=CUDA_HOST, device=-1)
        """
        with self._lock:
            return list(self._regions)

    def __len__(self) -> int:
        """The number of regions (touching regions of one type and device
        count as one: they are merged).  Runtime complexity: O(1)."""
        return len(self._regions)

    def __iter__(self) -> Iterator[Region]:
        return iter(self.regions())

    def __repr__(self) -> str:
        return f"<MemtypeCache: {len(self)} regions>"

    # ----------------------------------------------------------------- writes

    def update(self, start: Any, size: Any, mem_type: Any, device: Any = -1) -> None:
        """Record ``[start, start + size)`` as ``mem_type`` on ``device``:
        merged with the regions of the same type and device it overlaps or
        touches; over other regions it replaces only the overlapped part.

        ``start`` is an address in ``[0, 2**64)`` (any form
        :meth:`memory_type` takes as a pointer value), ``size`` at least 1
        and the range must end by 2**64.  ``mem_type`` is a
        :class:`MemoryType`: the member, its code (an int, numpy or ctypes
        integer: 0-4) or its name (``"CUDA_HOST"``, any case).  ``device``
        is a device ordinal or -1 (unknown): an int, numpy or ctypes
        integer, or a handle with ``__int__`` (cuda-python's ``CUdevice``).
        One rule for all four: a bool is refused (``True`` is a flag, not a
        code, an ordinal or an address: passing one is a bug), and so is
        a member of another enumeration as ``mem_type`` (cuda-python's
        ``CUmemorytype`` numbers the kinds differently).  Bad arguments
        raise TypeError (the wrong kind of value) or ValueError (out of
        range, or an unknown name), saying what is valid, and change
        nothing.

        Runtime complexity: O(log n + k), plus O(n) for a small cache
        (up to ``FLAT_LIMIT`` regions), which copies its regions flat.

        >>> from memhook import MemtypeCache, MemoryType
        >>> cache = MemtypeCache()
        >>> cache.update(0x10000, 0x1000, MemoryType.CUDA, device=0)
        >>> cache.update(0x11000, 0x1000, MemoryType.CUDA, device=0)  # touches: merged
        >>> cache.update(0x10800, 0x100, "CUDA_HOST")                  # replaces a part
        >>> for region in cache.regions():
        ...     print(region)
        Region(start=0x10000, size=2048, mem_type=CUDA, device=0)
        Region(start=0x10800, size=256, mem_type=CUDA_HOST, device=-1)
        Region(start=0x10900, size=5888, mem_type=CUDA, device=0)
        >>> cache.update(0x10000, 0, MemoryType.CUDA)
        Traceback (most recent call last):
            ...
        ValueError: size must be at least 1 byte...
        """
        if not (type(start) is int and type(size) is int and start >= 0 and size >= 1
                and (end := start + size) <= ADDRESS_LIMIT):
            start, size = _checked_range(start, size)
            end = start + size
        if type(mem_type) is not MemoryType:
            mem_type = _as_memory_type(mem_type)
        if type(device) is not int or device < -1:
            device = _as_device(device)
        self._writing()
        with self._lock:
            maxes = self._maxes
            pos = bisect_left(maxes, start)  # first sublist with an end >= start
            if pos != len(maxes):
                keys = self._keys[pos]
                idx = bisect_left(keys, start)
                r = self._lists[pos][idx]
                if r.start <= end:  # something overlaps or touches: the general case
                    touching = self._touching(pos, idx, end)
                    if (len(touching) == 1 and r.mem_type is mem_type and r.device == device
                            and r.start <= start and end <= keys[idx]):
                        return  # already recorded as such: nothing changes, memos stay
                    self._update_over(pos, idx, touching, start, end, mem_type, device)
                    return
            else:
                idx = 0
            # Touches nothing (the usual allocation): the new region goes
            # where a key of `end` goes, i.e. at (pos, idx).
            if _RegionBuilder is not None:
                region = _RegionBuilder()
                region.start = start
                region.size = size
                region.mem_type = mem_type
                region.device = device
                region.__class__ = Region
            else:  # pragma: no cover - Python 3.9
                region = _make_region(start, size, mem_type, device)
            self._splice(pos, idx, 0, [region], [end])

    def remove(self, start: Any, size: Any) -> None:
        """Forget ``[start, start + size)``: regions lose the overlapped part
        and keep the rest (a region may be split in two).  Removing a range
        no region touches does nothing.  Arguments as for :meth:`update`.

        Runtime complexity: O(log n + k), plus O(n) for a small cache, as for
        :meth:`update`.

        >>> from memhook import MemtypeCache, MemoryType
        >>> cache = MemtypeCache()
        >>> cache.update(0x10000, 0x3000, MemoryType.CUDA, device=0)
        >>> cache.remove(0x11000, 0x1000)      # punches a hole
        >>> for region in cache.regions():
        ...     print(region)
        Region(start=0x10000, size=4096, mem_type=CUDA, device=0)
        Region(start=0x12000, size=4096, mem_type=CUDA, device=0)
        >>> cache.memory_type(0x11000)
        <MemoryType.HOST: 0>
        """
        if not (type(start) is int and type(size) is int and start >= 0 and size >= 1
                and (end := start + size) <= ADDRESS_LIMIT):
            start, size = _checked_range(start, size)
            end = start + size
        self._writing()
        with self._lock:
            maxes = self._maxes
            pos = bisect_right(maxes, start)  # first sublist with an end > start
            if pos == len(maxes):
                return
            keys = self._keys[pos]
            idx = bisect_right(keys, start)
            sub = self._lists[pos]
            r_start = sub[idx].start
            if r_start >= end:
                return  # nothing overlaps
            if r_start == start and keys[idx] == end:  # a whole region: the usual free
                self._splice(pos, idx, 1, [], [])
                return
            hit = [x for x in self._touching(pos, idx, end) if x.start < end]
            adds: list[Region] = []
            first, last = hit[0], hit[-1]
            if first.start < start:
                adds.append(_make_region(first.start, start - first.start, first.mem_type,
                                         first.device))
            last_end = _end_of(last)
            if last_end > end:
                adds.append(_make_region(end, last_end - end, last.mem_type, last.device))
            self._splice(pos, idx, len(hit), adds, [_end_of(x) for x in adds])

    def clear(self) -> None:
        """Forget every region.

        Runtime complexity: O(n).

        >>> from memhook import MemtypeCache, MemoryType
        >>> cache = MemtypeCache()
        >>> cache.update(0x10000, 0x1000, MemoryType.CUDA)
        >>> cache.clear()
        >>> len(cache), cache.lookup(0x10000)
        (0, None)
        """
        self._writing()
        with self._lock:
            regions = self._regions
            self._commit([(_setitem, part, _ALL, ()) for part in
                          (self._lists, self._keys, self._maxes, regions._index)], 0,
                         self._empty_state())

    # -------------------------------------------------------------- internals

    def _owned_here(self, above: int) -> bool:
        """Whether this thread holds the lock in a frame still running (a
        signal handler nested in a call of this cache: ``above`` names the
        first frame to look at, memhook._events.atomic.held_here).  A lock an
        exception left held - after acquire() returned, before the try that
        releases it - is given back here."""
        lock = self._lock
        if not lock._is_owned():  # type: ignore[attr-defined]
            return False
        if held_here(_CACHE_CODES, above):
            return True
        while lock._is_owned():  # type: ignore[attr-defined]
            lock.release()
        return False

    def _writing(self) -> None:
        """Refuse a write on a thread inside this cache already: a signal
        handler that interrupted a write (or a read holding the lock) and
        writes would otherwise wait for its own thread for ever, or make
        the interrupted write's plan stale."""
        if self._owned_here(4):
            raise RuntimeError("memhook: a write to a MemtypeCache from a signal handler that "
                               "interrupted this thread inside the same cache; write from "
                               "outside the handler (the process-wide cache's drain waits)")

    def _published(self) -> None:
        """End a write (caller holds the lock): publish, in one store, the new
        state - a new, empty memo and, for a small cache, a flat copy of the
        regions."""
        self._version += 1
        if self._regions._len > FLAT_LIMIT:
            self._flat = (None, None, {}, HOT_LIMIT)
        else:
            self._flat = (*self._flat_snapshot(), {}, FLAT_HOT_LIMIT)

    def _memo_full(self, state: _State) -> None:
        """A reader found the memo of ``state`` (a cache without a flat copy)
        full: empty it, and give the cache a flat copy once it has answered
        ``FLAT_AFTER`` lookups per region since its last write.

        Never waits for the lock: a reader may be a signal handler that
        interrupted its own thread inside a write (which holds the lock
        before it stores ``_BUSY`` and after it publishes), and a plain lock
        does not let its owner in again.  When the lock is taken, the memo is
        emptied and the count and copy wait for the next fill."""
        _, _, hot, limit = state
        lock = self._lock
        if self._owned_here(3):
            hot.clear()  # (a dict's clear is one step for other threads)
            return
        try:
            if not lock.acquire(False):
                hot.clear()
                return
            if self._flat is not state:
                return  # written meanwhile: that memo is gone anyway
            hot.clear()
            quiet = self._quiet  # (version, lookups since that version was published)
            count = (quiet[1] if quiet[0] == self._version else 0) + limit * MEMO_SAMPLE
            self._quiet = (self._version, count)  # about that many lookups filled the memo
            if count < FLAT_AFTER * self._regions._len:
                return
            regions = list(chain.from_iterable(self._lists))
            ends = list(chain.from_iterable(self._keys))
        finally:
            if lock._is_owned():  # type: ignore[attr-defined]
                lock.release()
        flat = _flat_copy(regions, ends)  # (outside the lock: O(regions))
        try:
            if not lock.acquire(False):
                return  # (the count stands: the next fill makes the copy)
            if self._flat is state:  # no write since: the memo's answers stay valid
                self._flat = (*flat, hot, limit)
        finally:
            if lock._is_owned():  # type: ignore[attr-defined]
                lock.release()

    def _flat_snapshot(self) -> tuple[list[int], list[MemoryType | None]]:
        """:func:`_flat_copy` of the regions (caller holds the lock)."""
        return _flat_copy(list(chain.from_iterable(self._lists)),
                          list(chain.from_iterable(self._keys)))

    # Writes.  A write first works out, reading only, what the sorted
    # list's sublists become, then makes every change - the sublists, the
    # keys, the maxima, the length, the version and the published state -
    # in one commit (memhook._events.atomic): an exception from a signal handler
    # (^C) lands before it or after it, so the cache is always one whole
    # state, never half written, and readers never see a write under way.
    # The sublists keep sortedcontainers' shape (each non-empty, at most
    # twice its load long, _maxes their last keys); the positional index
    # (_index) is never built, as no positional method of the list is used.

    def _splice(self, pos: int, idx: int, count: int, adds: list[Region],
                add_keys: list[int]) -> None:
        """Replace the ``count`` regions from ``(pos, idx)`` on, in order,
        with ``adds`` (in order, whose ends are ``add_keys``; they fit
        there), and publish (caller holds the lock).  ``idx`` may be the
        length of sublist ``pos``, and ``pos`` the number of sublists (after
        everything)."""
        lists, keys_l, maxes = self._lists, self._keys, self._maxes
        n_after = self._regions._len - count + len(adds)
        nlists = len(lists)
        if pos == nlists and nlists:
            pos = nlists - 1
            idx = len(lists[pos])
        hi, last = pos, idx + count  # the sublist holding the last region replaced
        while hi < nlists - 1 and last > len(lists[hi]):
            last -= len(lists[hi])
            hi += 1
        if hi == pos < nlists and n_after > FLAT_LIMIT:
            sub = lists[pos]
            if self._half_load <= len(sub) - count + len(adds) <= self._load2:
                keys = keys_l[pos]  # in place: the usual write
                steps: list[tuple[Any, ...]] = [
                    (_setitem, sub, slice(idx, last), adds),
                    (_setitem, keys, slice(idx, last), add_keys)]
                if last == len(sub):
                    steps.append((_setitem, maxes, pos, add_keys[-1] if adds else keys[idx - 1]))
                self._commit(steps, n_after, (None, None, {}, HOT_LIMIT))
                return
        stop = min(hi + 1, nlists)
        window = list(chain.from_iterable(lists[pos:stop]))
        window_keys = list(chain.from_iterable(keys_l[pos:stop]))
        new = window[:idx] + adds + window[idx + count:]
        new_keys = window_keys[:idx] + add_keys + window_keys[idx + count:]
        if len(new) < self._half_load and stop < nlists:  # short: joined with the next one
            new += lists[stop]
            new_keys += keys_l[stop]
            stop += 1
        load = self._load2 >> 1
        if len(new) > self._load2:
            cuts = range(0, len(new), load)
            new_lists = [new[c:c + load] for c in cuts]
            new_key_lists = [new_keys[c:c + load] for c in cuts]
        else:
            new_lists, new_key_lists = ([new], [new_keys]) if new else ([], [])
        steps = [(_setitem, lists, slice(pos, stop), new_lists),
                 (_setitem, keys_l, slice(pos, stop), new_key_lists),
                 (_setitem, maxes, slice(pos, stop), [k[-1] for k in new_key_lists])]
        index = self._regions._index
        if index:
            steps.append((_setitem, index, _ALL, ()))
        if n_after > FLAT_LIMIT:
            state: _State = (None, None, {}, HOT_LIMIT)
        else:
            state = (*_flat_copy(
                list(chain(chain.from_iterable(lists[:pos]), new,
                           chain.from_iterable(lists[stop:]))),
                list(chain(chain.from_iterable(keys_l[:pos]), new_keys,
                           chain.from_iterable(keys_l[stop:])))), {}, FLAT_HOT_LIMIT)
        self._commit(steps, n_after, state)

    def _commit(self, steps: list[tuple[Any, ...]], length: int,
                state: _State) -> None:
        """Make ``steps`` (C-level calls that change the sorted list) and
        publish ``state`` for ``length`` regions, all in one step (caller
        holds the lock)."""
        steps.append((setattr, self._regions, "_len", length))
        steps.append((setattr, self, "_version", self._version + 1))
        steps.append((setattr, self, "_flat", state))
        commit(steps)

    def _empty_state(self) -> _State:
        return ([0, ADDRESS_LIMIT], [None, HOST, None], {}, FLAT_HOT_LIMIT)

    def _update_over(self, pos: int, idx: int, touching: list[Region], start: int, end: int,
                     mem_type: MemoryType, device: int) -> None:
        """update() where regions from ``(pos, idx)`` on overlap or touch the
        range: ``touching`` (caller holds the lock).  Those of the same type
        and device merge with it; others lose the overlapped part; others
        that only touch it stay."""
        a, b = 0, len(touching)
        first, last = touching[0], touching[-1]
        if _end_of(first) == start and not (first.mem_type is mem_type and
                                            first.device == device):
            a = 1  # another type, ending where the range begins: stays
        if b > a and last.start == end and not (last.mem_type is mem_type and
                                                last.device == device):
            b -= 1  # another type, beginning where the range ends: stays
        new_start, new_end = start, end
        left: list[Region] = []
        right: list[Region] = []
        for r in touching[a:b]:
            r_end = _end_of(r)
            if r.mem_type is mem_type and r.device == device:
                if r.start < new_start:  # noqa: PLR1730 - cheaper than min() here
                    new_start = r.start
                if r_end > new_end:  # noqa: PLR1730
                    new_end = r_end
            else:
                if r.start < start:
                    left.append(_make_region(r.start, start - r.start, r.mem_type, r.device))
                if r_end > end:
                    right.append(_make_region(end, r_end - end, r.mem_type, r.device))
        adds = [*left, _make_region(new_start, new_end - new_start, mem_type, device), *right]
        self._splice(pos, idx + a, b - a, adds, [_end_of(r) for r in adds])

    def _touching(self, pos: int, idx: int, end: int) -> list[Region]:
        """From ``(pos, idx)`` on, the regions that start at or before ``end``
        (caller holds the lock, or validates)."""
        lists = self._lists
        count = len(lists)
        sub = lists[pos]
        out: list[Region] = []
        while True:
            r = sub[idx]
            if r.start > end:
                return out
            out.append(r)
            idx += 1
            if idx == len(sub):
                pos += 1
                if pos == count:
                    return out
                sub = lists[pos]
                idx = 0

    def _classify(self, ptr: int, stop: int) -> tuple[int, Region | None]:
        """What covers ``[ptr, stop)`` (caller holds the lock, or validates)."""
        maxes = self._maxes
        pos = bisect_right(maxes, ptr)
        if pos == len(maxes):
            return _ABSENT, None
        keys = self._keys[pos]
        idx = bisect_right(keys, ptr)
        sub = self._lists[pos]
        r = sub[idx]
        if r.start > ptr:
            return (_MIXED, None) if r.start < stop else (_ABSENT, None)
        end = keys[idx]
        if stop <= end:
            return _FOUND, r
        # Runs past r: follow touching regions of the same type.
        mem_type = r.mem_type
        first = r.start
        while True:
            idx += 1
            if idx == len(sub):
                pos += 1
                if pos == len(maxes):
                    return _MIXED, None
                keys = self._keys[pos]
                sub = self._lists[pos]
                idx = 0
            nxt = sub[idx]
            if nxt.start != end or nxt.mem_type is not mem_type:
                return _MIXED, None
            end = keys[idx]
            if stop <= end:
                return _RUN, _make_region(first, end - first, mem_type, -1)

    def _classify_checked(self, ptr: int, size: int, wait_s: float | None = None) \
            -> tuple[int, Region | None]:
        """:meth:`_classify` of ``[ptr, ptr + size)`` without the lock when no
        write overlaps; a size-1 answer also goes into the memo.  When a
        write is under way, waits for the lock - at most ``wait_s`` seconds
        if given (0: not at all), then returns ``(_BLOCKED, None)``."""
        flat = self._flat
        if flat is not _BUSY:
            try:
                found = self._classify(ptr, ptr + size)
            except IndexError:
                found = None
            if found is not None and self._flat is flat:
                if size == 1 and next(_memo_turn):  # (sampled, as memory_type's answers)
                    bounds, _, hot, limit = flat
                    region = found[1]
                    if len(hot) >= limit:
                        if bounds is None:  # (counts towards a flat copy, as memory_type's do)
                            self._memo_full(flat)
                        else:
                            hot.clear()
                    hot[ptr] = HOST if region is None else region.mem_type
                return found
        if wait_s is None:
            with self._lock:
                return self._classify(ptr, ptr + size)
        lock = self._lock
        if self._owned_here(3):  # (every state is whole: writes are single commits)
            return self._classify(ptr, ptr + size)
        try:
            if not (lock.acquire(False) if wait_s <= 0 else lock.acquire(timeout=wait_s)):
                return _BLOCKED, None
            return self._classify(ptr, ptr + size)
        finally:
            if lock._is_owned():  # type: ignore[attr-defined]
                lock.release()

    def _build_snapshot(self, wait_s: float | None = None) \
            -> tuple[int, np.ndarray, np.ndarray, np.ndarray] | None:
        """The batch snapshot of the cache now (kept for the next batch);
        None when a write holds the lock past ``wait_s`` seconds (None: wait)."""
        lock = self._lock
        nested = self._owned_here(3)  # (every state is whole: writes are single commits)
        try:  # only long enough to copy the references
            if nested:
                pass
            elif wait_s is None:
                lock.acquire()
            elif not (lock.acquire(timeout=wait_s) if wait_s > 0 else lock.acquire(False)):
                return None
            version = self._version
            regions = list(chain.from_iterable(self._lists))
            keys = list(chain.from_iterable(self._keys))
        finally:
            if not nested and lock._is_owned():  # type: ignore[attr-defined]
                lock.release()
        n = len(regions)
        starts = np.empty(n + 1, dtype=np.uint64)
        starts[:n] = np.fromiter(map(_get_start, regions), dtype=np.uint64, count=n)
        starts[n] = _ADDRESS_MAX  # sentinel: past every region
        lasts = np.empty(n + 1, dtype=np.uint64)  # last byte: an end of 2**64 fits
        full = n - 1 if n and keys[-1] == ADDRESS_LIMIT else n
        lasts[:full] = np.fromiter(keys, dtype=np.uint64, count=full)
        lasts[:full] -= np.uint64(1)
        lasts[full:] = _ADDRESS_MAX
        types = np.empty(n + 1, dtype=np.uint8)
        types[:n] = np.fromiter(map(_get_type, regions), dtype=np.uint8, count=n)
        types[n] = HOST
        snap = (version, starts, lasts, types)
        self._snapshot = snap
        return snap

    def _memory_types(self, arr: np.ndarray, want_absent: bool, wait_s: float | None = None) \
            -> tuple[np.ndarray, Any] | None:
        """Codes for a flat uint64 array; with ``want_absent``, also a mask of
        the pointers that no region holds (their code is HOST).  None when
        the snapshot must be remade and a write holds the lock past
        ``wait_s`` seconds (None: wait)."""
        snap = self._snapshot
        if snap is None or snap[0] != self._version or self._flat is _BUSY:
            snap = self._build_snapshot(wait_s)
            if snap is None:
                return None
        _, starts, lasts, types = snap
        return snapshot_memory_types(starts, lasts, types, arr, want_absent)


# The methods whose frames hold a cache's lock while they run.
_CACHE_CODES = frozenset(getattr(MemtypeCache, name).__code__ for name in (
    "update", "remove", "clear", "regions", "_set_load", "_classify_checked", "_build_snapshot",
    "_memo_full"))

# The process-wide cache and its queries live in memhook._queries.query; these names
# were always this module's too (the public API names them here).  Looked up there at
# each access (not copied at import), so that the hook layer's current
# state reads the same through either module, and so that importing either
# module first works (memhook._queries.query imports this one).
_QUERY_NAMES = frozenset({"lookup", "memory_type", "memory_types", "process_cache"})


def __getattr__(name: str) -> Any:
    if name in _QUERY_NAMES:
        from ._queries import query as _query

        return getattr(_query, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
