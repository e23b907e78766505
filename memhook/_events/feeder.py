"""The background feeder: keeps the core's event queue short when nobody
queries.

Without it, a process that records events and never queries holds every
event in the queue (4M events: 245 MiB) and its next query or flush()
applies them all.  The feeder is one daemon thread that waits in
``memhook_events_wait_backlog`` - C, the GIL released (cffi releases it
around every call), polling the lanes' counts every 5 ms; producers never
make a system call to wake it - and drains (:func:`memhook._events.drain.feed_step`:
one batch of pending events to the cache per hold of the apply lock, then
waiting events to the subscribers for STEP_S per hold of the delivery
lock) once :data:`BACKLOG` events are waiting, until fewer than STEP / 2
are and the subscribers have every event.  It never makes another thread
wait for more than one of its batches: between batches it lets go of the
apply lock, and while another thread waits for it, it sleeps.
It also hands out what a query applied to the cache and left for the
subscribers (a query does not wait for them: memhook._events.drain.query_drain),
looking for that every 100 ms when idle and every 5 ms while some wait.
With no hooks installed and nothing pending or waiting (after
uninstall()), it sleeps without polling until hooks are installed again or
a query leaves events for it: an idle process costs nothing.

The policy: with the memhook package imported and hooks installed, the
backlog stays near BACKLOG events (64 KiB) plus what producers record while
one drain run delivers; nothing is dropped.  A query then finds at most
that much to deliver.  A fork child inherits at most that backlog (and
starts its own feeder).  A producer that outruns Python's delivery (C
threads recording faster than the subscribers run) still grows the queue:
nothing drops an event a subscriber will be handed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from .._binding.core import lib

__all__ = ["BACKLOG", "running", "start"]

_log = logging.getLogger("memhook")

BACKLOG = 1024
"""Waiting events (64 bytes each) at which the feeder drains."""

STEP = 512
"""The feeder goes on draining while at least STEP / 2 events wait in the
core's queue."""

STEP_S = 0.005
"""Seconds the feeder hands events to subscribers per hold of the delivery
lock: a flush() or a query that arrives meanwhile waits about this long
(more when the feeder's cores are oversubscribed)."""

_WAIT_MS = 100
_HANDOFF_MS = 5
_BACK_OFF_S = 0.001
_lock = threading.Lock()
_thread: threading.Thread | None = None
_wake = threading.Event()


def _idle(drain: Any) -> bool:
    """Nothing for the feeder to do, now or until someone installs hooks or
    a query leaves work: no hooks installed, nothing pending in the core,
    taken or waiting for the subscribers."""
    return not (lib.memhook_hooks_mode() or drain._pending[0] or drain.undelivered()
                or drain.backlogged())


def _park(drain: Any) -> None:
    """Sleep, the GIL released, until :func:`start` (an install) or a query
    that leaves work (memhook._events.drain's ``wake_feeder``) sets ``_wake``: an
    idle process pays no wakeup.  Events a native recorder makes meanwhile
    wait for the next query or flush(), as before the first install."""
    _wake.clear()
    drain.wake_feeder = _wake.set
    try:
        if _idle(drain):  # (again, after clear: a set() before it is not lost)
            _wake.wait()
    finally:
        drain.wake_feeder = None


def _run() -> None:
    from . import drain as _drain

    wait = lib.memhook_events_wait_backlog
    waiting = _drain.undelivered
    while True:
        if _idle(_drain):
            _park(_drain)
            continue
        if not lib.memhook_hooks_mode():
            # No hooks, and events left (the last ones recorded, uninstall's
            # gap marker): drain them all now, then sleep.
            try:
                _finish(_drain)
            except Exception:  # noqa: BLE001 - logged; the feeder must go on
                _log.exception("memhook: the background drain failed")
            continue
        # Events a query applied to the cache and left for the subscribers
        # (memhook._events.drain.query_drain) are looked for every _HANDOFF_MS
        # while some wait, every _WAIT_MS otherwise.
        if (wait(BACKLOG, _HANDOFF_MS if waiting() else _WAIT_MS) or waiting()
                or _drain.backlogged()):
            try:
                _feed(_drain)
            except Exception:  # noqa: BLE001 - logged; the feeder must go on
                _log.exception("memhook: the background drain failed")


def _feed(drain: Any) -> None:
    """Drain until fewer than STEP / 2 events wait in the core and the
    subscribers have every event: one batch per hold of the apply lock.
    While another thread waits for that lock (a flush(), a fork()), or
    holds it, the feeder sleeps (the GIL released) instead of taking it
    again at once: a waiter would otherwise wake to find it taken (a
    convoy), and a busy lock to spin on."""
    waiting = drain.undelivered
    while True:
        take = _backlog_left() or drain.backlogged()
        if not take and not waiting():
            return
        if drain.waiters() or not drain.feed_step(STEP_S, take):
            time.sleep(_BACK_OFF_S)


def _finish(drain: Any) -> None:
    """Drain everything pending and hand it out, a batch per hold of the
    apply lock, backing off while another thread holds or wants it."""
    while not _idle(drain) and not lib.memhook_hooks_mode():
        if drain.waiters() or not drain.feed_step(STEP_S, True):
            time.sleep(_BACK_OFF_S)


def _backlog_left() -> bool:
    return bool(lib.memhook_events_wait_backlog(STEP // 2, 0))


def start() -> None:
    """Start the feeder thread of this process, once (idempotent)."""
    global _thread
    with _lock:
        if _thread is not None and _thread.is_alive():
            _wake.set()  # (a parked feeder: hooks were installed again)
            return
        _thread = threading.Thread(target=_run, name="memhook-feeder", daemon=True)
        _thread.start()


def running() -> bool:
    """Whether this process's feeder thread runs."""
    t = _thread
    return t is not None and t.is_alive()


def _after_fork_in_child() -> None:
    global _lock, _thread, _wake
    was = _thread is not None
    _lock = threading.Lock()
    _wake = threading.Event()
    _thread = None  # threads do not survive fork()
    if was:
        start()


os.register_at_fork(after_in_child=_after_fork_in_child)
