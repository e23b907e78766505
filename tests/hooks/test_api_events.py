"""Events, subscribers and the drain that feeds the cache, driven through
``memhook_events_record`` (the very path a hook takes), in this process:
no CUDA needed."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hooks_api_testing import (  # noqa: F401
    ALLOC, FREE, WINDOW, WINDOW_SIZE, clean_events, record)
from memhook_testing import hooks_installed  # noqa: F401

import memhook
from memhook import Event, EventKind, MemoryType, Subscription
from memhook._events import drain as _drain
from memhook.cache import process_cache

pytestmark = pytest.mark.usefixtures("clean_events")

M = MemoryType
A = WINDOW + 0x1000_0000  # an address in the test window


def _in_window(regions: list[memhook.Region]) -> list[memhook.Region]:
    """The regions in the test window (not what else the process cache holds)."""
    return [r for r in regions if WINDOW <= r.start < WINDOW + WINDOW_SIZE]


@pytest.mark.usefixtures("hooks_installed")
def test_the_cache_drains_before_every_query() -> None:
    record(ALLOC, "cuMemAlloc_v2", A, 1 << 20, M.CUDA, 0)
    # No flush: the query itself drains.
    assert memhook.memory_type(A + 100) is M.CUDA
    assert memhook.lookup(A + 100, 64) == memhook.Region(A, 1 << 20, M.CUDA, 0)
    assert memhook.memory_types([A, A + (1 << 20)]).tolist() == [M.CUDA, M.HOST]
    record(FREE, "cuMemFree_v2", A, 1 << 20, M.CUDA, 0)
    assert memhook.memory_type(A + 100) is M.HOST
    assert memhook.lookup(A + 100) is None


@pytest.mark.usefixtures("hooks_installed")
def test_pending_flag_says_when_a_drain_has_work() -> None:
    """The flag Python reads before every query (memhook_events_pending_flag):
    set by a recorded event, cleared by the drain that takes the last one,
    and still set while events another thread recorded wait."""
    flag = _drain.lib.memhook_events_pending_flag()
    memhook.flush()
    assert flag[0] == 0
    record(ALLOC, "cudaMalloc", A, 64)
    assert flag[0] != 0
    assert memhook.flush() == 1 and flag[0] == 0
    done = threading.Event()

    def other() -> None:
        record(ALLOC, "cudaMalloc", A + 4096, 64)
        done.set()

    threading.Thread(target=other).start()
    assert done.wait(10)
    assert flag[0] != 0  # another thread's event, in its own lane
    assert memhook.flush() == 1 and flag[0] == 0
    assert memhook.memory_type(A + 4096) is M.CUDA


@pytest.mark.parametrize("with_subscriber", [False, True])
def test_events_feed_the_cache(with_subscriber: bool) -> None:
    """Both drain paths (plain rows; Event objects for subscribers) apply
    the same changes."""
    seen: list[Event] = []
    if with_subscriber:
        memhook.subscribe(seen.append)
    cache = process_cache()
    record(ALLOC, "cuMemAllocManaged", A, 4096, M.CUDA_MANAGED, 1)
    record(ALLOC, "cuMemAllocHost_v2", A + 8192, 4096, M.CUDA_HOST, -1)
    record(ALLOC, "cuMemMap", A + 65536, 65536, M.UNKNOWN, 0)
    record(ALLOC, "cudaMalloc", A + (1 << 20), 0, M.CUDA, 0)          # size 0: nothing
    record(ALLOC, "cudaMalloc", 0, 512, M.CUDA, 0, result=2)           # failed: nothing
    record(FREE, "cuMemFreeHost", A + 8192, 4096, M.CUDA_HOST, -1, result=1)  # failed: stays
    assert memhook.flush() == 6
    assert [(r.start - A, r.size, r.mem_type, r.device) for r in cache.regions()
            if r.start >= WINDOW] == [(0, 4096, M.CUDA_MANAGED, 1),
                                      (8192, 4096, M.CUDA_HOST, -1),
                                      (65536, 65536, M.UNKNOWN, 0)]
    record(FREE, "cuMemFree_v2", A, 4096, M.CUDA_MANAGED, 1)
    record(FREE, "cuMemFreeHost", A + 8192, 4096, M.CUDA_HOST, -1)
    record(FREE, "cuMemUnmap", A + 65536, 32768, M.UNKNOWN, 0)  # half of the map
    assert memhook.flush() == 3
    assert [(r.start - A, r.size) for r in cache.regions() if r.start >= WINDOW] == \
        [(65536 + 32768, 32768)]
    assert len(seen) == (9 if with_subscriber else 0)


def test_failed_alloc_reaches_subscribers_not_the_cache() -> None:
    seen: list[Event] = []
    with memhook.subscribe(seen.append):
        before = len(process_cache())
        record(ALLOC, "cuMemAlloc_v2", 0, 256 << 20, M.CUDA, 0, result=2)  # OUT_OF_MEMORY
        assert memhook.flush() == 1
        assert len(process_cache()) == before
    (event,) = seen
    assert event.kind is EventKind.ALLOC and event.function == "cuMemAlloc_v2"
    assert (event.address, event.size, event.result, event.ok) == (0, 256 << 20, 2, False)


# CLOCK_MONOTONIC_COARSE's tick: a coarse timestamp is about this much
# before the call it stamps, at most (memhook.Event.timestamp_ns) - more
# where the kernel's tick comes late (a loaded VM: 4.7 ms seen with a 4 ms
# tick), so the bounds below allow ten.
CLOCK_MONOTONIC_COARSE = 6  # <linux/time.h>; the time module does not name it
COARSE_TICK_NS = int(time.clock_getres(CLOCK_MONOTONIC_COARSE) * 1e9)
COARSE_LAG_NS = 10 * COARSE_TICK_NS


@pytest.mark.parametrize("precise", [False, True], ids=["coarse", "precise"])
def test_event_fields_and_order(precise: bool) -> None:
    seen: list[Event] = []
    memhook.subscribe(seen.append, precise_time=precise)
    t0 = time.monotonic_ns()
    seqs = [record(ALLOC, "cudaMallocManaged", A, 100, M.CUDA_MANAGED, 3),
            record(ALLOC, "cuMemAllocPitch_v2", A + 4096, 512 * 8, M.CUDA, 0),
            record(FREE, "cudaFree", A, 100, M.CUDA_MANAGED, 3),
            record(FREE, "cuMemFree_v2", A + 4096, 512 * 8, M.CUDA, 0)]
    t1 = time.monotonic_ns()
    assert memhook.flush() == 4
    assert memhook.flush() == 0
    assert [e.seq for e in seen] == seqs and seqs == sorted(seqs)
    assert [(e.kind, e.function, e.address - A, e.size, e.mem_type, e.device) for e in seen] == [
        (EventKind.ALLOC, "cudaMallocManaged", 0, 100, M.CUDA_MANAGED, 3),
        (EventKind.ALLOC, "cuMemAllocPitch_v2", 4096, 4096, M.CUDA, 0),
        (EventKind.FREE, "cudaFree", 0, 100, M.CUDA_MANAGED, 3),
        (EventKind.FREE, "cuMemFree_v2", 4096, 4096, M.CUDA, 0)]
    for e in seen:
        assert e.pid == os.getpid() and e.tid == threading.get_native_id()
        earliest = t0 if precise else t0 - COARSE_LAG_NS
        assert earliest <= e.timestamp_ns <= t1 and e.result == 0 and e.ok and e.flags == 0
        assert type(e.kind) is EventKind and type(e.mem_type) is MemoryType
        assert e.end == e.address + e.size
    assert [e.timestamp_ns for e in seen] == sorted(e.timestamp_ns for e in seen)
    with pytest.raises(AttributeError):
        seen[0].size = 1  # type: ignore[misc]


def test_kinds_filter() -> None:
    allocs: list[Event] = []
    frees: list[Event] = []
    both: list[Event] = []
    memhook.subscribe(allocs.append, EventKind.ALLOC)
    memhook.subscribe(frees.append, kinds=EventKind.FREE)
    memhook.subscribe(both.append, 3)
    record(ALLOC, "cuMemAllocAsync", A, 64)
    record(FREE, "cuMemFreeAsync", A, 64)
    record(ALLOC, "cudaMallocAsync", A, 64, result=2)
    memhook.flush()
    assert [e.function for e in allocs] == ["cuMemAllocAsync", "cudaMallocAsync"]
    assert [e.function for e in frees] == ["cuMemFreeAsync"]
    assert [e.function for e in both] == ["cuMemAllocAsync", "cuMemFreeAsync", "cudaMallocAsync"]


def test_subscribe_arguments() -> None:
    with pytest.raises(TypeError, match="callable"):
        memhook.subscribe("print")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ALLOC"):
        memhook.subscribe(print, 0)
    with pytest.raises(ValueError, match="ALLOC"):
        memhook.subscribe(print, 4)
    with pytest.raises(TypeError, match="EventKind"):
        memhook.subscribe(print, "alloc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="EventKind"):
        memhook.subscribe(print, True)
    with pytest.raises(TypeError, match="precise_time"):
        memhook.subscribe(print, precise_time=1)  # type: ignore[arg-type]


def _stamps_of_a_burst(n: int = 100) -> tuple[int, list[int]]:
    """Record n events back to back; the monotonic clock before them and
    their timestamps."""
    seen: list[Event] = []
    with memhook.subscribe(seen.append):
        t0 = time.monotonic_ns()
        for i in range(n):
            record(ALLOC, "cudaMalloc", A + 256 * i, 64)
        memhook.flush()
    return t0, [e.timestamp_ns for e in seen]


def _assert_default_stamps(t0: int, stamps: list[int]) -> None:
    """What a burst gets where nobody asked for precise time: coarse stamps
    (a burst shares its tick's value, which may be before the burst began),
    unless reading the TSC is the cheaper here (clock.c): then each its own."""
    if _drain.lib.memhook_testing_clock_tsc_always():
        assert len(set(stamps)) == len(stamps) and min(stamps) >= t0
    else:
        assert len(set(stamps)) < len(stamps) and min(stamps) >= t0 - COARSE_LAG_NS


def test_precise_time_while_a_subscription_asks_for_it() -> None:
    """The default stamps; precise ones - every event its own, none before
    the burst - while a precise_time subscription is open, and the default
    again once it closed."""
    lib = _drain.lib
    _assert_default_stamps(*_stamps_of_a_burst())
    with memhook.subscribe(lambda e: None, precise_time=True) as sub:
        assert sub.precise_time
        t0, stamps = _stamps_of_a_burst()
        assert len(set(stamps)) == len(stamps) and min(stamps) >= t0
    _assert_default_stamps(*_stamps_of_a_burst())
    assert lib.memhook_events_precise_time(0) == errno.EINVAL  # nobody asked


_CLOCK_CHILD = """\
import sys, time
sys.path.insert(0, sys.argv[1])
import memhook
from hooks_api_testing import ALLOC, WINDOW, record
seen = []
with memhook.subscribe(seen.append):
    t0 = time.monotonic_ns()
    for i in range(100):
        record(ALLOC, "cudaMalloc", WINDOW + 256 * i, 64)
    t1 = time.monotonic_ns()
    memhook.flush()
stamps = [e.timestamp_ns for e in seen]
print(len(stamps), len(set(stamps)), min(stamps) - t0, t1 - max(stamps))
"""


@pytest.mark.parametrize("clock", ["tsc", "coarse"])
def test_the_clock_nobody_asked_to_be_precise_is_the_one_chosen(clock: str) -> None:
    """MEMHOOK_CLOCK=tsc: every stamp a TSC reading, though nobody asked for
    precise time (what the default chooses where the coarse clock is the
    dearer read) - each event
    its own stamp, inside the burst; coarse: a burst shares its tick."""
    env = dict(os.environ, MEMHOOK_CLOCK=clock)
    proc = subprocess.run([sys.executable, "-c", _CLOCK_CHILD, str(Path(__file__).parent)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    n, distinct, after_t0, before_t1 = map(int, proc.stdout.split())
    assert n == 100
    if clock == "tsc":
        assert distinct == n and after_t0 >= 0 and before_t1 >= 0, proc.stdout
    else:
        assert distinct < n and after_t0 >= -COARSE_LAG_NS, proc.stdout


def test_exception_in_a_subscriber_is_logged_and_the_others_run(
        caplog: pytest.LogCaptureFixture) -> None:
    first: list[int] = []
    last: list[int] = []
    calls: list[int] = []

    def broken(event: Event) -> None:
        calls.append(event.seq)
        raise RuntimeError(f"broken subscriber on {event.size}")

    memhook.subscribe(lambda e: first.append(e.seq))
    memhook.subscribe(broken)
    memhook.subscribe(lambda e: last.append(e.seq))
    with caplog.at_level(logging.ERROR, logger="memhook"):
        seqs = [record(ALLOC, "cudaMalloc", A, 11), record(FREE, "cudaFree", A, 11)]
        assert memhook.flush() == 2
    assert first == last == calls == seqs  # the broken one keeps getting events too
    errors = [r for r in caplog.records if r.name == "memhook" and r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert all(r.exc_info and "broken subscriber on 11" in str(r.exc_info[1]) for r in errors)
    assert "subscriber" in errors[0].getMessage()
    assert memhook.memory_type(A) is M.HOST  # and the cache got both events


def test_subscription_close_and_context_manager() -> None:
    seen: list[int] = []
    sub = memhook.subscribe(lambda e: seen.append(e.seq))
    assert isinstance(sub, Subscription) and not sub.closed and sub in memhook.events.subscriptions()
    s1 = record(ALLOC, "cudaMalloc", A, 8)
    memhook.flush()
    sub.close()
    sub.close()  # idempotent
    assert sub.closed and sub not in memhook.events.subscriptions()
    record(FREE, "cudaFree", A, 8)
    memhook.flush()
    assert seen == [s1]

    with memhook.subscribe(lambda e: seen.append(e.seq)) as sub2:
        assert isinstance(sub2, Subscription) and not sub2.closed
        s2 = record(ALLOC, "cudaMalloc", A, 8)
        memhook.flush()
    assert sub2.closed
    record(FREE, "cudaFree", A, 8)
    memhook.flush()
    assert seen == [s1, s2]


def test_closing_during_delivery_stops_at_once() -> None:
    seen: list[int] = []
    sub: Subscription

    def once(event: Event) -> None:
        seen.append(event.seq)
        sub.close()

    sub = memhook.subscribe(once)
    seqs = [record(ALLOC, "cudaMalloc", A + 64 * i, 64) for i in range(5)]
    assert memhook.flush() == 5  # one batch
    assert seen == seqs[:1]


@pytest.mark.usefixtures("hooks_installed")
def test_subscriber_may_query_memhook_without_deadlock() -> None:
    """A subscriber's query drains nothing (its thread is draining) and sees
    the cache with its own event applied."""
    answers: list[tuple[int, MemoryType, int]] = []

    def query(event: Event) -> None:
        answers.append((event.seq, memhook.memory_type(event.address), memhook.flush()))

    memhook.subscribe(query, EventKind.ALLOC)
    seqs = [record(ALLOC, "cuMemAllocHost", A, 4096, M.CUDA_HOST, -1),
            record(ALLOC, "cudaMallocManaged", A + 8192, 4096, M.CUDA_MANAGED, 0)]
    done = threading.Event()
    worker = threading.Thread(target=lambda: (memhook.flush(), done.set()), daemon=True)
    worker.start()
    worker.join(60)
    assert done.is_set(), "the drain deadlocked on a subscriber's query"
    assert answers == [(seqs[0], M.CUDA_HOST, 0), (seqs[1], M.CUDA_MANAGED, 0)]


@pytest.mark.usefixtures("hooks_installed")
def test_a_query_does_not_wait_for_subscribers() -> None:
    """While a subscriber runs (here: blocked) in another thread's flush(), a
    query still answers at once from a cache that holds every event
    published before it began - an ALLOC and a FREE after the blocked one."""
    gate, entered = threading.Event(), threading.Event()

    def slow(event: Event) -> None:
        entered.set()
        gate.wait(30)

    memhook.subscribe(slow)
    record(ALLOC, "cudaMalloc", A, 4096)
    flusher = threading.Thread(target=memhook.flush, daemon=True)
    flusher.start()
    try:
        assert entered.wait(30)
        record(ALLOC, "cudaMalloc", A + 8192, 4096, M.CUDA_MANAGED, 0)
        record(FREE, "cudaFree", A, 4096)
        answers: list[MemoryType] = []
        asker = threading.Thread(target=lambda: answers.extend(
            [memhook.memory_type(A + 8192), memhook.memory_type(A)]), daemon=True)
        asker.start()
        asker.join(10)
        assert answers == [M.CUDA_MANAGED, M.HOST], "the query waited for a subscriber"
    finally:
        gate.set()
        flusher.join(30)


def _stalled_drain(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Thread]:
    """A drain that has taken the pending events out of the core (the
    pending flag is clear again) and stalls before applying them - as a
    feeder does that lost the GIL or its CPU; set the returned event to let
    it go on."""
    taken, gate = threading.Event(), threading.Event()
    apply_part = _drain._apply_part
    drainer_id: list[int] = []

    def slow_apply(rows, end, marks):  # type: ignore[no-untyped-def]
        if threading.get_ident() in drainer_id:
            taken.set()
            gate.wait(30)
        return apply_part(rows, end, marks)

    monkeypatch.setattr(_drain, "_apply_part", slow_apply)

    def slow_drain() -> None:
        drainer_id.append(threading.get_ident())
        _drain._take()

    drainer = threading.Thread(target=slow_drain, daemon=True)
    drainer.start()
    assert taken.wait(30) and not _drain._pending[0]
    return gate, drainer


@pytest.mark.usefixtures("hooks_installed")
def test_a_query_answers_an_allocation_another_thread_is_applying(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An ALLOC taken out of the core by another thread, not yet applied:
    a query neither waits for that thread (issue 23: it waited without a
    timeout for the lock the feeder held) nor answers from the cache as it
    was (HOST, for a live allocation: seen in scripts/pressure.py) - the
    applier's batch is in view, and its last event over the pointer is that
    ALLOC."""
    record(ALLOC, "cudaMalloc", A, 4096)
    gate, drainer = _stalled_drain(monkeypatch)
    answers: list[MemoryType] = []
    asker = threading.Thread(target=lambda: answers.append(memhook.memory_type(A + 8)),
                             daemon=True)
    try:
        asker.start()
        asker.join(30)
        assert answers == [M.CUDA], "the query waited for the stalled drain, or answered wrong"
    finally:
        gate.set()
        drainer.join(30)
    assert memhook.memory_type(A + 8) is M.CUDA


def test_a_query_never_answers_from_a_cache_behind_a_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """A FREE another thread is applying: the cache still says CUDA, the
    rows in view give no type, and no driver in this process can answer -
    the query waits for the drain rather than answer CUDA for freed memory
    (with a driver to ask it would answer from the driver at once)."""
    record(ALLOC, "cudaMalloc", A, 4096)
    memhook.flush()
    record(FREE, "cudaFree", A, 4096)
    gate, drainer = _stalled_drain(monkeypatch)
    answers: list[MemoryType] = []
    asker = threading.Thread(target=lambda: answers.append(memhook.memory_type(A + 8)),
                             daemon=True)
    try:
        asker.start()
        asker.join(0.3)
    finally:
        gate.set()
        drainer.join(30)
    asker.join(30)
    assert answers == [M.HOST]


@pytest.mark.usefixtures("hooks_installed")
def test_a_query_does_not_deliver_a_slow_subscribers_backlog() -> None:
    """2,000 events wait for a subscriber that takes 1 ms an event: a query
    answers in well under the 2 s that delivering them takes (the starved
    feeder of scripts/pressure.py, made deterministic); flush() then hands
    every event out, in order.  The bound has 10x headroom over the ~5 ms
    budget plus applying 2,000 events, for a loaded 2-core box."""
    seen: list[int] = []

    def slow(event: Event) -> None:
        seen.append(event.seq)
        time.sleep(0.001)

    memhook.subscribe(slow)
    seqs = [record(ALLOC, "cudaMalloc", A + 64 * i, 64) for i in range(2000)]
    t0 = time.perf_counter()
    assert memhook.memory_type(A + 64 * 1999) is M.CUDA
    took = time.perf_counter() - t0
    assert took < 0.5, f"the query took {took * 1e3:.0f} ms, delivering to the subscriber"
    assert seen == seqs[:len(seen)] and len(seen) < len(seqs)
    memhook.flush()
    assert seen == seqs


@pytest.mark.usefixtures("hooks_installed")
def test_subscribers_get_what_queries_left_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query hands out waiting events for QUERY_DELIVERY_S at most; the feeder's step
    (and flush()) hand out the rest - every event once, in order.  (The
    feeder thread itself is not started here: it would drain under the
    other tests of this process.)"""
    monkeypatch.setattr(_drain, "QUERY_DELIVERY_S", 0.0)  # one step of DELIVERY_STEP
    monkeypatch.setattr(_drain, "DELIVERY_STEP", 7)
    seen: list[int] = []
    memhook.subscribe(lambda e: seen.append(e.seq))
    seqs = [record(ALLOC, "cudaMalloc", A + 64 * i, 64) for i in range(100)]
    assert memhook.memory_type(A + 64 * 99) is M.CUDA  # the cache has all 100
    assert len(seen) <= 7 and seen == seqs[:len(seen)]
    seqs += [record(ALLOC, "cudaMalloc", A + 64 * i, 64) for i in range(100, 120)]
    assert memhook.memory_type(A + 64 * 119) is M.CUDA
    assert _drain.undelivered() == len(seqs) - len(seen) > 0
    while _drain.drain_batch(0.0):
        assert _drain.undelivered() == len(seqs) - len(seen)
    assert seen == seqs and memhook.flush() == 0


class _Interrupt(BaseException):
    pass


@pytest.mark.usefixtures("hooks_installed")
def test_base_exception_in_a_subscriber_loses_nothing() -> None:
    """A KeyboardInterrupt-like exception escapes flush(); the rest of the
    batch is delivered, in order, by the next drain."""
    seen: list[int] = []
    armed = [True]

    def sub(event: Event) -> None:
        seen.append(event.seq)
        if armed[0] and len(seen) == 2:
            armed[0] = False
            raise _Interrupt

    memhook.subscribe(sub)
    seqs = [record(ALLOC, "cudaMalloc", A + 64 * i, 64) for i in range(5)]
    with pytest.raises(_Interrupt):
        memhook.flush()
    assert seen == seqs[:2]
    assert memhook.flush() == 3
    assert seen == seqs
    assert len(_in_window(process_cache().regions())) == 1, process_cache().regions()  # merged
    assert memhook.lookup(A, 5 * 64) == memhook.Region(A, 5 * 64, M.CUDA, 0)


@pytest.mark.usefixtures("hooks_installed")
def test_an_exception_between_applying_and_queueing_loses_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """^C after the taken rows reached the cache and before they were queued
    for the subscribers: the next flush() hands them out (it once found
    nothing pending and returned, and the rows waited for a later event -
    at the end of a run, for ever; the feeder spun on them meanwhile)."""
    seen: list[int] = []
    memhook.subscribe(lambda e: seen.append(e.seq))
    seqs = [record(ALLOC, "cudaMalloc", A + 64 * i, 64) for i in range(3)]
    commit = _drain.commit
    armed = [True]

    def interrupted_commit(steps):  # type: ignore[no-untyped-def]
        if armed[0] and steps and steps[0][0] == _drain._handoff.append:
            armed[0] = False
            raise _Interrupt  # (before any of the commit's steps)
        commit(steps)

    monkeypatch.setattr(_drain, "commit", interrupted_commit)
    with pytest.raises(_Interrupt):
        memhook.flush()
    assert seen == [] and memhook.memory_type(A) is M.CUDA  # in the cache, not delivered
    assert not armed[0]
    assert memhook.flush() == 3
    assert seen == seqs


def test_more_than_one_batch_in_order() -> None:
    seen: list[int] = []
    memhook.subscribe(lambda e: seen.append(e.seq))
    n = _drain.BATCH * 2 + 17
    first = record(ALLOC, "cudaMalloc", A, 64)
    for i in range(1, n):
        record(ALLOC if i % 2 == 0 else FREE, "cudaMalloc" if i % 2 == 0 else "cudaFree", A, 64)
    assert memhook.flush() == n
    assert seen == list(range(first, first + n))
    # What the cache holds (no hooks vouch for it here: a query would ask a
    # driver, were one initialised in this process).
    last_is_alloc = (n - 1) % 2 == 0
    assert _in_window(process_cache().regions()) == \
        ([memhook.Region(A, 64, M.CUDA, 0)] if last_is_alloc else [])


def _row(kind: int, address: int, size: int, mem_type: int = 1, device: int = 0,
         result: int = 0, flags: int = 0, seq: int = 0) -> tuple[int, ...]:
    return (seq, address, size, 0, kind, 0, mem_type, device, 1, 1, result, flags, 0)  # caller 0


def test_skipped_slots_are_ignored_entirely() -> None:
    """(The core never hands out a SKIPPED slot; the drain ignores one anyway.)"""
    skipped = int(_drain.lib.MEMHOOK_EVENT_SKIPPED)
    seen: list[Event] = []
    for subscribed in (False, True):
        if subscribed:
            memhook.subscribe(seen.append)
        assert _drain._deliver([_row(ALLOC, A, 64, flags=skipped)]) == 0
        assert memhook.lookup(A) is None and seen == []


def test_free_of_unknown_size_demotes_the_region_to_unknown() -> None:
    """A FREE nobody knew the size of cannot punch an exact hole, and the
    region holding the address may hold live neighbours (touching regions of
    one type merge): it becomes UNKNOWN, for the driver to decide.  (The
    core's cache applies events now; this test once handed a crafted row to
    the Python drain's apply, and now hands it to the core's feed, through a
    test cache: the process's own is fed only by the queue.)"""
    lib = _drain.lib
    size_unknown = int(lib.MEMHOOK_EVENT_SIZE_UNKNOWN)
    ffi = _drain.ffi
    cache = lib.memhook_testing_cache_new()
    try:
        def apply(*rows: tuple[int, ...]) -> None:
            events = ffi.new("memhook_event[]", len(rows))
            for ev, (_, address, size, _, kind, _, mem_type, device, _, _, result, flags,
                     _) in zip(events, rows):
                ev.address, ev.size, ev.kind, ev.mem_type = address, size, kind, mem_type
                ev.device, ev.result, ev.flags = device, result, flags
            lib.memhook_testing_cache_apply(cache, events, len(rows))

        def lookup(p: int) -> tuple[int, int, int, int]:
            out = ffi.new("memhook_region *", {"struct_size": ffi.sizeof("memhook_region")})
            lib.memhook_testing_cache_lookup(cache, p, 1, out)
            return (out.base, out.size, out.mem_type, out.device)

        apply(_row(ALLOC, A, 4096, M.CUDA_HOST, -1), _row(ALLOC, A + 4096, 4096, M.CUDA_HOST, -1))
        assert lookup(A) == (A, 4096, M.CUDA_HOST, -1)
        assert lookup(A + 4096) == (A + 4096, 4096, M.CUDA_HOST, -1)
        apply(_row(FREE, A, 0, M.CUDA_HOST, -1, flags=size_unknown))
        assert lookup(A)[2:] == (M.UNKNOWN, -1)
        assert lookup(A + 4096)[2:] == (M.UNKNOWN, -1)   # (the touching run: one region)
        # One that is not in the cache, or failed, changes nothing.
        apply(_row(FREE, A + (1 << 20), 0, flags=size_unknown),
              _row(FREE, A, 0, flags=size_unknown, result=1))
        assert lookup(A + (1 << 20))[2] == M.HOST
        regions = ffi.new("memhook_region[]", 8)
        n = lib.memhook_testing_cache_regions(cache, regions, 8)
        assert [(r.base, r.size, r.mem_type) for r in regions[0:n]] == \
            [(A, 4096, M.UNKNOWN), (A + 4096, 4096, M.UNKNOWN)]
    finally:
        lib.memhook_testing_cache_free(cache)


def test_malformed_event_is_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    """An event from a native recorder that runs past the address space (or
    has a nonsense type code) does not stop the drain."""
    seen: list[Event] = []
    memhook.subscribe(seen.append)
    with caplog.at_level(logging.WARNING, logger="memhook"):
        record(ALLOC, "cudaMalloc", (1 << 64) - 16, 64)
        _drain.lib.memhook_events_record(ALLOC, -1, A, 64, 99, -7, 0)
        assert memhook.flush() == 2
    assert any("ignored" in r.getMessage() for r in caplog.records if r.name == "memhook")
    assert seen[1].function == "function#-1" and seen[1].mem_type is M.UNKNOWN
    # The cache holds it as UNKNOWN (no hooks vouch for it here: a query
    # would ask a driver to resolve it, were one initialised in this process).
    assert _in_window(process_cache().regions()) == [memhook.Region(A, 64, M.UNKNOWN, -1)]


def test_threads_record_and_drain_concurrently() -> None:
    """4 threads record alloc/free pairs while 3 others drain (flush and
    queries); a subscriber sees every event exactly once, in seq order, each
    thread's ALLOC before its FREE, and the cache ends empty."""
    producers, pairs = 4, 3000
    seen: list[Event] = []
    memhook.subscribe(seen.append)
    start = threading.Barrier(producers + 3)
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce(t: int) -> None:
        try:
            start.wait()
            base = A + t * (1 << 30)
            for i in range(pairs):
                record(ALLOC, "cuMemAlloc_v2", base + i * 256, 256, M.CUDA, t)
                record(FREE, "cuMemFree_v2", base + i * 256, 256, M.CUDA, t)
        except BaseException as exc:  # noqa: BLE001  # pragma: no cover - reported below
            errors.append(exc)

    def consume(k: int) -> None:
        try:
            start.wait()
            while not stop.is_set():
                if k == 0:
                    memhook.flush()
                else:
                    memhook.memory_type(A + k)
        except BaseException as exc:  # noqa: BLE001  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(producers)]
    drainers = [threading.Thread(target=consume, args=(k,)) for k in range(3)]
    for th in threads + drainers:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    for th in drainers:
        th.join()
    memhook.flush()
    assert not errors, errors
    assert len(seen) == producers * pairs * 2
    seqs = [e.seq for e in seen]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    open_allocs: dict[int, int] = {}
    for e in seen:
        if e.kind is EventKind.ALLOC:
            assert e.address not in open_allocs
            open_allocs[e.address] = e.tid
        else:
            assert open_allocs.pop(e.address) == e.tid
    assert not open_allocs
    assert not [r for r in process_cache().regions() if r.start >= WINDOW]


def test_coverage_token_moves_with_what_the_answer_depends_on(tmp_path: Path) -> None:
    """The core's token changes with the mode and with every object loaded."""
    from memhook._binding.core import lib

    before = int(lib.memhook_coverage_token())
    assert before & 3 == int(lib.memhook_hooks_mode())
    src = tmp_path / "extra.c"
    src.write_text("int memhook_token_probe(void) { return 7; }\n")
    so = tmp_path / "libextra.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    handle = ctypes.CDLL(str(so))
    assert handle.memhook_token_probe() == 7
    after = int(lib.memhook_coverage_token())
    assert after >> 3 > before >> 3, (before, after)
    assert after & 7 == before & 7
