"""fork() with hooks installed and events pending, in one mode:

    python fork.py MODE STRESS_FIXTURE

The parent installs the hooks and loads the driver without initialising it
(a child forked after cuInit could not use CUDA, on the simulator as on the
real driver).  It leaves events pending: K failed cuMemAlloc_v2 calls of its
own (NOT_INITIALIZED - real hooked calls), and C threads calling
cuMemAlloc_v2 in a loop while it forks, so the fork may catch a producer
between claiming a queue slot and publishing it.

The child: its queue drains (no stall on a slot nobody will publish) and
yields the parent's K events first, in order, then only spinner events;
its hooks are still installed; after cuInit its own allocations give events
with its pid and tid, and memory_type() sees them (CUDA while allocated,
HOST after the free).

The parent: after the child is done and the spinners stopped, it drains
exactly K + (the spinners' call count) events, each once, in order.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading

from hkchild import (
    MODES,
    Cases,
    MiB,
    Recorder,
    alloc_free_v2,
    byref,
    c_uint64,
    check_install,
    fmt_all,
    install,
    load_driver,
    mode_arg,
    primary_context,
    run_api_rounds,
)

import memhook
from memhook import EventKind
from memhook import MemoryType as MT

K = 100
NOT_INITIALIZED = 3


def main() -> int:
    mode = mode_arg()
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    rec = Recorder()
    cu = load_driver()
    spin = ctypes.CDLL(sys.argv[2])
    spin.hk_spin_calls.restype = spin.hk_spin_stop.restype = ctypes.c_long
    parent = os.getpid()

    for _ in range(K):
        assert cu.cuMemAlloc_v2(byref(c_uint64()), 4096) == NOT_INITIALIZED
    pending_before = memhook.status().queue.pending
    spin.hk_spin_start.argtypes = (ctypes.c_int, ctypes.c_long)
    assert spin.hk_spin_start(4, 10000) == 0
    while spin.hk_spin_calls() < 2000:  # the spinners are well under way
        pass
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid != 0:
        spun = spin.hk_spin_stop()  # (the child has no spinner threads)
    else:
        os.close(rfd)
        code = 1
        try:
            out = child(mode, cu, rec, parent)
            os.write(wfd, json.dumps(out).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    chunks = []
    while True:
        chunk = os.read(rfd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)

    with cases.case("child"):
        cases.check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
                    f"the child ended with status {status:#x}")
        if chunks:
            for problem in json.loads(b"".join(chunks))["problems"]:
                cases.check(False, "child: " + problem)
    with cases.case("parent after fork"):
        cases.check(pending_before >= K, f"only {pending_before} events pending before fork")
        evs = rec.take()
        odd = [e for e in evs if not (e.function == "cuMemAlloc_v2" and e.address == 0
                                      and e.result == NOT_INITIALIZED and e.pid == parent
                                      and e.kind == EventKind.ALLOC)]
        cases.check(not odd, f"unexpected events in the parent: {fmt_all(odd[:5])}")
        cases.check(len(evs) == K + spun, f"the parent drained {len(evs)} events, "
                                          f"want {K} + {spun} spinner calls")
        seqs = [e.seq for e in evs]
        cases.check(seqs == sorted(set(seqs)), "the parent's events are not each once, in order")
        main_tid = threading.get_native_id()
        cases.check(all(e.tid == main_tid for e in evs[:K]),
                    "the first K events are not the main thread's")
        cases.note(f"spinner calls {spun}, events before fork {pending_before}")
    return 0


def child(mode: str, cu, rec: Recorder, parent: int) -> dict:
    problems: list[str] = []

    def check(cond, msg):
        if not cond:
            problems.append(msg)

    me = os.getpid()
    evs = rec.take()  # must return: slots the vanished spinners claimed are skipped
    check(len(evs) >= K, f"the child drained {len(evs)} inherited events, want >= {K}")
    head, rest = evs[:K], evs[K:]
    check(all(e.pid == parent and e.result == NOT_INITIALIZED and e.function == "cuMemAlloc_v2"
              for e in head), f"the inherited head is not the parent's K calls: "
                              f"{fmt_all(head[:3])}")
    check(all(e.pid == parent and e.result == NOT_INITIALIZED for e in rest),
          f"inherited events that are not the spinners': {fmt_all(rest[:3])}")
    seqs = [e.seq for e in evs]
    check(seqs == sorted(set(seqs)), "the inherited events are not each once, in order")
    q = memhook.status().queue
    check(q.pending == 0, f"{q.pending} events still pending in the child after draining")
    report = memhook.status()
    check(report.mode == memhook.HookMode.parse(MODES[mode]),
          f"the child's mode is {report.mode!r}")
    check(all(h.installed for h in report.hooks if h.present and h.api == "driver" and h.kind),
          "the child lost hooks: " + ", ".join(h.name for h in report.hooks
                                              if h.present and h.kind and not h.installed))

    class Collect:  # the child's own checks, in hkchild's Cases shape
        def __init__(self) -> None:
            self.problems: list[str] = []

        def check(self, cond, msg):
            if not cond:
                self.problems.append(msg)
            return bool(cond)

    collect = Collect()
    primary_context(cu)

    alloc_v2, free_v2 = alloc_free_v2(cu)

    rec.take()
    run_api_rounds(collect, rec, alloc=alloc_v2, free=free_v2, alloc_name="cuMemAlloc_v2",
                   free_name="cuMemFree_v2", ev_type=MT.CUDA, query_type=MT.CUDA, device=0,
                   sizes=(64, MiB))
    problems += collect.problems
    check(os.getpid() == me, "pid changed")
    return {"problems": problems}


if __name__ == "__main__":
    sys.exit(main())
