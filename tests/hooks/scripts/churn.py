"""install/flush/uninstall cycles in a busy process:

    python churn.py MODE FIXTURE CYCLES CALLERS SPINNERS CALLER_MASK SPINNER_MASK BOUND_MS

FIXTURE (fixtures/churn.c) runs CALLERS threads making checked
cuMemAlloc_v2/cuMemFree_v2 pairs and SPINNERS threads burning CPU, with the
signal masks given (0 none, 1 SIGTRAP, 2 real-time signals, 3 all).
FIXTURE "python" runs them as Python threads instead (the pairs through
ctypes, which releases the GIL around each call; the spinners hold it
whenever they run), masks 0: every call of the cycle then competes for the
GIL with eight threads that want it, and a cycle must still never wait for
one of them (issue 23).  Each
cycle is install(MODE); flush(); uninstall(); every install must cover every
present driver function (by some mechanism of MODE, with bistro's reason
where bistro refused), no call may go wrong, no cycle may take longer than
BOUND_MS.  Prints the median and the maximum cycle.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import threading
import time
from typing import Any

from hkchild import MODES, Cases, alloc_free_v2, load_driver, primary_context

import memhook
from memhook import HookMode


class PythonChurn:
    """fixtures/churn.c's interface, with Python threads."""

    def __init__(self) -> None:
        self.stop_flag = False
        self.threads: list[threading.Thread] = []
        self.count = 0
        self.errors = 0

    def hk_churn_start(self, callers: int, spinners: int, cmask: int, smask: int) -> int:
        if cmask or smask:
            return -1
        cu = load_driver()
        ctx = primary_context(cu)
        alloc, free = alloc_free_v2(cu)

        def call() -> None:
            cu.cuCtxSetCurrent(ctx)
            while not self.stop_flag:
                try:
                    p, _ = alloc(64)
                    free(p)
                    self.count += 1
                except Exception:  # noqa: BLE001 - counted, as churn.c counts them
                    self.errors += 1

        def spin() -> None:
            x = 0
            while not self.stop_flag:
                x += 1

        self.threads = [threading.Thread(target=call, daemon=True) for _ in range(callers)]
        self.threads += [threading.Thread(target=spin, daemon=True) for _ in range(spinners)]
        for t in self.threads:
            t.start()
        return 0

    def hk_churn_calls(self) -> int:
        return self.count

    def hk_churn_stop(self) -> int:
        self.stop_flag = True
        for t in self.threads:
            t.join()
        return self.errors


def main() -> int:
    mode = sys.argv[1]
    fixture = sys.argv[2]
    cycles, callers, spinners, cmask, smask, bound_ms = (int(a) for a in sys.argv[3:9])
    # The first install of a process also does the process's one-time work
    # (every loaded object's ELF index, bistro's islands, lazy binding):
    # 14-22 ms here with nothing else running, against 3 ms for a later one.
    first_bound_ms = int(sys.argv[9]) if len(sys.argv) > 9 else bound_ms
    # An optional bound on the median cycle (the Python-threads case: a
    # cycle's own work is a millisecond or two, and its worst case is the
    # interpreter's - each time it makes a cycle give up the GIL, the cycle
    # waits its turn among eight threads that want it).
    median_bound_ms = float(sys.argv[10]) if len(sys.argv) > 10 else None
    cases = Cases()
    lib: Any
    if fixture == "python":
        lib = PythonChurn()
    else:
        lib = ctypes.CDLL(fixture)
        lib.hk_churn_calls.restype = ctypes.c_long
        lib.hk_churn_stop.restype = ctypes.c_long
    with cases.case("churn"):
        cases.check(lib.hk_churn_start(callers, spinners, cmask, smask) == 0, "start failed")
        try:
            run(cases, mode, cycles, bound_ms, first_bound_ms, lib, callers, median_bound_ms)
        finally:
            errors = lib.hk_churn_stop()
        cases.check(errors == 0, f"{errors} calls went wrong")
    return 0


def run(cases: Cases, mode: str, cycles: int, bound_ms: int, first_bound_ms: int,
        lib: Any, callers: int, median_bound_ms: float | None = None) -> None:
    if True:
        times: list[float] = []
        flushes: list[float] = []
        refused: set[str] = set()
        want = HookMode.parse(MODES[mode])
        for cycle in range(cycles):
            t0 = time.perf_counter()
            report = memhook.install(MODES[mode])
            t1 = time.perf_counter()
            if not os.environ.get("CHURN_NO_FLUSH"):
                memhook.flush()
            t2 = time.perf_counter()
            flushes.append((t2 - t1) * 1000)
            dt_install = t1 - t0
            for h in report.hooks:
                if h.api != "driver" or not h.present or not h.kind:  # (kind 0: off)
                    continue
                if not h.installed:
                    cases.check(False, f"cycle {cycle}: {h.name} not covered: {h.reason}")
                elif not h.mechanism & HookMode.BISTRO and want & HookMode.BISTRO:
                    cases.check(h.reason.startswith("bistro"),
                                f"cycle {cycle}: {h.name} not patched by bistro and no "
                                f"reason says why: {h.reason!r}")
                    refused.add(f"{h.name}: {h.reason}")
            t3 = time.perf_counter()
            memhook.uninstall()
            # The bound is on what install/uninstall do; flush() drains
            # what the callers recorded meanwhile (the event path's cost).
            times.append((time.perf_counter() - t3 + t1 - t0) * 1000)
            bound = first_bound_ms if cycle == 0 else bound_ms
            cases.check(times[-1] <= bound,
                        f"cycle {cycle} took {times[-1]:.1f} ms (install {dt_install * 1000:.1f})"
                        f", over {bound} ms")
        calls = lib.hk_churn_calls()
        cases.check(calls > 0 or callers == 0, "the callers made no call")
        if median_bound_ms is not None:
            cases.check(statistics.median(times) <= median_bound_ms,
                        f"the median cycle took {statistics.median(times):.1f} ms, over "
                        f"{median_bound_ms:.0f} ms")
        print(f"CHURN mode={mode} cycles={cycles} calls={calls} "
              f"median_ms={statistics.median(times):.2f} max_ms={max(times):.2f} "
              f"first_ms={times[0]:.2f} later_max_ms={max(times[1:], default=0.0):.2f} "
              f"flush_median_ms={statistics.median(flushes):.2f} flush_max_ms={max(flushes):.2f} "
              f"bistro_refused={len(refused)}", flush=True)
        for r in sorted(refused)[:5]:
            print(f"REFUSED {r}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
