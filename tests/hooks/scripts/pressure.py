"""Queries while threads allocate without pause (issue 15):

    python pressure.py MODE THREADS

THREADS Python threads make cuMemAlloc_v2 + cuMemFree_v2 pairs (64 B) in a
loop through ctypes, and a subscriber counts their events.  Cases:
  query      every 0.25 s, five times, one memory_type() of a fresh
             allocation (it must drain everything pending first) returns
             CUDA; the median within QUERY_LIMIT_S, the slowest within
             QUERY_MAX_S; then the producers stop and every pair arrives as
             one ALLOC and one FREE of its thread, none lost, none doubled;
  uninstall  with the producers running again, uninstall() returns within
             UNINSTALL_LIMIT_S.
The limits are the issue's (250 ms, 2 s), applied to the median of five
queries: on the dev box (2 cores, load average 7-9 from other builds) single
queries measured 2-370 ms with 8 threads - the slow ones found a backlog of
~10k events, which the background feeder, sharing the GIL and two busy cores
with 8 producers, had not yet delivered (~6 us an event with a subscriber,
times the contention).  Before this change a query took 2-5.6 s and did not
return within 30 s with 2 threads on a loaded box.  uninstall measured
16-200 ms (before: 1.6-4.4 s).
"""

from __future__ import annotations

import collections
import sys
import threading
import time

from hkchild import Cases, alloc_free_v2, check_install, install, load_driver, mode_arg, \
    primary_context

import memhook
from memhook import EventKind, MemoryType

QUERY_LIMIT_S = 0.25
QUERY_MAX_S = 2.0
QUERIES = 5
UNINSTALL_LIMIT_S = 2.0
SIZE = 64


def producers(cu, ctx, threads: int, stop: threading.Event, made: dict[int, int]) -> list:
    alloc, free = alloc_free_v2(cu)

    def loop() -> None:
        tid = threading.get_native_id()
        cu.cuCtxSetCurrent(ctx)
        n = 0
        while not stop.is_set():
            p, _ = alloc(SIZE)
            free(p)
            n += 1
        made[tid] = n

    ts = [threading.Thread(target=loop) for _ in range(threads)]
    for t in ts:
        t.start()
    return ts


def main() -> int:
    mode = mode_arg()
    threads = int(sys.argv[2])
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    cu = load_driver()
    ctx = primary_context(cu)
    alloc, free = alloc_free_v2(cu)
    cu.cuMemFree_v2  # looked up while installed (reloc answers dlsym with the wrapper)
    counts: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def count(ev: memhook.Event) -> None:
        if ev.result == 0 and ev.size == SIZE:
            with lock:
                counts[ev.kind, ev.tid] += 1

    memhook.subscribe(count)
    with cases.case("query"):
        stop = threading.Event()
        made: dict[int, int] = {}
        ts = producers(cu, ctx, threads, stop, made)
        took_all, backlogs, answers = [], [], []
        for _ in range(QUERIES):
            time.sleep(0.25)
            p, _ = alloc(4096)
            q = memhook.status().queue
            t0 = time.perf_counter()
            answers.append(memhook.memory_type(p))
            took_all.append(time.perf_counter() - t0)
            backlogs.append(q.produced - q.consumed)
            free(p)
        stop.set()
        for t in ts:
            t.join()
        cases.check(len(made) == threads, f"{threads - len(made)} producers failed")
        memhook.flush()
        cases.check(all(a == MemoryType.CUDA for a in answers),
                    f"memory_type of a live allocation: {answers}")
        took = sorted(took_all)[len(took_all) // 2]
        cases.check(took <= QUERY_LIMIT_S, f"a memory_type() took {took * 1e3:.0f} ms "
                    f"(median of {QUERIES}) with {threads} threads allocating (limit "
                    f"{QUERY_LIMIT_S * 1e3:.0f} ms)")
        cases.check(max(took_all) <= QUERY_MAX_S, f"a memory_type() took "
                    f"{max(took_all):.2f} s with {threads} threads allocating")
        for tid, n in made.items():
            a, f = counts[EventKind.ALLOC, tid], counts[EventKind.FREE, tid]
            cases.check(a == n and f == n, f"thread {tid} made {n} pairs; {a} ALLOCs and "
                        f"{f} FREEs arrived")
        cases.note(f"query_ms={[round(t * 1e3, 1) for t in took_all]} "
                   f"backlog_before={backlogs} pairs={sum(made.values())}")
    with cases.case("uninstall"):
        stop = threading.Event()
        ts = producers(cu, ctx, threads, stop, {})
        time.sleep(0.5)
        t0 = time.perf_counter()
        memhook.uninstall()
        took = time.perf_counter() - t0
        stop.set()
        for t in ts:
            t.join()
        cases.check(took <= UNINSTALL_LIMIT_S, f"uninstall() took {took:.2f} s with "
                    f"{threads} threads allocating (limit {UNINSTALL_LIMIT_S} s)")
        cases.note(f"uninstall_s={took:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
