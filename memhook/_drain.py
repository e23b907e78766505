"""Draining the core's event queue into the cache and the subscribers.

The hooks record events into a lock-free queue in libmemhook.so (no Python,
no GIL inside a hook).  :func:`drain` takes them out in batches of up to
:data:`BATCH` events into one preallocated C array, and for each event, in
order (two stages, see Concurrency):

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

* Two stages.  One lock (the apply lock) serialises taking events out of
  the core and applying them to the cache, so the cache sees them in order;
  with subscribers, the applied rows then wait in a hand-off queue, and a
  second lock (the delivery lock) serialises handing them out, in the same
  order.  A query (:func:`query_drain`) needs the first stage only: the
  cache holds every event published before the query began, whatever the
  subscribers' backlog; it spends at most :data:`QUERY_DELIVERY_S` on
  handing out waiting events.  flush()
  (:func:`drain`) waits for both stages; the background feeder delivers
  the rest (memhook._feeder).  A subscriber therefore sees the cache as of
  the newest event applied, which may be past its own event.
* Re-entrancy: a subscriber that queries memhook (or flushes) applies
  pending events to the cache, hands nothing out - its own thread is the
  one delivering - and returns; the outer delivery goes on, in order.
* A KeyboardInterrupt (or any BaseException) escaping a subscriber leaves
  the rest of its events waiting, and the next delivery hands them out
  first, so nothing is lost or reordered; one escaping while the cache is
  updated leaves the rows not applied in a backlog that the next drain
  applies first.
* fork(): both locks are taken around fork() (unless the forking thread
  holds one: a subscriber forking), so a child never inherits a batch taken
  out of the queue but not yet applied; the child gets fresh locks and the
  events still waiting for subscribers, which its own subscribers get.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import _hook_table
from . import cache as _cache
from ._core import ffi, lib
from ._event_layout import EVENT_DTYPE
from ._types import MemoryType
from .events import Event, EventKind, _registry

__all__ = ["BATCH", "DELIVERY_STEP", "EVENT_DTYPE", "QUERY_DELIVERY_S", "attach", "drain",
           "drain_batch", "flush", "function_name", "function_names", "query_drain",
           "undelivered"]

_log = logging.getLogger("memhook")

BATCH = 4096
"""Events taken out of the core's queue per call."""

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
                          "update memhook._event_layout.EVENT_DTYPE")


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
_clock = time.perf_counter

# Two stages, two locks.  _lock (the apply lock) serialises taking events out
# of the core's queue and applying them to the cache, so the cache sees them
# in order; the rows then wait in _handoff, oldest first, for the
# subscribers, who get them under _deliver_lock, in the same order.  A query
# needs only the first stage: it never waits for subscribers to run (with 8
# threads allocating, the feeder thread that runs them gets a ninth of the
# GIL, and a query that delivered the backlog itself took up to 370 ms).
# Lock order: _deliver_lock before _lock (a subscriber's query applies
# events while its thread delivers); nothing takes them the other way.
_lock = threading.Lock()
_acquire = _lock.acquire
_release = _lock.release
_owner: int | None = None        # thread ident of the applier, while it applies
_backlog: list[tuple[int, ...]] = []  # rows taken out, not yet applied (an interrupted apply)
# False from before an applier takes events out of the core until they are
# all in the cache (or in _backlog, which keeps it False): see query_drain.
_quiet = True
# [rows, next index]: applied to the cache, not yet handed to the
# subscribers.  rows is a list of EVENT_DTYPE tuples or an EVENT_DTYPE array
# (64 bytes an event while they wait).  Appended under _lock, consumed under
# _deliver_lock (deque append/popleft are atomic).
_handoff: collections.deque[list[Any]] = collections.deque()
_deliver_lock = threading.Lock()
_deliverer: int | None = None    # thread ident of the deliverer, while it delivers
_fork_held = (False, False)

QUERY_DELIVERY_S = 0.005
"""How long a query may spend on the subscribers before it answers: waiting
for another thread's delivery to end, then handing out waiting events, in
steps of :data:`DELIVERY_STEP` (the feeder and flush() deliver the rest).
A quiet process's query still hands out everything; one whose feeder is
starved of the GIL answers in bounded time."""

DELIVERY_STEP = 64
"""Events handed out between two looks at the clock."""

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
    process-wide cache and hand it, and every event still waiting for them,
    to the subscribers, in order.  Returns how many events were delivered
    (skipped slots not counted).  From inside a subscriber (this thread is
    delivering already) it applies pending events to the cache and returns
    0: the outer delivery hands them out, in order."""
    if not _pending[0] and _quiet and not _handoff:
        return 0
    done = _take()
    if _handoff:
        done += _hand_out(None)
    return done


def flush() -> int:
    """Drain the pending events now: apply them to the process-wide cache
    and hand them, and every event still waiting for them, to the
    subscribers.  Returns how many events were delivered; from a
    subscriber it applies pending events to the cache and returns 0 (the
    delivery under way in this thread hands out the rest).  The
    module-level queries drain lazily anyway, but hand subscribers only
    what they can in :data:`QUERY_DELIVERY_S` (the background feeder
    delivers the rest); call this to have subscribers see every event now.

    Runtime complexity: O(e log n) for e pending events and n cache regions
    (each event is one cache update), plus the subscribers' own time.

    >>> import memhook
    >>> from memhook._core import lib
    >>> from memhook.hooks import hook_index
    >>> memhook.flush()                          # nothing pending
    0
    >>> lib.memhook_events_record(lib.MEMHOOK_EVENT_ALLOC, hook_index("cuMemAlloc_v2"),
    ...                           0x7f0000000000, 4096, lib.MEMHOOK_MEM_CUDA, 0, 0)
    0
    >>> memhook.flush()
    1
    >>> memhook.cache.process_cache().lookup(0x7f0000000000)
    Region(start=0x7f0000000000, size=4096, mem_type=CUDA, device=0)
    >>> memhook.cache.process_cache().remove(0x7f0000000000, 4096)
    """
    return drain()


def query_drain() -> int:
    """The cache's drain before a query (:func:`memhook.cache.set_hook_layer`):
    every event pending when it began reaches the cache; the subscribers
    get the events waiting for them for at most :data:`QUERY_DELIVERY_S` -
    the feeder and flush() hand out the rest.  So a query does not wait
    long for subscribers to run, and still never answers from a cache that
    lacks an event published before it began."""
    # The fast path (nothing pending, nothing being applied) runs before
    # every query: one load through cffi and one global, no lock taken.  In
    # this order: a flag read clear means every event published before was
    # taken out of the core by a drain that cleared _quiet before it took
    # them and sets it again only once they are in the cache - so _quiet
    # read set after the flag means they are there.  (The C drain clears
    # the flag as it takes the events out, so the flag alone let a query
    # answer HOST for a live allocation on its way to the cache.)
    if not _pending[0] and _quiet:
        return 0
    done = _take()
    if _handoff:
        done += _hand_out(QUERY_DELIVERY_S)
    return done


def drain_batch(budget_s: float = 0.005, take: bool = True) -> int:
    """The background feeder's step: apply what is pending to the cache, then
    hand waiting events to the subscribers for about ``budget_s`` seconds
    and let go of the delivery lock, so that a flush() or a query waiting for
    it waits for one short step.  ``take`` False: hand out only (the
    core's queue is short).  Returns how many events were delivered."""
    done = _take() if take else 0
    if _handoff:
        done += _hand_out(budget_s)
    return done


def undelivered() -> int:
    """Events applied to the cache that the subscribers have not had yet."""
    return sum(len(rows) - at for rows, at in list(_handoff))


def _take() -> int:
    """Stage one: take the events pending now out of the core's queue (one
    bounded run) and apply them to the cache.  Returns how many need no
    delivery (no subscribers); the others go to _handoff."""
    global _owner, _quiet
    if not _pending[0] and _quiet:
        return 0
    if not _acquire(False):
        if _owner == _get_ident():
            return 0  # a signal handler's query while this thread applies
        _acquire()
    _owner = _get_ident()
    _quiet = False  # before the C drain clears the pending flag
    try:
        _mark[0] = 0
        done = 0
        while True:
            n = _c_drain(_buffer, BATCH, _mark)
            if _backlog:  # older than anything still in the core's queue
                rows: Any = _backlog[:] + _rows[:n].tolist()
                del _backlog[:]
            elif n:
                rows = _rows[:n]
            else:
                return done
            done += _apply_rows(rows)
            if n < BATCH:
                return done  # the run's cut is reached (memhook_events_drain_bounded)
    finally:
        _quiet = not _backlog
        _owner = None
        _release()


def _apply_rows(rows: Any) -> int:
    """Apply ``rows`` (EVENT_DTYPE tuples, or an EVENT_DTYPE array the next
    C drain overwrites) to the cache, in order; with subscribers, queue them
    for delivery (returns 0), else return how many were delivered.  If an
    exception escapes (a KeyboardInterrupt), the rows not applied go to the
    backlog first."""
    listed = rows.tolist() if isinstance(rows, np.ndarray) else rows
    cache = _cache.process_cache()
    cancelled = _cancelled_allocs(listed)
    count = 0
    i = 0
    try:
        for i, row in enumerate(listed):
            flags = row[11]
            if flags & (_SKIPPED | _UNLOADED):
                if flags & _UNLOADED:
                    _driver_unloaded(cache)
                continue
            count += 1
            if not row[10] and i not in cancelled:  # (a failed call never reaches it)
                _apply(cache, row[4], row[1], row[2], row[6], row[7], flags)
    except BaseException:
        _backlog[:0] = listed[i:]  # (applying row i again is harmless: idempotent)
        if _registry.current and i:
            _handoff.append([listed[:i], 0])
        raise
    if not _registry.current:
        return count
    _handoff.append([rows.copy() if isinstance(rows, np.ndarray) else rows, 0])
    return 0


def _hand_out(budget_s: float | None) -> int:
    """Stage two: hand waiting events to the subscribers, in order - all of
    them (budget_s None: wait for the delivery lock as long as it takes), or
    for about ``budget_s`` seconds, lock wait included.  Returns how many
    were delivered.  If an exception escapes a subscriber (a BaseException),
    the rest stays waiting, and the next delivery hands it out first."""
    global _deliverer
    me = _get_ident()
    if _deliverer == me:
        return 0  # a subscriber drains: the outer delivery goes on
    if budget_s is None:
        _deliver_lock.acquire()
    else:
        t0 = _clock()
        if not _deliver_lock.acquire(timeout=budget_s):
            return 0
        until = t0 + budget_s
    _deliverer = me
    try:
        done = 0
        while _handoff:
            entry = _handoff[0]
            rows, at = entry
            end = len(rows) if budget_s is None else min(len(rows), at + DELIVERY_STEP)
            chunk = rows[at:end]
            if isinstance(chunk, np.ndarray):
                chunk = chunk.tolist()
            entry[1] = end  # (before delivery: an escaping exception resets it)
            done += _to_subscribers(chunk, entry, at)
            if entry[1] >= len(rows):
                _handoff.popleft()
            if budget_s is not None and _clock() >= until:
                break
        return done
    finally:
        _deliverer = None
        _deliver_lock.release()


def _to_subscribers(rows: list[tuple[Any, ...]], entry: list[Any], at: int) -> int:
    """Hand ``rows`` (entry's rows from index ``at``) to the subscribers of
    now.  A BaseException from a subscriber leaves entry pointing past the
    row it escaped from (that row reached some subscribers)."""
    subs = _registry.current
    builder = _EventBuilder
    count = 0
    i = 0
    try:
        for i, row in enumerate(rows):
            (_, address, size, ts, kind, function, mem_type, device, pid, tid, result, flags,
             caller) = row
            if flags & (_SKIPPED | _UNLOADED):
                continue
            count += 1
            if not subs:
                continue
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
        entry[1] = at + i + 1  # (row i reached the cache and some subscribers)
        raise
    return count


def _deliver(rows: list[tuple[Any, ...]]) -> int:
    """Apply ``rows`` to the cache and hand them (after any events still
    waiting) to the subscribers; returns how many were delivered."""
    done = _apply_rows(rows)
    if _handoff:
        done += _hand_out(None)
    return done


def _driver_unloaded(cache: _cache.MemtypeCache) -> None:
    """The driver was unloaded at this point of the event order: every
    region the cache holds came from it (its allocations, pinned and
    registered host memory, ranges marked as reserved) and is gone."""
    cache.clear()
    _log.info("memhook: the CUDA driver was unloaded; the cache forgot its regions")


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
    one search; update() rebuilds the cache's flat snapshot.  (Subscribers
    get their events after the cache has the whole batch.)"""
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
    me = _get_ident()
    held = (_deliverer != me, _owner != me)
    if held[0]:
        _deliver_lock.acquire()
    if held[1]:
        _acquire()
    _fork_held = held


def _after_fork_in_parent() -> None:
    if _fork_held[1]:
        _release()
    if _fork_held[0]:
        _deliver_lock.release()


def _after_fork_in_child() -> None:
    global _lock, _acquire, _release, _deliver_lock
    _lock = threading.Lock()
    _acquire, _release = _lock.acquire, _lock.release
    _deliver_lock = threading.Lock()
    # Forked from inside a subscriber (or an apply): that stage still runs here.
    if not _fork_held[0]:
        _deliver_lock.acquire()
    if not _fork_held[1]:
        _acquire()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


def attach() -> None:
    """Plug the drain (and the coverage answer) into the cache's queries."""
    from ._coverage import coverage_complete

    _cache.set_hook_layer(query_drain, coverage_complete)
    if _pending[0] or lib.memhook_hooks_mode():
        from . import _feeder

        _feeder.start()  # hooks installed before the import (a traced process)

