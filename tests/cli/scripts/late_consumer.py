"""A traced Python program with no consumer of its own that makes 70,000
live allocations, waits for the trace to trim what it sent (a process with
no consumer keeps only the newest events: csrc/trace/trace.c), then imports
memhook and asks about every allocation (issue 14, item 4).  Prints how many
answers were wrong and what status() says about coverage.
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
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 70000
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    ptrs = [int(check(cu.cuMemAlloc(256))) for _ in range(count)]
    time.sleep(0.5)  # the trace's streamer reads, sends and trims meanwhile

    import memhook

    wrong = sum(1 for p in ptrs if memhook.memory_type(p) != memhook.MemoryType.CUDA)
    st = memhook.status()
    print(f"late_consumer: {wrong} wrong of {count}; coverage_complete="
          f"{st.coverage_complete}; consumed={st.queue.consumed}")
    for p in ptrs:
        check(cu.cuMemFree(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
