"""Draining the core's event queue into the cache and the subscribers.

The hooks record events into a lock-free queue in libmemhook.so (no Python,
no GIL inside a hook).  :func:`drain` takes them out in batches of up to
:data:`BATCH` events into one preallocated C array, and for each event, in
order:

1. applies it to :func:`memhook.cache.process_cache`: a successful ALLOC is
   ``update(address, size, mem_type, device)`` (size 0 is skipped); a
   successful FREE is ``remove(address, size)``; a successful FREE whose
   size nobody knew (size 0, ``MEMHOOK_EVENT_SIZE_UNKNOWN``) demotes the
   region holding ``address`` to UNKNOWN - not a removal, because touching
   regions of one type and device are merged in the cache, so that region
   may also hold live neighbours, and UNKNOWN makes queries there ask the
   driver, which knows;
2. hands it to the subscribers whose kinds match (failed calls too: they
   reach subscribers only, never the cache).

Events flagged ``MEMHOOK_EVENT_SKIPPED`` are ignored entirely.  With no
subscribers, no :class:`~memhook.events.Event` objects are built: the batch
is read as one numpy structured array over the C buffer and applied
straight to the cache.

Concurrency:

* One Python lock serialises drainers, so two threads never apply two
  batches out of order (the C drain is thread safe, but "take a batch" and
  "apply it" must be one step).
* Re-entrancy: a subscriber that queries memhook (which drains first) finds
  that its own thread is the one draining and returns at once - the outer
  drain is still delivering, in order.
* A KeyboardInterrupt (or any BaseException) escaping a subscriber leaves
  the rest of its batch in a backlog that the next drain delivers first, so
  nothing is lost or reordered.
* fork(): the drain lock is taken around fork() (unless the forking thread
  is the one draining), so a child never inherits a batch taken out of the
  queue but not yet applied; the child gets a fresh lock.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import _hook_table
from . import cache as _cache
from ._core import ffi, lib
from ._types import MemoryType
from .events import Event, EventKind, _registry

__all__ = ["BATCH", "EVENT_DTYPE", "attach", "drain", "drain_batch", "function_name",
           "function_names"]

_log = logging.getLogger("memhook")

BATCH = 4096
"""Events taken out of the core's queue per call."""

EVENT_DTYPE = np.dtype({
    "names": ["seq", "address", "size", "timestamp_ns", "kind", "function", "mem_type",
              "device", "pid", "tid", "result", "flags", "caller"],
    "formats": ["<u8", "<u8", "<u8", "<u8", "<i2", "<i2", "<i2", "<i2", "<i4", "<i4", "<i4",
                "<u4", "<u8"],
    "offsets": [0, 8, 16, 24, 40, 42, 44, 46, 48, 52, 56, 60, 32],
    "itemsize": 64,
})
"""numpy's view of ``memhook_event`` (64 bytes; checked against the C layout
at import).  ``caller`` sits at offset 32 but comes last in the field order,
so a row's first twelve items keep their places."""

_EVENT_ALLOC = int(lib.MEMHOOK_EVENT_ALLOC)
_EVENT_FREE = int(lib.MEMHOOK_EVENT_FREE)
_SIZE_UNKNOWN = int(lib.MEMHOOK_EVENT_SIZE_UNKNOWN)
_SKIPPED = int(lib.MEMHOOK_EVENT_SKIPPED)
_UNLOADED = int(lib.MEMHOOK_EVENT_DRIVER_UNLOADED)
_UNKNOWN = MemoryType.UNKNOWN
_MEMORY_TYPES = tuple(MemoryType)
_KINDS = {_EVENT_ALLOC: EventKind.ALLOC, _EVENT_FREE: EventKind.FREE}


def _check_layout() -> None:
    size = ffi.sizeof("memhook_event")
    fields: Mapping[str, tuple[Any, ...]] = EVENT_DTYPE.fields or {}
    offsets = {name: ffi.offsetof("memhook_event", name) for name in fields}
    expected = {name: spec[1] for name, spec in fields.items()}
    if size != EVENT_DTYPE.itemsize or offsets != expected:  # pragma: no cover - a header change
        raise ImportError(f"memhook_event layout changed (size {size}, offsets {offsets}); "
                          "update memhook._drain.EVENT_DTYPE")


_check_layout()

_buffer = ffi.new("memhook_event[]", BATCH)
_rows = np.frombuffer(ffi.buffer(_buffer), dtype=EVENT_DTYPE)
_c_drain = lib.memhook_events_drain_bounded
# The state of one drain run (memhook_events_drain_bounded): zeroed as a run
# begins, so the run takes what was pending then and stops - a query does
# not chase producers that keep recording while it delivers.
_mark = ffi.new("uint64_t *")
# The core's "events may be pending" flag, read in place: 0 means a drain
# would find nothing, which is what most queries find - no C call then.
_pending = lib.memhook_events_pending_flag()
_get_ident = threading.get_ident

_lock = threading.Lock()
_acquire = _lock.acquire
_release = _lock.release
_owner: int | None = None        # thread ident of the drainer, while it delivers
_backlog: list[tuple[int, ...]] = []  # rows an interrupted delivery left behind
_fork_held = False
# While a batch is delivered to subscribers: the successful ALLOCs passed so
# far whose FREE comes later in the batch, not yet applied to the cache
# (_cancelled_allocs), by address.  A query from a subscriber applies them
# first (_materialise), so what it sees is exact.
_deferred: dict[int, tuple[Any, ...]] = {}

_names: tuple[str, ...] | None = None


def function_names() -> tuple[str, ...]:
    """The hook table's function names, by index (read by :mod:`memhook._hook_table`)."""
    global _names
    names = _names
    if names is None:
        names = _names = _hook_table.names()
    return names


def function_name(index: int) -> str:
    """The name of hook-table function ``index``; ``"function#N"`` for an
    index outside the table (a native recorder's own events)."""
    names = function_names()
    return names[index] if 0 <= index < len(names) else f"function#{index}"


def drain() -> int:
    """Take every event pending when the call began out of the core's queue
    (events recorded while it delivers wait for the next drain: the run is
    bounded, see memhook_events_drain_bounded), apply it to the
    process-wide cache and hand it to the subscribers, in order.  Returns
    how many events were delivered (skipped slots not counted).  From inside
    a subscriber (this thread is draining already) it returns 0 at once."""
    # The fast path (nothing pending) runs before every cache query: one
    # load through cffi, no lock, no call.
    if not _pending[0] and not _backlog and not _deferred:
        return 0
    if not _acquire(False):
        if _owner == _get_ident():
            _materialise()  # a subscriber queries: the cache must be exact here
            return 0
        _acquire()
    _mark[0] = 0
    n = _c_drain(_buffer, BATCH, _mark)
    if not n and not _backlog:
        _release()
        return 0
    return _drain_locked(n)


def drain_batch(limit: int = BATCH) -> int:
    """Deliver at most ``limit`` events (up to :data:`BATCH`) and let go of
    the drain lock: the background feeder's step, so that a query waiting
    for the lock waits for one small batch, not for a whole run."""
    if not _pending[0] and not _backlog:
        return 0
    if not _acquire(False):
        if _owner == _get_ident():
            return 0
        _acquire()
    _mark[0] = 0
    n = _c_drain(_buffer, min(limit, BATCH), _mark)
    if not n and not _backlog:
        _release()
        return 0
    return _drain_locked(n, once=True)


def _drain_locked(n: int, once: bool = False) -> int:
    """The rest of :func:`drain`: ``n`` events are in the buffer, the drain
    lock is held (and released here).  ``once``: this batch only."""
    global _owner
    _owner = _get_ident()
    try:
        done = 0
        while True:
            rows = _rows[:n].tolist() if n else []
            if _backlog:  # older than anything still in the core's queue
                rows[:0] = _backlog
                del _backlog[:]
            if not rows:
                return done
            done += _deliver(rows)
            if n < BATCH or once:
                return done  # the run's cut is reached (memhook_events_drain_bounded)
            n = _c_drain(_buffer, BATCH, _mark)
    finally:
        _owner = None
        _release()


def _deliver(rows: list[tuple[Any, ...]]) -> int:
    """Apply ``rows`` (EVENT_DTYPE tuples) to the cache and the subscribers.
    If an exception escapes (a KeyboardInterrupt, or a BaseException from a
    subscriber), what is left of ``rows`` goes to the backlog first."""
    cache = _cache.process_cache()
    subs = _registry.current
    count = 0
    i = 0
    if not subs:
        cancelled = _cancelled_allocs(rows)
        try:
            for i, row in enumerate(rows):
                flags = row[11]
                if flags & (_SKIPPED | _UNLOADED):
                    if flags & _UNLOADED:
                        _driver_unloaded(cache)
                    continue
                count += 1
                if not row[10] and i not in cancelled:  # (a failed call never reaches it)
                    _apply(cache, row[4], row[1], row[2], row[6], row[7], flags)
        except BaseException:
            _backlog[:0] = rows[i:]  # (applying row i again is harmless: idempotent)
            raise
        return count
    builder = _EventBuilder
    cancelled = _cancelled_allocs(rows)
    deferred = _deferred
    try:
        for i, row in enumerate(rows):
            _, address, size, ts, kind, function, mem_type, device, pid, tid, result, flags, caller = row
            if flags & (_SKIPPED | _UNLOADED):
                if flags & _UNLOADED:
                    _driver_unloaded(cache)
                continue
            count += 1
            if not result:
                if i in cancelled:
                    deferred[address] = row
                else:
                    if deferred and kind == _EVENT_FREE:
                        deferred.pop(address, None)
                    _apply(cache, kind, address, size, mem_type, device, flags)
            if builder is not None:
                event = builder()
                event.kind = _KINDS.get(kind, kind)
                event.function = function_name(function)
                event.address = address
                event.size = size
                event.mem_type = _memory_type(mem_type)
                event.device = device
                event.pid = pid
                event.tid = tid
                event.timestamp_ns = ts
                event.result = result
                event.seq = row[0]
                event.flags = flags
                event.caller_address = caller
                event.__class__ = Event
            else:  # pragma: no cover - Python 3.9
                event = Event(_KINDS.get(kind, kind), function_name(function), address, size,
                              _memory_type(mem_type), device, pid, tid, ts, result, row[0],
                              flags, caller)
            for sub in subs:
                if sub._active and sub._kind_bits & kind:
                    try:
                        sub.callback(event)
                    except Exception:  # noqa: BLE001 - logged; the others still run
                        _log.exception("memhook: subscriber %r raised on %r", sub.callback,
                                       event)
    except BaseException:
        _materialise()  # their FREEs are in the backlog; the ALLOCs would be lost
        _backlog[:0] = rows[i + 1:]  # (row i reached the cache and some subscribers)
        raise
    return count


def _driver_unloaded(cache: _cache.MemtypeCache) -> None:
    """The driver was unloaded at this point of the event order: every
    region the cache holds came from it (its allocations, pinned and
    registered host memory, ranges marked as reserved) and is gone."""
    _deferred.clear()
    cache.clear()
    _log.info("memhook: the CUDA driver was unloaded; the cache forgot its regions")


def _materialise() -> None:
    """Apply the deferred ALLOCs to the cache now (their FREEs still come)."""
    if _deferred:
        cache = _cache.process_cache()
        rows = list(_deferred.values())
        _deferred.clear()
        for row in rows:
            _apply(cache, row[4], row[1], row[2], row[6], row[7], row[11])


def _event_builder() -> type | None:
    """A plain class with Event's slots: an instance of it, its fields
    stored, becomes an Event by assigning ``__class__`` - a tenth of the
    cost of the frozen dataclass's __init__ (3 us an event, the largest part
    of delivering one to a subscriber).  None where that does not work
    (Python 3.9: Event has no slots); then events are built normally."""
    slots = getattr(Event, "__slots__", None)
    if not slots or set(slots) != set(_EVENT_FIELDS):  # pragma: no cover
        return None
    builder = type("_EventBuilder", (), {"__slots__": tuple(slots)})
    try:
        probe = builder()
        for name, value in zip(_EVENT_FIELDS, _PROBE):
            setattr(probe, name, value)
        probe.__class__ = Event
    except (TypeError, AttributeError):  # pragma: no cover - an Event of another shape
        return None
    if probe != Event(*_PROBE):  # pragma: no cover
        return None
    return builder


_EVENT_FIELDS = ("kind", "function", "address", "size", "mem_type", "device", "pid", "tid",
                 "timestamp_ns", "result", "seq", "flags", "caller_address")
_PROBE = (EventKind.ALLOC, "f", 1, 2, MemoryType.CUDA, 0, 3, 4, 5, 0, 6, 7, 8)
_EventBuilder = _event_builder()


def _cancelled_allocs(rows: list[tuple[Any, ...]]) -> set[int]:
    """Indexes of the successful ALLOCs of ``rows`` whose allocation the
    batch also frees (a successful FREE of the same address and size, the
    next successful event of that address): the cache need not record them.
    update(a, s) then remove(a, s) leaves the cache as remove(a, s) alone
    does - the range is gone, neighbours merged and split back - and no
    other event in between touches the range, which is live there (the
    driver hands out no overlapping live allocations; a FREE of unknown size
    names its own address).  remove() of a range the cache does not hold is
    one search; update() rebuilds the cache's flat snapshot.  With
    subscribers, a module-level query from one of them between the two
    applies the ALLOCs passed so far first (_deferred, _materialise)."""
    open_at: dict[int, int] = {}
    cancelled: set[int] = set()
    for i, row in enumerate(rows):
        if row[10] or row[11] & _SKIPPED or not row[2]:
            continue
        kind, address = row[4], row[1]
        if kind == _EVENT_ALLOC:
            open_at[address] = i
        elif kind == _EVENT_FREE:
            j = open_at.pop(address, -1)
            if j >= 0 and rows[j][2] == row[2]:
                cancelled.add(j)
    return cancelled


def _memory_type(code: int) -> MemoryType:
    return _MEMORY_TYPES[code] if 0 <= code < len(_MEMORY_TYPES) else _UNKNOWN


def _apply(cache: _cache.MemtypeCache, kind: int, address: int, size: int, mem_type: int,
           device: int, flags: int) -> None:
    """One successful event's effect on the cache."""
    try:
        if kind == _EVENT_ALLOC:
            if size:
                cache.update(address, size, _memory_type(mem_type), max(device, -1))
        elif kind == _EVENT_FREE:
            if size:
                cache.remove(address, size)
            elif flags & _SIZE_UNKNOWN:
                region = cache.lookup(address)
                if region is not None and region.mem_type is not _UNKNOWN:
                    cache.update(region.start, region.size, _UNKNOWN, -1)
    except (TypeError, ValueError) as exc:  # a malformed event from a native recorder
        _log.warning("memhook: event kind=%d address=%#x size=%d ignored: %s",
                     kind, address, size, exc)


def _before_fork() -> None:
    global _fork_held
    _fork_held = _owner != _get_ident()
    if _fork_held:
        _acquire()


def _after_fork_in_parent() -> None:
    if _fork_held:
        _release()


def _after_fork_in_child() -> None:
    global _lock, _acquire, _release
    _lock = threading.Lock()
    _acquire, _release = _lock.acquire, _lock.release
    if not _fork_held:  # forked from inside a subscriber: that drain still runs here
        _acquire()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


def attach() -> None:
    """Plug the drain (and the coverage answer) into the cache's queries."""
    from ._coverage import coverage_complete

    _cache.set_hook_layer(drain, coverage_complete)
    if _pending[0] or lib.memhook_hooks_mode():
        from . import _feeder

        _feeder.start()  # hooks installed before the import (a traced process)

