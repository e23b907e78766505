"""Many producers, one drainer, exact counts:

    python stress.py MODE FIXTURE THREADS ITERS

FIXTURE (fixtures/stress.c) runs THREADS pthreads, each making ITERS
cuMemAlloc_v2 + cuMemFree_v2 pairs through the hooks; it is called through
ctypes, so the GIL is free for a Python thread that drains all the while
(memhook.flush()) with a subscriber counting.  Every pair must arrive as one
ALLOC and one FREE of that thread - no event lost, none doubled - and the
queue's memory must stay bounded: segments are reclaimed while it drains,
and all but a couple are gone once it is empty.  Prints the figures.
"""

from __future__ import annotations

import collections
import ctypes
import sys
import threading
import time

from hkchild import Cases, check_install, install, mode_arg

import memhook
from memhook import EventKind
from memhook._binding.core import ffi, lib

# Segments the queue may keep beyond its backlog's.  Each thread records
# into a lane of its own (csrc/queue/event_lane.c): a lane holds the segment
# it writes, the one the drain is reading (when they differ) and one spare;
# the process keeps up to SPARE_SEGMENTS = 64 more for any lane.  Lanes:
# the producers, the main thread, and one for luck (a helper thread).
SPARE_SEGMENTS = 64


def slack(threads: int) -> int:
    return 3 * (threads + 2) + SPARE_SEGMENTS


def after_drain(threads: int) -> int:
    """Once everything is drained and no producer runs: per lane its current
    segment and a spare, and the pool."""
    return 2 * (threads + 2) + SPARE_SEGMENTS


def main() -> int:
    mode = mode_arg()
    fixture, threads, iters = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    stress = ctypes.CDLL(fixture)
    stress.hk_stress.restype = ctypes.c_long
    stress.hk_stress.argtypes = (ctypes.c_int, ctypes.c_long, ctypes.c_size_t)

    counts: collections.Counter = collections.Counter()
    other: list = []
    size = 64

    def count(ev: memhook.Event) -> None:
        if ev.result == 0 and ev.size == size and ev.function in ("cuMemAlloc_v2", "cuMemFree_v2"):
            counts[ev.kind, ev.tid] += 1
        else:
            other.append(ev)

    sub = memhook.subscribe(count)
    done = threading.Event()
    drains = [0, 0]  # calls, events
    samples: list[tuple[int, int]] = []  # (segments_live, events pending) after each flush
    raw = ffi.new("memhook_queue_stats *")

    def sample() -> None:
        lib.memhook_queue_stats_get(raw)
        samples.append((int(raw.segments_live), int(raw.produced) - int(raw.consumed)))

    def drainer() -> None:
        while not done.is_set():
            drains[1] += memhook.flush()
            drains[0] += 1
            sample()
        drains[1] += memhook.flush()

    drain_thread = threading.Thread(target=drainer)
    drain_thread.start()
    t0 = time.perf_counter()
    failures = stress.hk_stress(threads, iters, size)
    elapsed = time.perf_counter() - t0
    done.set()
    drain_thread.join()
    memhook.flush()
    sub.close()
    q = memhook.status().queue

    with cases.case("stress"):
        total = threads * iters
        cases.check(failures == 0, f"hk_stress returned {failures} (failed calls or setup)")
        allocs = {tid: n for (kind, tid), n in counts.items() if kind == EventKind.ALLOC}
        frees = {tid: n for (kind, tid), n in counts.items() if kind == EventKind.FREE}
        cases.check(sum(allocs.values()) == total,
                    f"ALLOC events: {sum(allocs.values())}, want {total}")
        cases.check(sum(frees.values()) == total,
                    f"FREE events: {sum(frees.values())}, want {total}")
        cases.check(len(allocs) == threads and set(allocs.values()) == {iters},
                    f"ALLOCs per thread: {sorted(allocs.values())}, want {threads} x {iters}")
        cases.check(allocs == frees, "FREEs per thread differ from ALLOCs per thread")
        cases.check(not other, f"{len(other)} unexpected events, e.g. {other[:3]}")
        cases.check(q.pending == 0, f"{q.pending} events still pending after the last flush")
        # (memhook's background feeder, memhook/_events/feeder.py, delivers part of
        # them too: the subscriber's counts above are the exact check.)
        cases.check(0 < drains[1] <= 2 * total + 2, f"the drainer took {drains[1]} events")
        # Bounded memory: the queue never drops, so while producers outrun
        # the drainer it grows with the backlog - but only with the backlog.
        # After every drain the segments mapped are those the pending events
        # occupy plus a few per lane and the spare pool (slack), never the
        # history; after the last drain, at most after_drain(threads).
        seg_events = q.segment_bytes // ffi.sizeof("memhook_event")  # (at least)
        worst = max(samples, key=lambda s: s[0] - s[1] / seg_events, default=(0, 0))
        cases.check(samples, "the drainer never sampled the queue")
        cases.check(worst[0] <= worst[1] / seg_events + slack(threads),
                    f"{worst[0]} segments mapped with {worst[1]} events pending "
                    f"({worst[1] / seg_events:.0f} segments' worth): drained segments "
                    "were not reclaimed")
        cases.check(q.segments_live <= after_drain(threads),
                    f"{q.segments_live} segments mapped after the last drain, "
                    f"want at most {after_drain(threads)}")
        cases.note(f"mode={mode} threads={threads} iters={iters} seconds={elapsed:.2f} "
                   f"drain_calls={drains[0]} segments_peak={q.segments_peak} "
                   f"max_pending_events={max((p for _, p in samples), default=0)} "
                   f"worst_excess_segments={worst[0] - worst[1] / seg_events:.1f} "
                   f"segments_live_after={q.segments_live} segment_bytes={q.segment_bytes} "
                   f"produced={q.produced}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
