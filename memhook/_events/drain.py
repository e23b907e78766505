"""Draining the core's event queue to the subscribers.

The hooks record events into a lock-free queue in libmemhook.so (no Python,
no GIL inside a hook).  The core's own cache (csrc/cache/) applies every
event as a drain call hands it out, so a Python drain has one job: take
events out in batches of up to :data:`BATCH` into one preallocated C array
and hand every event to the subscribers whose kinds match, in order (failed
calls too).  Subscribers opt in to their cost: Event objects are built only
for them.  Events flagged ``MEMHOOK_EVENT_SKIPPED`` are ignored entirely;
the driver unload and hooks-gap markers reach the cache only; a context
reset (a FREE flagged ``MEMHOOK_EVENT_CONTEXT_RESET``) reaches both.

Concurrency: no call waits for another Python thread to make progress (a
query takes events out only if the take lock is free); ^C between any two
steps loses, repeats or reorders nothing (memhook._events.atomic); fork()
takes the three locks.  docs/design/python-drain.md gives the argument.
"""

from __future__ import annotations

import collections
import logging
import operator
import os
import threading
import time
from collections.abc import Mapping
from itertools import starmap
from typing import Any, Callable

import numpy as np

from .._binding import control as _control
from .._binding import hook_table as _hook_table
from .atomic import commit, held_here
from .._binding.core import ffi, lib
from .layout import EVENT_DTYPE
from .._values.types import MemoryType
from ..events import Event, EventKind, _registry

__all__ = ["BATCH", "DELIVERY_STEP", "EVENT_DTYPE", "QUERY_EVENTS", "QUERY_DELIVERY_S",
           "attach", "drain", "drain_batch", "drain_nowait", "feed_step", "flush",
           "backlogged", "function_name", "function_names", "query_drain", "undelivered",
           "waiters"]

_log = logging.getLogger("memhook")

BATCH = 4096
"""Events taken out of the core's queue per call (and per hold of the
apply lock by the feeder): 256 KiB of rows; about 0.4 ms of work for an
allocator's alloc/free churn (a tenth of it the C drain, made with the GIL
held, the rest the bulk apply), more where the batch holds that many
distinct new allocations (each is a cache write).  Short, because while
the feeder holds the apply lock a query answers without the drain, and
while it is in the C drain no Python thread runs."""

QUERY_EVENTS = 8192
"""Events a query takes out of the core itself at most (two calls into the
core, under a millisecond of work): a longer backlog is the feeder's, and
the query answers without it meanwhile (memhook.cache: through the
driver).  A query's time then hardly depends on how fast other threads
record (on a box whose CPUs are oversubscribed, every millisecond of work
is many more of waiting)."""

_EVENT_ALLOC = int(lib.MEMHOOK_EVENT_ALLOC)
_EVENT_FREE = int(lib.MEMHOOK_EVENT_FREE)
_SKIPPED = int(lib.MEMHOOK_EVENT_SKIPPED)
_UNLOADED = int(lib.MEMHOOK_EVENT_DRIVER_UNLOADED)
# Markers of no call that reach the cache only (the driver unloaded, a gap
# in the hooks): never a subscriber's, never counted as delivered.
_CACHE_ONLY = _SKIPPED | _UNLOADED | int(lib.MEMHOOK_EVENT_HOOKS_GAP)
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
                          "update memhook._events.layout.EVENT_DTYPE")


_check_layout()

_buffer = ffi.new("memhook_event[]", BATCH)
_rows = np.frombuffer(ffi.buffer(_buffer), dtype=EVENT_DTYPE)
# Rows of _buffer taken out of the core: the core adds to it in the call
# that takes them (memhook_events_drain_into), so no exception can land
# between taking rows and knowing that they are held.
_filled = ffi.new("uint64_t *")
# [taken, handed]: _rows[:taken] are past the take stage (the core's cache
# had them as they were taken out), _rows[:handed] are in _handoff for the
# subscribers.  What an exception leaves between them and _filled, the next
# drain finishes first.
_buf = [0, 0]
_c_take = _control.events_drain_into  # (memhook_events_drain_into, the GIL held)
# The state of one drain run (memhook_events_drain_bounded): zeroed as a run
# begins, so the run takes what was pending then and stops - a query does
# not chase producers that keep recording while it applies.
_mark = ffi.new("uint64_t *")
# The core's "events may be pending" flag, read in place: 0 means a drain
# would find nothing, which is what most queries find - no C call then.
_pending = lib.memhook_events_pending_flag()
_get_ident = threading.get_ident
_clock = time.perf_counter
_setitem = operator.setitem
_consume: Callable[[Any], None] = collections.deque(maxlen=0).extend  # (runs an iterator out)

# Two stages, two locks.  _lock (the apply lock) serialises applying taken
# rows to the cache, so the cache sees them in order; the rows then wait in
# _handoff, oldest first, for the subscribers, who get them under
# _deliver_lock, in the same order.  Lock order: _deliver_lock before _lock
# (a subscriber's query applies events while its thread delivers), then
# _take_lock; nothing takes them the other way.  RLocks for _is_owned
# (docs/design/python-drain.md, "Re-entry"), never taken twice by a thread
# on purpose.
_lock = threading.RLock()
_acquire = _lock.acquire
_release = _lock.release
_is_owned: Callable[[], bool] = _lock._is_owned  # type: ignore[attr-defined]
# Idents of threads blocked waiting for _lock (flush(), fork): the feeder
# does not take it again while one waits (set.add/discard: atomic).
_waiters: set[int] = set()
# Taking events out of the core and publishing what was taken happen
# together under this lock.  Held for one C drain call and a few stores,
# never across Python work of any length.
_take_lock = threading.RLock()
_take_owned: Callable[[], bool] = _take_lock._is_owned  # type: ignore[attr-defined]
# False from before an applier takes events out of the core until they are
# all queued for the subscribers (rows waiting in _buffer keep it False): see
# query_drain.
_quiet = True
# Bumped under _lock at every take (feed_step tells progress by it).
_generation = 0
# [rows, (next row, subscribers of it done)]: applied to the cache, not
# yet handed to the subscribers (an EVENT_DTYPE array; 64 bytes an event
# while they wait).  Appended under _lock, consumed under _deliver_lock
# (deque append/popleft are atomic).
_handoff: collections.deque[list[Any]] = collections.deque()
_deliver_lock = threading.RLock()
_delivering: Callable[[], bool] = _deliver_lock._is_owned  # type: ignore[attr-defined]
_fork_held = (False, False)
# Set by the background feeder while it sleeps with nothing to do
# (memhook._events.feeder): what wakes it when a query leaves work behind.
wake_feeder: Callable[[], object] | None = None

QUERY_DELIVERY_S = 0.005
"""How long a query may spend handing waiting events to the subscribers
before it answers, when no other thread is delivering (it never waits for
that thread).  The feeder and flush() deliver the rest."""

DELIVERY_STEP = 64
"""Events the feeder hands out between two looks at the clock."""

_names: tuple[str, ...] | None = None


def function_names() -> tuple[str, ...]:
    """The hook table's function names, by index (read by :mod:`memhook._binding.hook_table`)."""
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
    (events recorded while it applies wait for the next drain: the run is
    bounded, see memhook_events_drain_bounded), apply it to the
    process-wide cache and hand it, and every event still waiting for them,
    to the subscribers, in order.  Waits for the batch another thread is
    applying, if one is, and for the delivery under way.  Returns how many
    events were delivered (skipped slots not counted).  On a thread that
    is applying or delivering already (a subscriber, a signal handler that
    interrupted one) it does only what needs no wait on its own thread and
    returns 0: the outer drain hands the events out, in order."""
    if not _pending[0] and _quiet and not _handoff:
        return 0
    done, _ = _take(None, True)
    if _handoff:
        done += _hand_out(None, DELIVERY_STEP)
    return done


def flush() -> int:
    """Drain the pending events now: apply them to the process-wide cache
    and hand them, and every event still waiting for them, to the
    subscribers.  Returns how many events were delivered; from a
    subscriber it applies pending events to the cache and returns 0 (the
    delivery under way in this thread hands out the rest).  The
    module-level queries drain lazily anyway, but never wait for another
    thread and hand subscribers only what they can in
    :data:`QUERY_DELIVERY_S` (the background feeder delivers the rest);
    call this to have subscribers see every event now.

    Runtime complexity: O(e log e + w log n) for e pending events and n
    cache regions, where the batches' bulk apply leaves w cache writes
    (one per distinct range whose last event is not undone within its
    batch), plus the subscribers' own time.

    >>> import memhook
    >>> from memhook._binding.core import lib
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


def query_drain() -> bool:
    """The cache's drain before a query (:func:`memhook.cache.set_hook_layer`):
    True when every event pending as it began has reached the cache (so
    the cache can answer), False when that cannot be had without waiting
    for another thread (it is applying a batch; or this thread is, in a
    signal handler) or within :data:`QUERY_EVENTS` events.  Waiting
    events are handed to the subscribers for at most
    :data:`QUERY_DELIVERY_S`, only when no other thread is delivering."""
    # The fast path (nothing pending, nothing being applied) runs before
    # every query: one load through cffi and one global, no lock taken.  In
    # this order: a flag read clear means every event published before was
    # taken out of the core by a drain that cleared _quiet before it took
    # them and sets it again only once they are in the cache - so _quiet
    # read set after the flag means they are there.  (The C drain clears
    # the flag as it takes the events out, so the flag alone let a query
    # answer HOST for a live allocation on its way to the cache.)
    if not _pending[0] and _quiet:
        return True
    _, complete = _take(QUERY_EVENTS, False)
    if _handoff:
        _hand_out(QUERY_DELIVERY_S, 1)
    wake = wake_feeder
    if wake is not None and (_handoff or not complete or backlogged()):
        wake()  # (a parked feeder finishes what this query left)
    return complete


def drain_nowait() -> bool:
    """Apply what is pending to the cache if that needs no wait for another
    thread (install() and uninstall() do, so that what the hooks saw so far
    is in the cache, without ever waiting on a busy process's feeder);
    True when everything pending reached it."""
    return _take(QUERY_EVENTS, False)[1]


def waiters() -> int:
    """Threads waiting for the apply lock (the feeder leaves it to them)."""
    return len(_waiters)


def drain_batch(budget_s: float = 0.005, take: bool = True) -> int:
    """The background feeder's step: apply one batch of what is pending to
    the cache (unless the apply lock is busy, or a thread waits for it),
    then hand waiting events to the subscribers for about ``budget_s``
    seconds and let go of the delivery lock, so that a flush() or a query
    waiting for it waits for one short step.  ``take`` False: hand out
    only (the core's queue is short).  Returns how many events were
    delivered."""
    done = _take(BATCH, False, feeder=True)[0] if take else 0
    if _handoff:
        done += _hand_out(budget_s, DELIVERY_STEP)
    return done


def feed_step(budget_s: float, take: bool) -> bool:
    """One step of the background feeder (memhook._events.feeder): :func:`drain_batch`,
    saying whether it did anything (applied a batch, or handed events out)
    - False when the apply lock was busy or wanted, so the feeder backs off
    instead of spinning."""
    before = _generation
    delivered = drain_batch(budget_s, take)
    return delivered > 0 or _generation != before


def undelivered() -> int:
    """Events applied to the cache that the subscribers have not had yet."""
    return sum(len(rows) - at[0] for rows, at in list(_handoff))


def _take(max_events: int | None = None, wait: bool = True, feeder: bool = False) \
        -> tuple[int, bool]:
    """Stage one: apply what earlier drains took out and left unapplied,
    then take the events pending now out of the core's queue (one bounded
    run) and apply them to the cache - at most ``max_events`` of them
    (None: the whole run, a batch at a time), waiting for the apply lock if
    ``wait``.  Returns (how many need no delivery - there are no
    subscribers -, and whether the run is complete).  ``feeder``: do not
    take the lock while another thread waits for it.  On a thread that
    holds the lock already (a signal handler that interrupted an apply) it
    does nothing and says the run is not complete; a lock an exception left
    behind on this thread it takes back.

    Lossless under exceptions from signal handlers: rows are counted as
    held by the call that takes them out (``_filled``), marked applied and
    handed on in single commits (memhook._events.atomic), and whatever an
    exception interrupts, the next drain finishes first, in order."""
    global _quiet, _generation
    if not _pending[0] and _quiet:
        return 0, True
    if _is_owned() and held_here(_APPLY_CODES):
        return 0, False  # this thread applies (a signal handler here)
    try:
        # (a lock still owned here was left behind by an exception: ours again)
        if not _is_owned():
            if feeder and _waiters:
                return 0, False  # the lock is theirs next
            if not _acquire(False):
                if not wait:
                    return 0, False
                me = _get_ident()
                _waiters.add(me)
                try:
                    _acquire()
                finally:
                    _waiters.discard(me)
        _mark[0] = 0
        _generation += 1
        done = _apply_taken()
        left = max_events
        while True:
            cap = BATCH if left is None else min(BATCH, left)
            with _take_lock:
                if _buf[1] < _filled[0]:
                    n = -1  # rows an exception left unhanded: they go first
                else:
                    _quiet = False  # before the C drain clears the pending flag
                    commit(((_setitem, _filled, 0, 0), (_setitem, _buf, 0, 0),
                            (_setitem, _buf, 1, 0)))
                    n = _c_take(_buffer, cap, _mark, _filled)
            _generation += 1
            done += _apply_taken()
            if n < 0:
                continue
            if n < cap:
                return done, True  # the run's cut is reached (memhook_events_drain_bounded)
            if left is not None:
                left -= n
                if left <= 0:
                    return done, False
    finally:
        if _is_owned():
            with _take_lock:
                # Quiet only once every row taken is queued for the
                # subscribers, not merely in the cache: rows an exception
                # left between the two stages must keep every drain's fast
                # path (and the feeder's) off until a take hands them on.
                _quiet = not backlogged()
            _release()


def _apply_taken() -> int:
    """Queue every row of _buffer taken out and not yet queued for the
    subscribers (caller holds _lock).  Returns how many need no delivery
    (no subscribers)."""
    f = int(_filled[0])
    if _buf[1] < f:
        return _apply_part(_rows, f, _buf)
    return 0


def _log_malformed(rows: np.ndarray) -> None:
    """Say which events the core's cache ignored as malformed (a range past
    2**64, from a native recorder): its feed skips them without a word."""
    size = rows["size"]
    address = rows["address"]
    bad = (rows["result"] == 0) & (size != 0) & (address + size <= address) & (
        (rows["kind"] == _EVENT_ALLOC) | (rows["kind"] == _EVENT_FREE)) & (
        (rows["flags"] & _CACHE_ONLY) == 0)
    for i in np.flatnonzero(bad).tolist():
        _log.warning("memhook: event kind=%d address=%#x size=%d ignored: the range runs past "
                     "the end of the address space", int(rows["kind"][i]),
                     int(address[i]), int(size[i]))


def _apply_part(rows: np.ndarray, end: int, marks: list[int]) -> int:
    """Apply ``rows[marks[0]:end]`` to the cache and queue ``rows[marks[1]:end]``
    for the subscribers (caller holds _lock); see _buf for the marks.  With
    subscribers returns 0, else how many were delivered (to nobody)."""
    at = marks[0]
    if at < end:
        _log_malformed(rows[at:end])
        marks[0] = end  # (the core's cache had them as the C drain handed them out)
    handed = marks[1]
    if handed >= end:
        return 0
    part = rows[handed:end]
    if _registry.current:
        entry = [part.copy(), (0, 0)]
        commit(((_handoff.append, entry), (_setitem, marks, 1, end)))
        return 0
    marks[1] = end
    return int(np.count_nonzero(part["flags"] & _CACHE_ONLY == 0))


def backlogged() -> bool:
    """Whether rows taken out of the core wait to be handed on (the feeder
    does it: an exception may have left some)."""
    return bool(_buf[1] < _filled[0])


def _hand_out(budget_s: float | None, step: int) -> int:
    """Stage two: hand waiting events to the subscribers, in order - all of
    them (budget_s None: wait for the delivery lock as long as it takes),
    or, only when the delivery lock is free, for about ``budget_s``
    seconds, looking at the clock every ``step`` events.  Returns how many
    were delivered.  If an exception escapes a subscriber (a
    BaseException), the rest stays waiting, and the next delivery hands it
    out first."""
    if _delivering() and held_here(_DELIVER_CODES):
        return 0  # a subscriber (or a signal handler in one) drains: the outer delivery goes on
    try:
        # (a lock still owned here was left behind by an exception: ours again)
        if not _delivering():
            if budget_s is None:
                _deliver_lock.acquire()
            elif not _deliver_lock.acquire(False):
                return 0
        until = None if budget_s is None else _clock() + budget_s
        done = 0
        while _handoff:
            entry = _handoff[0]
            rows, (at, _) = entry
            end = len(rows) if until is None else min(len(rows), at + step)
            done += _to_subscribers(rows[at:end].tolist(), entry, at)
            if entry[1][0] >= len(rows):
                _handoff.popleft()
            if until is not None and _clock() >= until:
                break
        return done
    finally:
        if _delivering():
            _deliver_lock.release()


def _to_subscribers(rows: list[tuple[Any, ...]], entry: list[Any], at: int) -> int:
    """Hand ``rows`` (entry's rows from index ``at``) to the subscribers of
    now.  ``entry[1]`` is (the next row, how many of its subscribers had
    it): each call of a subscriber and the store that counts it run in one
    C-level step (memhook._events.atomic), so an exception from a signal handler
    neither skips nor repeats an event for a subscriber that returned.  A
    BaseException escaping a subscriber counts that subscriber as served
    (the event reached it)."""
    subs = _registry.current
    builder = _EventBuilder
    count = 0
    first = entry[1][1]  # subscribers of row `at` already served
    for i, row in enumerate(rows, at):
        (_, address, size, ts, kind, function, mem_type, device, pid, tid, result, flags,
         caller) = row
        if flags & _CACHE_ONLY:
            entry[1] = (i + 1, 0)
            continue
        count += 1
        callbacks = [sub.callback for sub in subs if sub._active and sub._kind_bits & kind]
        if first:
            callbacks = callbacks[first:]
        if not callbacks:
            entry[1] = (i + 1, 0)
            first = 0
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
        last = first + len(callbacks)
        marks = [(entry, 1, (i, j)) for j in range(first + 1, last)]
        marks.append((entry, 1, (i + 1, 0)))
        call = operator.methodcaller("__call__", event)
        while True:
            steps = zip(map(call, callbacks), starmap(_setitem, marks))
            try:
                _consume(steps)  # (the only call in this try: see below)
                break
            except BaseException as exc:
                row_at, served = entry[1]
                # From the subscriber (it counts as served), or - an exception
                # from a signal handler - raised here as _consume returned,
                # after the last store, or before it called anything.
                tb = exc.__traceback__
                if row_at == i and (isinstance(exc, Exception) or
                                    (tb is not None and tb.tb_next is not None)):
                    entry[1] = (i, served + 1) if served + 1 < last else (i + 1, 0)
                if not isinstance(exc, Exception):
                    raise
                _log.exception("memhook: subscriber %r raised on %r",
                               callbacks[served - first], event)
                if served + 1 >= last:
                    break
                callbacks = callbacks[served + 1 - first:]
                marks = marks[served + 1 - first:]
                first = served + 1
        first = 0
    return count


def _deliver(rows: list[tuple[Any, ...]]) -> int:
    """Apply ``rows`` to the cache and hand them (after any events still
    waiting) to the subscribers; returns how many were delivered (tests)."""
    array = np.array(rows, dtype=EVENT_DTYPE)
    marks = [0, 0]
    with _lock:
        done = _apply_part(array, len(array), marks)
    if _handoff:
        done += _hand_out(None, DELIVERY_STEP)
    return done


def _event_builder() -> type | None:
    """A plain class with Event's slots: an instance of it, its fields
    stored, becomes an Event by assigning ``__class__`` - far cheaper than
    the frozen dataclass's __init__, the largest part of delivering an event
    (docs/performance.md).  None where that does not work
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


def _memory_type(code: int) -> MemoryType:
    return _MEMORY_TYPES[code] if 0 <= code < len(_MEMORY_TYPES) else _UNKNOWN


def _before_fork() -> None:
    global _fork_held
    held = (not _delivering(), not _is_owned())
    if held[0]:
        _deliver_lock.acquire()
    if held[1]:
        me = _get_ident()
        _waiters.add(me)  # (the feeder leaves the lock to us)
        try:
            _acquire()
        finally:
            _waiters.discard(me)
    _take_lock.acquire()  # (a query's take in another thread: one C call)
    _fork_held = held


def _after_fork_in_parent() -> None:
    _take_lock.release()
    if _fork_held[1]:
        _release()
    if _fork_held[0]:
        _deliver_lock.release()


def _after_fork_in_child() -> None:
    global _lock, _acquire, _release, _is_owned, _deliver_lock, _delivering, _take_lock
    global _take_owned
    _take_lock = threading.RLock()
    _take_owned = _take_lock._is_owned  # type: ignore[attr-defined]
    _lock = threading.RLock()
    _acquire, _release = _lock.acquire, _lock.release
    _is_owned = _lock._is_owned  # type: ignore[attr-defined]
    _deliver_lock = threading.RLock()
    _delivering = _deliver_lock._is_owned  # type: ignore[attr-defined]
    _waiters.clear()
    # Forked from inside a subscriber (or an apply): that stage still runs here.
    if not _fork_held[0]:
        _deliver_lock.acquire()
    if not _fork_held[1]:
        _acquire()


# The functions whose frames hold a lock while they run (memhook._events.atomic.held_here).
_APPLY_CODES = frozenset({_take.__code__, _deliver.__code__})
_TAKE_CODES = frozenset({_take.__code__, _apply_taken.__code__})
_DELIVER_CODES = frozenset({_hand_out.__code__})

os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


def attach() -> bool:
    """Have the queries hand waiting events to the subscribers first (what
    they can without waiting: :func:`query_drain`), as they always have.
    True when events may already wait: hooks installed before the import (a
    traced process), so the caller starts the background feeder now (the
    feeder sits above the drain: it imports this module, not the reverse)."""
    from .._native import query_deliver  # type: ignore[import-not-found]

    query_deliver(_registry, query_drain)
    return bool(_pending[0] or lib.memhook_hooks_mode())
