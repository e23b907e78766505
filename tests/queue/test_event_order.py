"""The order events leave the queue in, across threads (the queue keeps one
lane per thread and the drain merges them by timestamp: event_drain.c).

fixtures/handoff_order.c passes a few addresses from thread to thread as an
allocator would and checks, in the drained order, that every address
alternates ALLOC and FREE, that seqs run 0, 1, 2, ... with every event once,
that the lanes of exited threads are reused, that 128 threads recording at
once (128 lanes merged) each get their events out whole and in order, and
that a thread's own ALLOC
comes out of the flush right after it while other threads keep recording
(the drain holds back events newer than its horizon, and looks again: with
one look instead of four, 12-29 of the 2000 were missed).  It also runs with the
core rebuilt under ThreadSanitizer (test_sanitized_hooks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from queue_testing import FIXTURES


@pytest.mark.parametrize("clock", ["tsc", "monotonic"])
def test_a_reused_address_is_freed_before_it_is_allocated_again(native, tmp_path: Path,
                                                                clock: str) -> None:
    exe = native.compile(FIXTURES / "handoff_order.c", tmp_path / "handoff_order",
                         extra=[f"-L{native.core.parent}", "-lmemhook",
                                f"-Wl,-rpath,{native.core.parent}", "-lpthread"])
    env = native.env(**({"MEMHOOK_CLOCK": "monotonic"} if clock == "monotonic" else {}))
    out = native.run([str(exe)], env=env, timeout=240).stdout
    assert out.startswith("ok events 320800 ") and "(128 with 128 threads at once)" in out, out


def test_pending_flag_never_hides_an_event(native, tmp_path: Path) -> None:
    """fixtures/pending_wakeup.c: 4 threads allocate and free through the
    installed hooks in 300 bursts while the main thread drains; after each
    burst, with every producer idle, the flag Python's fast path reads must
    be set if anything is pending, and in the end every event arrives.  (A
    hook skips the flag store when it finds the flag set, behind a fence;
    the race that fence closes - a drain clearing the flag while the event
    is still in the producer's store buffer - did not show on the dev box
    even with the fence removed, so this test holds the invariant, not the
    fence: an announcement that never stores fails it at once.)"""
    exe = native.compile(FIXTURES / "pending_wakeup.c", tmp_path / "pending_wakeup",
                         extra=[f"-L{native.core.parent}", "-lmemhook",
                                f"-Wl,-rpath,{native.core.parent}", "-lpthread", "-ldl"])
    out = native.run([str(exe), str(native.libcuda)], timeout=240).stdout
    assert out.startswith("ok events 120000 bursts 300"), out


def test_a_background_drain_leaves_the_producers_lines_and_loses_nothing(
        native, tmp_path: Path) -> None:
    """fixtures/drain_behind.c: memhook_events_drain_background takes none
    of the 16 newest events of a lane written since the last look (the
    lines its producer writes next: issue 26 item 4), takes an idle lane
    whole, keeps a thread's order while it records, and what it leaves a
    complete drain (a query's, a flush's) hands out - every event once."""
    exe = native.compile(FIXTURES / "drain_behind.c", tmp_path / "drain_behind",
                         extra=[f"-L{native.core.parent}", "-lmemhook",
                                f"-Wl,-rpath,{native.core.parent}", "-lpthread"])
    out = native.run([str(exe)], timeout=240).stdout
    assert out.startswith("ok background "), out
