"""The queue's own words never reach Python:

    python private_flags.py MODE

Inside the core an event carries the drain's private flag bits 16-31
(links, marker epochs, the raw-TSC and coarse-time flags: csrc/queue/queue.h)
and, in ``seq``, a link to another event until the drain numbers it.  Every
event Python gets - the rows Python's drain takes out of the core (the
core's cache applied them as it handed them out; this script once watched
a Python cache's bulk apply and a query's look at unapplied rows, both gone
with the Python process cache), the Event objects of a plain and of a
precise-time subscriber - must carry only public
``MEMHOOK_EVENT_*`` flags and the drain's own numbering.  The history has
what sets each private bit: frees by another thread than the allocating one
(the live table's link), the same address reused (the address chain), a
context reset (a marker and its epoch), precise time switched on (raw TSC
stamps) and off (coarse ones), a native recorder's events.
"""

from __future__ import annotations

import sys
import threading

from hkchild import Cases, Recorder, byref, c_int, c_uint64, c_void_p, load_driver, mode_arg, ok

import memhook
from memhook._events import drain as _drain
from memhook._binding.core import lib
from memhook.hooks import hook_index

PRIVATE = 0xFFFF0000
PUBLIC = int(lib.MEMHOOK_EVENT_SKIPPED | lib.MEMHOOK_EVENT_SIZE_UNKNOWN |
             lib.MEMHOOK_EVENT_DRIVER_UNLOADED | lib.MEMHOOK_EVENT_CONTEXT_RESET)


def main() -> int:
    mode = mode_arg()
    cases = Cases()
    cu = load_driver()
    memhook.install({"bistro-far": "bistro"}.get(mode, mode))
    ok(cu.cuInit(0), "cuInit")
    dev = c_int()
    ok(cu.cuDeviceGet(byref(dev), 0), "cuDeviceGet")
    ctx = c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    # Every row Python's drain takes out, as the core handed it out.
    seen_flags: list[int] = []
    applied_seqs: list[int] = []
    take_part = _drain._apply_part

    def watch_take(rows, end, marks):  # type: ignore[no-untyped-def]
        part = rows[marks[0]:end]
        seen_flags.extend(int(f) for f in part["flags"])
        applied_seqs.extend(int(s) for s in part["seq"])
        return take_part(rows, end, marks)

    _drain._apply_part = watch_take  # type: ignore[assignment]
    plain = Recorder()
    precise: list[memhook.Event] = []
    precise_sub = memhook.subscribe(precise.append, precise_time=True)

    handed: list[int] = []  # pointers allocated by one thread, freed by another
    lock = threading.Lock()

    def allocator() -> None:
        for _ in range(400):
            p = c_uint64()
            ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            ok(cu.cuMemAlloc_v2(byref(p), 4096), "cuMemAlloc_v2")
            with lock:
                handed.append(p.value)

    def freer() -> None:
        ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        while True:
            with lock:
                p = handed.pop() if handed else None
            if p is None:
                if not any(t.is_alive() for t in workers[:2]):
                    with lock:
                        if not handed:
                            return
                memhook.memory_type(0x1000)  # a query between (it may take events out)
                continue
            ok(cu.cuMemFree_v2(p), "cuMemFree_v2")

    with cases.case("a history that sets every private bit"):
        workers = [threading.Thread(target=allocator) for _ in range(2)]
        workers.append(threading.Thread(target=freer))
        for t in workers:
            t.start()
        # The native recorder's path (the address chain links its FREE).
        for _ in range(50):
            ok(lib.memhook_events_record(lib.MEMHOOK_EVENT_ALLOC, hook_index("cudaMalloc"),
                                         0x7E0000000000, 4096, lib.MEMHOOK_MEM_CUDA, 0, 0),
               "memhook_events_record")
            ok(lib.memhook_events_record(lib.MEMHOOK_EVENT_FREE, hook_index("cudaFree"),
                                         0x7E0000000000, 4096, lib.MEMHOOK_MEM_CUDA, 0, 0),
               "memhook_events_record")
        for t in workers:
            t.join()
        memhook.flush()  # (a closed subscription is handed nothing more)
        precise_sub.close()  # coarse time again from here
        p = c_uint64()
        ok(cu.cuMemAlloc_v2(byref(p), 1 << 20), "cuMemAlloc_v2")
        ok(cu.cuDevicePrimaryCtxReset(dev), "cuDevicePrimaryCtxReset")  # a marker
        ok(cu.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        ok(cu.cuMemAlloc_v2(byref(p), 1 << 20), "cuMemAlloc_v2")
        ok(cu.cuMemFree_v2(p), "cuMemFree_v2")
        events = plain.take()

    with cases.case("the rows the cache gets carry public flags only"):
        cases.check(len(seen_flags) >= 2 * 800 + 100, f"only {len(seen_flags)} rows seen")
        bad = sorted({f for f in seen_flags if f & ~PUBLIC})
        cases.check(not bad, f"rows with private flags: {[hex(f) for f in bad[:8]]}")
        cases.check(applied_seqs == sorted(set(applied_seqs)),
                    "the applied rows' seqs are not the drain's increasing numbers")

    with cases.case("subscribers get public flags and the drain's seqs"):
        resets = [e for e in events if e.context_reset]
        cases.check(len(resets) == 1, f"context reset markers: {len(resets)}")
        for name, evs in (("plain", events), ("precise", precise)):
            cases.check(len(evs) >= 800, f"{name}: only {len(evs)} events")
            bad = sorted({e.flags for e in evs if e.flags & PRIVATE})
            cases.check(not bad, f"{name}: events with private flags: {[hex(f) for f in bad]}")
            seqs = [e.seq for e in evs]
            cases.check(seqs == sorted(set(seqs)), f"{name}: seqs not increasing")
        # A link would be an identity: lane id << 48 | index - far above the
        # drain's numbering of this short history.
        cases.check(all(e.seq < 1 << 40 for e in events), "an event kept its link as its seq")
        # A raw TSC reading (its flag cleared but the value not converted)
        # is no CLOCK_MONOTONIC time of this run: seconds to years away.
        last = events[-1].timestamp_ns
        far = [e.timestamp_ns for e in precise + events if abs(e.timestamp_ns - last) > 600e9]
        cases.check(not far, f"timestamps that are no CLOCK_MONOTONIC time: {far[:4]}")
    _drain._apply_part = take_part  # type: ignore[assignment]
    memhook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
