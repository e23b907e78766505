"""Processes whose allocations overlap in time: ``interleave.py N ROUNDS``
starts N children; once every one is ready (its context made), they are let
go together, and each allocates and frees ROUNDS times on two threads (its
main thread and one more), pausing 1 ms between rounds, so their events
interleave over ~ROUNDS ms however long each took to start on a loaded box."""

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

    print("ready", flush=True)
    sys.stdin.readline()  # the go: every child starts its rounds at once
    other = threading.Thread(target=work)
    other.start()
    work()
    other.join()


def main() -> int:
    if sys.argv[1] == "child":
        child(int(sys.argv[2]))
        return 0
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    kids = [subprocess.Popen([sys.executable, __file__, "child", str(rounds)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(n)]
    for k in kids:
        assert k.stdout is not None and k.stdout.readline() == "ready\n"
    for k in kids:
        assert k.stdin is not None
        k.stdin.write("go\n")
        k.stdin.flush()
    return max(k.wait() for k in kids)


if __name__ == "__main__":
    sys.exit(main())
