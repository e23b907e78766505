"""Queries from a Python signal handler while the main thread drains:

    python signal_queries.py MODE SECONDS

A SIGALRM handler (setitimer, every 5 ms) asks memory_type(), lookup() and
memory_types() of an allocation it knows and of a host buffer, and now and then calls
flush(), while the main thread allocates and frees through the hooks,
flushes, and queries - so the signal lands anywhere in the drain,
including on the thread that holds its locks (a subscriber makes the
delivery stage run too).  It must finish (a handler that waits for a lock
its own thread holds hangs it: issue 23 saw that 7 of 7 runs), and every
answer the handler got must be right.
"""

from __future__ import annotations

import ctypes
import signal
import sys
import time

from hkchild import MODES, Cases, alloc_free_v2, load_driver, mode_arg, primary_context

import memhook
from memhook import MemoryType


def main() -> int:
    mode = mode_arg()
    seconds = float(sys.argv[2])
    cases = Cases()
    cu = load_driver()
    memhook.install(MODES[mode])
    primary_context(cu)
    alloc, free = alloc_free_v2(cu)
    known, _ = alloc(1 << 20)
    host = ctypes.create_string_buffer(4096)
    host_ptr = ctypes.addressof(host)
    seen: list[int] = []
    memhook.subscribe(lambda e: seen.append(e.seq))
    state = {"calls": 0, "wrong": [], "flushes": 0}

    def handler(signum: int, frame: object) -> None:
        state["calls"] += 1
        answers = (memhook.memory_type(known), memhook.memory_type(host_ptr))
        region = memhook.lookup(known + 64, 64)
        batch = tuple(memhook.memory_types([known + 8, host_ptr + 8]).tolist())
        if batch != (MemoryType.CUDA, MemoryType.HOST):
            state["wrong"].append(f"call {state['calls']}: memory_types {batch}")
        if answers != (MemoryType.CUDA, MemoryType.HOST) or region is None or not (
                region.start <= known and known + 128 <= region.start + region.size):
            state["wrong"].append(f"call {state['calls']}: {answers} {region}")
        if state["calls"] % 7 == 0:
            memhook.flush()
            state["flushes"] += 1

    with cases.case("handler queries"):
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 0.005, 0.005)
        rounds = 0
        wrong_main = 0
        try:
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                p, _ = alloc(4096)
                if memhook.memory_type(p) is not MemoryType.CUDA:
                    wrong_main += 1
                free(p)
                if rounds % 3 == 0:
                    memhook.flush()
                rounds += 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
        memhook.flush()
        cases.check(state["calls"] >= 20, f"the handler ran only {state['calls']} times")
        cases.check(not state["wrong"], f"{len(state['wrong'])} wrong answers in the handler, "
                                        f"e.g. {state['wrong'][:3]}")
        cases.check(wrong_main == 0, f"{wrong_main} wrong answers in the main thread")
        cases.check(seen == sorted(seen) and len(set(seen)) == len(seen),
                    "the subscriber's events are out of order or repeated")
        cases.note(f"handler calls {state['calls']} (flushes {state['flushes']}), main rounds "
                   f"{rounds}, events delivered {len(seen)}")
    free(known)
    memhook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
