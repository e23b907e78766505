"""What events do to the cache: one at a time (:func:`apply_row`), or a
whole batch in bulk (:func:`apply_rows`), with the same result.

One event, in order: a skipped slot does nothing; DRIVER_UNLOADED forgets
every region; CONTEXT_RESET marks UNKNOWN the regions of its device and of
no known device, HOOKS_GAP every region (UNKNOWN makes a query ask the
driver, which knows); any other failed call does nothing; a successful
ALLOC is ``update``, a FREE ``remove``, or, of unknown size, demotes the
region holding its address to UNKNOWN.

A batch reduces because the cache is canonical and update and remove assign
one value to every address of their range: between the barriers (events
that read or clear the cache, applied one at a time), each ``(address,
size)`` reduces to its last event.  docs/design/event-apply.md gives the
rules in full and the argument; tests/hooks/test_bulk_apply.py replays
random streams both ways.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .._binding.core import lib
from .layout import EVENT_DTYPE
from .._values.types import MemoryType
from ..cache import MemtypeCache

__all__ = ["UNSURE", "UNTOUCHED", "allocated_type", "apply_row", "apply_rows", "forget_context",
           "last_touch"]

_log = logging.getLogger("memhook")

_ALLOC = int(lib.MEMHOOK_EVENT_ALLOC)
_FREE = int(lib.MEMHOOK_EVENT_FREE)
_SIZE_UNKNOWN = int(lib.MEMHOOK_EVENT_SIZE_UNKNOWN)
_SKIPPED = int(lib.MEMHOOK_EVENT_SKIPPED)
_UNLOADED = int(lib.MEMHOOK_EVENT_DRIVER_UNLOADED)
_CONTEXT_RESET = int(lib.MEMHOOK_EVENT_CONTEXT_RESET)
_HOOKS_GAP = int(lib.MEMHOOK_EVENT_HOOKS_GAP)
_MARKERS = _UNLOADED | _CONTEXT_RESET | _HOOKS_GAP
_UNKNOWN = MemoryType.UNKNOWN
_MEMORY_TYPES = tuple(MemoryType)
_N_TYPES = len(_MEMORY_TYPES)
_ADDRESS_LIMIT = 1 << 64

# Row fields by position (EVENT_DTYPE's field order: a row tuple's items).
_ADDRESS, _SIZE, _KIND, _MEM_TYPE, _DEVICE, _RESULT, _FLAGS = 1, 2, 4, 6, 7, 10, 11
assert EVENT_DTYPE.names is not None and (
    EVENT_DTYPE.names[_ADDRESS], EVENT_DTYPE.names[_SIZE], EVENT_DTYPE.names[_KIND],
    EVENT_DTYPE.names[_MEM_TYPE], EVENT_DTYPE.names[_DEVICE], EVENT_DTYPE.names[_RESULT],
    EVENT_DTYPE.names[_FLAGS]) == ("address", "size", "kind", "mem_type", "device", "result",
                                   "flags")

BULK_MIN = 16
"""Batches shorter than this are applied one event at a time (the numpy
work costs more than it saves)."""


def _memory_type(code: int) -> MemoryType:
    return _MEMORY_TYPES[code] if 0 <= code < _N_TYPES else _UNKNOWN


def forget_context(cache: MemtypeCache, device: int) -> None:
    """A context of ``device`` (-1: of a device not known) was reset or
    destroyed, and every allocation it held is gone: mark UNKNOWN every
    region of that device and every region of no known device (all of them
    for device -1), for queries to resolve through the driver."""
    for r in cache.regions():
        if r.mem_type is not _UNKNOWN and (device < 0 or r.device == device or r.device < 0):
            cache.update(r.start, r.size, _UNKNOWN, -1)


def apply_row(cache: MemtypeCache, row: tuple[Any, ...]) -> None:
    """One event's effect on the cache (a row of EVENT_DTYPE, as a tuple)."""
    flags = row[_FLAGS]
    if flags & _SKIPPED:
        return
    if flags & _MARKERS:
        if flags & _UNLOADED:
            cache.clear()
            _log.info("memhook: the CUDA driver was unloaded; the cache forgot its regions")
        elif flags & _HOOKS_GAP:
            forget_context(cache, -1)  # (every region, whatever its device)
        elif not row[_RESULT]:
            forget_context(cache, row[_DEVICE])
        return
    if row[_RESULT]:
        return  # a failed call never reaches the cache
    kind, address, size = row[_KIND], row[_ADDRESS], row[_SIZE]
    try:
        if kind == _ALLOC:
            if size:
                cache.update(address, size, _memory_type(row[_MEM_TYPE]), max(row[_DEVICE], -1))
        elif kind == _FREE:
            if size:
                cache.remove(address, size)
            elif flags & _SIZE_UNKNOWN:
                region = cache.lookup(address)
                if region is not None and region.mem_type is not _UNKNOWN:
                    cache.update(region.start, region.size, _UNKNOWN, -1)
    except (TypeError, ValueError) as exc:  # a malformed event from a native recorder
        _log.warning("memhook: event kind=%d address=%#x size=%d ignored: %s",
                     kind, address, size, exc)


def apply_rows(cache: MemtypeCache, rows: np.ndarray, progress: list[int],
               base: int = 0) -> None:
    """Apply ``rows`` (an EVENT_DTYPE array, in event order) to ``cache``,
    leaving it exactly as :func:`apply_row` of each row in turn would.

    ``progress[0]`` is kept at ``base`` plus the first row whose effect may
    be missing: if an exception escapes (a KeyboardInterrupt), applying the
    rows from there again, in order, finishes the work (every step applied
    from there is an assignment or a barrier, and applying one again is
    harmless; each cache write is whole or not made, memhook.cache)."""
    n = len(rows)
    if n < BULK_MIN:
        listed = rows.tolist()
        for i in range(n):
            progress[0] = base + i
            apply_row(cache, listed[i])
        progress[0] = base + n
        return
    flags = rows["flags"]
    kind = rows["kind"]
    size = rows["size"]
    address = rows["address"]
    live = (flags & _SKIPPED) == 0
    ok = live & (rows["result"] == 0) & ((flags & _MARKERS) == 0)
    end = address + size  # (wraps for a range past 2**64: caught below)
    assignment = ok & (size != 0) & (end > address) & ((kind == _ALLOC) | (kind == _FREE))
    # Barriers: markers, FREEs of unknown size, malformed ranges.  Other
    # failed calls, size-0 events and unknown kinds do nothing at all.
    barrier = live & ((flags & _MARKERS) != 0)
    barrier |= ok & (size == 0) & (kind == _FREE) & ((flags & _SIZE_UNKNOWN) != 0)
    barrier |= ok & (size != 0) & (end <= address) & ((kind == _ALLOC) | (kind == _FREE))
    cuts = np.flatnonzero(barrier).tolist()
    todo = np.flatnonzero(assignment)
    start = 0
    at = 0  # into todo
    listed_barrier = rows[cuts].tolist() if cuts else []
    for b, cut in enumerate([*cuts, n]):
        stop = int(np.searchsorted(todo, cut)) if cut < n else len(todo)
        if stop > at:
            progress[0] = base + start
            _apply_run(cache, rows, todo[at:stop])
        at = stop
        if cut < n:
            progress[0] = base + cut
            apply_row(cache, listed_barrier[b])
            start = cut + 1
    progress[0] = base + n


UNTOUCHED = 0
"""last_touch: no row can change the answer for the range."""
UNSURE = 1
"""last_touch: a marker, a FREE of unknown size or a malformed range: the
rows' effect on the range cannot be told without applying them."""


def last_touch(views: list[np.ndarray], start: int, size: int, closed: bool) \
        -> int | tuple[Any, ...]:
    """Of ``views`` (EVENT_DTYPE arrays, in event order), the last row that
    could change what the cache says of ``[start, start + size)`` - a
    successful ALLOC or FREE whose range overlaps it (``closed``: or only
    touches it, as a write next to it may merge or split the region
    holding it) - as a tuple; :data:`UNTOUCHED` when there is none;
    :data:`UNSURE` when a marker, a FREE of unknown size or a malformed
    range is among them.  Failed calls and skipped slots touch nothing."""
    lo = np.uint64(start)
    hi = np.uint64(min(start + size, _ADDRESS_LIMIT - 1))
    for rows in reversed(views):
        if not len(rows):
            continue
        flags = rows["flags"]
        live = (flags & _SKIPPED) == 0
        if (live & ((flags & _MARKERS) != 0)).any():
            return UNSURE
        ok = live & (rows["result"] == 0)
        address = rows["address"]
        sz = rows["size"]
        end = address + sz  # (wraps past 2**64)
        if (ok & ((end < address) | ((sz == 0) & ((flags & _SIZE_UNKNOWN) != 0)))).any():
            return UNSURE
        if closed:
            hit = ok & (sz != 0) & (address <= hi) & (end >= lo)
        else:
            hit = ok & (sz != 0) & (address < hi) & (end > lo)
        where = np.flatnonzero(hit)
        if len(where):
            row: tuple[Any, ...] = rows[int(where[-1])].tolist()
            return row
    return UNTOUCHED


def allocated_type(row: tuple[Any, ...], start: int, size: int) -> MemoryType | None:
    """The type ``row`` (last_touch's) gives all of ``[start, start + size)``:
    a successful ALLOC of a known type holding the whole range; else None."""
    if row[_KIND] != _ALLOC or not (row[_ADDRESS] <= start and
                                    start + size <= row[_ADDRESS] + row[_SIZE]):
        return None
    t = _memory_type(row[_MEM_TYPE])
    return None if t is _UNKNOWN else t


def _apply_run(cache: MemtypeCache, rows: np.ndarray, idx: np.ndarray) -> None:
    """The successful, well-formed ALLOC/FREE rows ``idx`` (ascending) of a
    run with no barrier in it: each (address, size) reduces to its last
    event, and those are applied in event order (see the module
    docstring)."""
    if len(idx) < BULK_MIN:
        for row in rows[idx].tolist():
            apply_row(cache, row)
        return
    address = rows["address"][idx]
    size = rows["size"][idx]
    # By address, then size; within one (address, size), in event order.
    order = np.lexsort((idx, size, address))
    a = address[order]
    s = size[order]
    last_of_group = np.empty(len(order), dtype=bool)
    last_of_group[-1] = True
    np.not_equal(a[1:], a[:-1], out=last_of_group[:-1])
    last_of_group[:-1] |= s[1:] != s[:-1]
    # Each group's last event, in event order: at every address the last
    # event over it (within the run) is then the one applied last.
    lasts = np.sort(idx[order[last_of_group]])
    update, remove = cache.update, cache.remove
    for _, addr, sz, _, kind, _, mem_type, device, *_ in rows[lasts].tolist():
        if kind == _ALLOC:
            update(addr, sz, _MEMORY_TYPES[mem_type] if 0 <= mem_type < _N_TYPES else _UNKNOWN,
                   device if device >= -1 else -1)
        else:
            remove(addr, sz)
