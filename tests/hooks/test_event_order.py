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
from hooks_testing import FIXTURES


@pytest.mark.parametrize("clock", ["tsc", "monotonic"])
def test_a_reused_address_is_freed_before_it_is_allocated_again(native, tmp_path: Path,
                                                                clock: str) -> None:
    exe = native.compile(FIXTURES / "handoff_order.c", tmp_path / "handoff_order",
                         extra=[f"-L{native.core.parent}", "-lmemhook",
                                f"-Wl,-rpath,{native.core.parent}", "-lpthread"])
    env = native.env(**({"MEMHOOK_CLOCK": "monotonic"} if clock == "monotonic" else {}))
    out = native.run([str(exe)], env=env, timeout=240).stdout
    assert out.startswith("ok events 320800 ") and "(128 with 128 threads at once)" in out, out
