"""Queries from a periodic signal handler beside native allocators must not
starve the program (issue 32 item 6):

    python signal_livelock.py MODE CHURN_LIBRARY INTERVAL_S SECONDS POINTERS

Two C threads (fixtures/churn.c) make alloc/free pairs through the hooks
all the while.  A SIGALRM handler every INTERVAL_S asks memory_types() of
POINTERS pointers (0: none), memory_type() and lookup(); the main thread allocates, asks
and frees, and flushes now and then.  The handler lands anywhere - also
while the main thread holds the apply lock, where it cannot drain, and
where each query used to take more events out of the core and scan all it
had taken: once one handler ran longer than the interval, handlers nested
and the main thread never ran again.  A watchdog thread stops the timer
after SECONDS.  The main thread must have kept making progress all along
(no gap between its rounds over GAP_S), and every answer must be right.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
import time

import numpy as np
from hkchild import MODES, Cases, alloc_free_v2, load_driver, mode_arg, primary_context

import memhook
from memhook import MemoryType

GAP_S = 3.0  # (a loaded 2-core box: the rounds themselves take milliseconds)


def main() -> int:
    mode = mode_arg()
    churn = ctypes.CDLL(sys.argv[2])
    interval, seconds, count = float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
    cases = Cases()
    cu = load_driver()
    memhook.install(MODES[mode])
    primary_context(cu)
    alloc, free = alloc_free_v2(cu)
    known, _ = alloc(1 << 20)
    host = ctypes.create_string_buffer(4096)
    host_ptr = ctypes.addressof(host)
    ptrs = np.array([known + 4096 * i for i in range(count - 1)] + [host_ptr] * (count > 0),
                    dtype=np.uint64)
    want = [MemoryType.CUDA] * (count - 1) + [MemoryType.HOST] * (count > 0)
    state = {"calls": 0, "depth": 0, "deepest": 0, "wrong": []}

    def handler(signum: int, frame: object) -> None:
        state["calls"] += 1
        state["depth"] += 1
        state["deepest"] = max(state["deepest"], state["depth"])
        try:
            batch = [MemoryType(c) for c in memhook.memory_types(ptrs).tolist()] if count else []
            one = memhook.memory_type(known)
            region = memhook.lookup(known + 64, 64)
            if batch != want or one is not MemoryType.CUDA or region is None or not (
                    region.start <= known and known + 128 <= region.start + region.size):
                state["wrong"].append(f"{one} {region} {batch[:2]}")
        finally:
            state["depth"] -= 1

    def watchdog() -> None:
        time.sleep(seconds)
        signal.setitimer(signal.ITIMER_REAL, 0, 0)

    with cases.case("handler queries"):
        cases.check(churn.hk_churn_start(2, 0, 0, 0) == 0, "the churn did not start")
        signal.signal(signal.SIGALRM, handler)
        stamps: list[float] = []
        wrong_main = 0
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, interval, interval)
        threading.Thread(target=watchdog, daemon=True).start()
        try:
            while time.perf_counter() - t0 < seconds:
                p, _ = alloc(4096)
                if memhook.memory_type(p) is not MemoryType.CUDA:
                    wrong_main += 1
                free(p)
                if len(stamps) % 3 == 0:
                    memhook.flush()
                stamps.append(time.perf_counter())
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            errors = churn.hk_churn_stop()
        late = time.perf_counter() - t0 - seconds
        gaps = [b - a for a, b in zip([t0, *stamps], stamps)]
        widest = max(gaps, default=seconds)
        cases.check(errors == 0, f"{errors} churn calls failed")
        cases.check(len(stamps) >= 20 and widest <= GAP_S,
                    f"the main thread starved: {len(stamps)} rounds, longest gap "
                    f"{widest:.2f} s, handlers nested {state['deepest']} deep, "
                    f"{state['calls']} handler calls, finished {late:.1f} s late")
        cases.check(state["calls"] >= 10, f"the handler ran only {state['calls']} times")
        cases.check(not state["wrong"], f"{len(state['wrong'])} wrong answers in the handler, "
                                        f"e.g. {state['wrong'][:3]}")
        cases.check(wrong_main == 0, f"{wrong_main} wrong answers in the main thread")
        cases.note(f"interval {interval * 1e3:g} ms: {len(stamps)} main rounds (longest gap "
                   f"{widest * 1e3:.0f} ms), {state['calls']} handler calls, nested at most "
                   f"{state['deepest']} deep")
    free(known)
    memhook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
