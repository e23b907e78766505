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

__all__ = ["BATCH", "EVENT_DTYPE", "attach", "drain", "function_name", "function_names"]

_log = logging.getLogger("memhook")

BATCH = 4096
"""Events taken out of the core's queue per call."""

EVENT_DTYPE = np.dtype([
    ("seq", "<u8"), ("address", "<u8"), ("size", "<u8"), ("timestamp_ns", "<u8"),
    ("kind", "<i4"), ("function", "<i4"), ("mem_type", "<i4"), ("device", "<i4"),
    ("pid", "<i4"), ("tid", "<i4"), ("result", "<i4"), ("flags", "<u4"),
])
"""numpy's view of ``memhook_event`` (64 bytes; checked against the C layout
at import)."""

_EVENT_ALLOC = int(lib.MEMHOOK_EVENT_ALLOC)
_EVENT_FREE = int(lib.MEMHOOK_EVENT_FREE)
_SIZE_UNKNOWN = int(lib.MEMHOOK_EVENT_SIZE_UNKNOWN)
_SKIPPED = int(lib.MEMHOOK_EVENT_SKIPPED)
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
_c_drain = lib.memhook_events_drain
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
    """Take every pending event out of the core's queue, apply it to the
    process-wide cache and hand it to the subscribers, in order.  Returns
    how many events were delivered (skipped slots not counted).  From inside
    a subscriber (this thread is draining already) it returns 0 at once."""
    # The fast path (nothing pending) runs before every cache query: one
    # load through cffi, no lock, no call.
    if not _pending[0] and not _backlog:
        return 0
    if not _acquire(False):
        if _owner == _get_ident():
            return 0
        _acquire()
    n = _c_drain(_buffer, BATCH)
    if not n and not _backlog:
        _release()
        return 0
    return _drain_locked(n)


def _drain_locked(n: int) -> int:
    """The rest of :func:`drain`: ``n`` events are in the buffer, the drain
    lock is held (and released here)."""
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
            if n < BATCH:
                return done
            n = _c_drain(_buffer, BATCH)
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
        try:
            for i, row in enumerate(rows):
                flags = row[11]
                if flags & _SKIPPED:
                    continue
                count += 1
                if not row[10]:  # (result: a failed call never reaches the cache)
                    _apply(cache, row[4], row[1], row[2], row[6], row[7], flags)
        except BaseException:
            _backlog[:0] = rows[i:]  # (applying row i again is harmless: idempotent)
            raise
        return count
    try:
        for i, row in enumerate(rows):
            _, address, size, ts, kind, function, mem_type, device, pid, tid, result, flags = row
            if flags & _SKIPPED:
                continue
            count += 1
            if not result:
                _apply(cache, kind, address, size, mem_type, device, flags)
            event = Event(_KINDS.get(kind, kind), function_name(function), address, size,
                          _memory_type(mem_type), device, pid, tid, ts, result, row[0], flags)
            for sub in subs:
                if sub._active and sub.kinds & kind:
                    try:
                        sub.callback(event)
                    except Exception:  # noqa: BLE001 - logged; the others still run
                        _log.exception("memhook: subscriber %r raised on %r", sub.callback,
                                       event)
    except BaseException:
        _backlog[:0] = rows[i + 1:]  # (row i reached the cache and some subscribers)
        raise
    return count


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

