"""Queries and install cycles beside native producers (issue 23):

    python native_queries.py MODE FIXTURE CALLERS SPINNERS SECONDS BOUND_MS

FIXTURE (fixtures/churn.c) runs CALLERS C threads making checked
cuMemAlloc_v2/cuMemFree_v2 pairs in tight loops - recording events ten
times faster than Python could apply them one at a time - and SPINNERS C
threads burning CPU.  The hooks are installed once.  For SECONDS the main
thread asks, every 10 ms: memory_type() of an allocation it holds (CUDA), of
one it has just made (CUDA: its ALLOC was published before the query
began), of a host buffer (HOST), and lookup() of the held one; then it runs
five uninstall()+install() cycles and asks again (those answers are
checked, not timed: see below).  Every answer must be right, no query and
no cycle may take longer than BOUND_MS, and the core's
queue must not keep growing (the drain keeps up).  Prints the p50, p99 and
maximum query and cycle times and the producers' event rate.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import time

from hkchild import MODES, Cases, byref, c_uint64, load_driver, mode_arg, ok, primary_context

import memhook
from memhook import MemoryType


def main() -> int:
    mode = mode_arg()
    fixture = sys.argv[2]
    callers, spinners = int(sys.argv[3]), int(sys.argv[4])
    seconds, bound_ms = float(sys.argv[5]), float(sys.argv[6])
    cases = Cases()
    cu = load_driver()
    lib = ctypes.CDLL(fixture)
    lib.hk_churn_calls.restype = ctypes.c_long
    lib.hk_churn_stop.restype = ctypes.c_long
    memhook.install(MODES[mode])
    primary_context(cu)

    def alloc(size: int) -> int:
        p = c_uint64()
        ok(cu.cuMemAlloc_v2(byref(p), size), "cuMemAlloc_v2")
        return p.value

    held = alloc(1 << 20)
    host = ctypes.create_string_buffer(4096)
    host_ptr = ctypes.addressof(host)
    with cases.case("queries"):
        cases.check(lib.hk_churn_start(callers, spinners, 0, 0) == 0, "start failed")
        wrong: list[str] = []
        times: list[float] = []
        cycles: list[float] = []
        produced0 = memhook.status().queue.produced
        t_start = time.perf_counter()

        def ask(label: str, timed: bool = True) -> None:
            fresh = alloc(4096)
            t0 = time.perf_counter()
            answers = (memhook.memory_type(held), memhook.memory_type(fresh),
                       memhook.memory_type(host_ptr), memhook.lookup(held + 100, 16))
            if timed:
                times.append(time.perf_counter() - t0)
            ok(cu.cuMemFree_v2(c_uint64(fresh)), "cuMemFree_v2")
            want = (MemoryType.CUDA, MemoryType.CUDA, MemoryType.HOST)
            region = answers[3]
            if answers[:3] != want or region is None or not (
                    region.start <= held and held + 100 + 16 <= region.start + region.size
                    and region.mem_type is MemoryType.CUDA):
                wrong.append(f"{label}: {answers}")

        try:
            deadline = t_start + seconds
            i = 0
            while time.perf_counter() < deadline:
                time.sleep(0.01)
                ask(f"query {i}")
                i += 1
            pending_after_queries = memhook.status().queue.pending
            produced = memhook.status().queue.produced - produced0
            elapsed = time.perf_counter() - t_start
            for c in range(5):
                t0 = time.perf_counter()
                memhook.uninstall()
                memhook.install(MODES[mode])
                cycles.append(time.perf_counter() - t0)
                # Right, but not timed: once the hooks were out while the
                # driver was in use, nothing vouches for a pointer in no
                # region, and the host buffer's answer comes from the
                # driver - the simulator's, whose one lock the four callers
                # hold across their mmap calls (hundreds of ms on a loaded
                # box: the simulator's time, not memhook's).
                ask(f"after cycle {c}", timed=False)
        finally:
            errors = lib.hk_churn_stop()
        cases.check(errors == 0, f"{errors} calls of the producers went wrong")
        cases.check(not wrong, f"{len(wrong)} wrong answers, e.g. {wrong[:3]}")
        q = sorted(times)
        worst_q, worst_c = q[-1] * 1e3, max(cycles) * 1e3
        cases.check(worst_q <= bound_ms, f"a query took {worst_q:.1f} ms, over {bound_ms:.0f}")
        cases.check(worst_c <= bound_ms, f"a cycle took {worst_c:.1f} ms, over {bound_ms:.0f}")
        # Keeping up: what is left in the queue after 6 s is a few batches'
        # worth, not the millions a drain that falls behind leaves.
        cases.check(pending_after_queries < 1_000_000,
                    f"{pending_after_queries} events still pending: the drain fell behind")
        cases.note(f"NATIVE mode={mode} callers={callers} spinners={spinners} "
                   f"queries={len(q)} p50_ms={statistics.median(q) * 1e3:.2f} "
                   f"p99_ms={q[int(0.99 * (len(q) - 1))] * 1e3:.2f} max_ms={worst_q:.2f} "
                   f"cycle_max_ms={worst_c:.2f} events_per_s={produced / elapsed:.0f} "
                   f"pending={pending_after_queries}")
    memhook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
