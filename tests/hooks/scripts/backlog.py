"""Millions of events and no query (issue 15):

    python backlog.py MODE FIXTURE THREADS ITERS

FIXTURE (fixtures/stress.c) runs THREADS pthreads making ITERS
cuMemAlloc_v2 + cuMemFree_v2 pairs each through the hooks, called through
ctypes so the GIL is free; this process never queries while they run, and
has no subscriber.  memhook's background feeder (memhook/_events/feeder.py) keeps
the backlog short, so:
  backlog   the queue's segments stay within SEGMENT_BOUND (16 MiB of 16 KiB
            segments; before the feeder, 4M events held 245 MiB), sampled
            every 10 ms through memhook_queue_stats_get (a C call, not a
            query: it drains nothing), and the flush() after the producers
            finish takes at most FLUSH_LIMIT_S; the cache then holds no
            region of the 64-byte pairs (every FREE arrived after its ALLOC).

The test runs 2 x 100,000 pairs (400,000 events: 1,563 segments if nothing
drained them, so it fails without the feeder); the issue's 4M events (2 x
1,000,000, 69 s on the dev box, the simulator's munmap is most of it)
measured peak_segments=86 (1.4 MiB) and flush_s=0.001.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time

from hkchild import Cases, check_install, install, mode_arg

import memhook
from memhook._binding.core import ffi, lib
from memhook.cache import process_cache

SEGMENT_BOUND = 1024      # 16 MiB
FLUSH_LIMIT_S = 1.0


def main() -> int:
    mode = mode_arg()
    fixture, threads, iters = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    stress = ctypes.CDLL(fixture)
    stress.hk_stress.restype = ctypes.c_long
    stress.hk_stress.argtypes = (ctypes.c_int, ctypes.c_long, ctypes.c_size_t)
    with cases.case("backlog"):
        raw = ffi.new("memhook_queue_stats *")
        peak = [0, 0]  # segments, events pending
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.01):
                lib.memhook_queue_stats_get(raw)
                if raw.segments_live > peak[0]:
                    peak[:] = [int(raw.segments_live), int(raw.produced - raw.consumed)]

        sampler = threading.Thread(target=sample)
        sampler.start()
        t0 = time.perf_counter()
        failures = stress.hk_stress(threads, iters, 64)
        produced_s = time.perf_counter() - t0
        done.set()
        sampler.join()
        t0 = time.perf_counter()
        memhook.flush()
        flush_s = time.perf_counter() - t0
        q = memhook.status().queue
        cases.check(failures == 0, f"{failures} driver calls failed")
        cases.check(q.produced >= 2 * threads * iters, f"{q.produced} events produced")
        cases.check(q.pending == 0, f"{q.pending} events pending after flush()")
        cases.check(peak[0] <= SEGMENT_BOUND, f"{peak[0]} segments ({peak[0] * 16 // 1024} MiB) "
                    f"mapped with {peak[1]} events pending; bound {SEGMENT_BOUND}")
        cases.check(flush_s <= FLUSH_LIMIT_S, f"flush() after the run took {flush_s:.2f} s")
        left = [r for r in process_cache().regions() if r.size == 64]
        cases.check(not left, f"{len(left)} regions of freed 64-byte allocations remain")
        cases.note(f"events={q.produced} produce_s={produced_s:.2f} flush_s={flush_s:.3f} "
                   f"peak_segments={peak[0]} pending_at_peak={peak[1]} "
                   f"segments_peak={q.segments_peak}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
