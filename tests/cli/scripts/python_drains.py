"""A traced Python program that imports memhook and drains the queue itself.

memhook binds the core `memhook trace` preloaded, so Python drains the same
queue the trace reads.  Neither may take events from the other: the trace
(through its own copy, the trace area) gets each event once, and Python's cache
and subscribers get every event too - also one made before memhook was
imported, while the trace alone was reading.  Prints what Python saw.
"""

from __future__ import annotations

import sys
import time

from cuda.bindings import driver as cu


def check(result):
    err, *values = result
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else tuple(values)


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    early = check(cu.cuMemAlloc(1 << 20))
    time.sleep(0.1)  # the trace's streamer reads (and sends) it meanwhile

    import memhook

    assert memhook.memory_type(int(early)) == memhook.MemoryType.CUDA, "early allocation lost"
    seen = []
    sub = memhook.subscribe(seen.append)
    t0 = time.monotonic_ns()
    for i in range(rounds):
        ptr = check(cu.cuMemAlloc(4096 * (i + 1)))
        # The cache drains before answering: Python takes this event out.
        assert memhook.memory_type(int(ptr)) == memhook.MemoryType.CUDA
        check(cu.cuMemFree(ptr))
        if i % 7 == 0:
            time.sleep(0.02)  # and sometimes the streamer reads first
    memhook.flush()
    t1 = time.monotonic_ns()
    sub.close()
    # Whoever read an event first (the streamer's tee or this drain), Python
    # gets CLOCK_MONOTONIC ns, never a raw TSC stamp or the core's own flag.
    bad = [e for e in seen if not t0 <= e.timestamp_ns <= t1 or e.flags & 0x80000000]
    assert not bad, f"{len(bad)} events with a bad timestamp, e.g. {bad[0]}"
    check(cu.cuMemFree(early))
    allocs = sum(1 for e in seen if e.kind == memhook.EventKind.ALLOC)
    frees = sum(1 for e in seen if e.kind == memhook.EventKind.FREE)
    print(f"python_drains: subscriber saw {allocs} allocs {frees} frees")
    return 0


if __name__ == "__main__":
    sys.exit(main())
