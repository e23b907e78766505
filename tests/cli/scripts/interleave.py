"""Processes whose allocations overlap in time: ``interleave.py N ROUNDS``
starts N children at once; each allocates and frees ROUNDS times on two
threads (its main thread and one more), pausing 1 ms between rounds, so
their events interleave over ~ROUNDS ms while each child's streamer sends
them in its own batches."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from cuda.bindings import driver as cu


def check(result):
    err, *values = result
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else tuple(values)


def child(rounds: int) -> None:
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))

    def work() -> None:
        check(cu.cuCtxSetCurrent(ctx))
        for i in range(rounds):
            check(cu.cuMemFree(check(cu.cuMemAlloc(4096 * (i + 1)))))
            time.sleep(0.001)

    other = threading.Thread(target=work)
    other.start()
    work()
    other.join()


def main() -> int:
    if sys.argv[1] == "child":
        child(int(sys.argv[2]))
        return 0
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    kids = [subprocess.Popen([sys.executable, __file__, "child", str(rounds)]) for _ in range(n)]
    return max(k.wait() for k in kids)


if __name__ == "__main__":
    sys.exit(main())
