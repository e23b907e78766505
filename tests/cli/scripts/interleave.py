"""Processes whose allocations overlap in time: ``interleave.py N ROUNDS``
starts N children, each allocating and freeing ROUNDS times on two threads
(its main thread and one more).  The rounds go in lockstep: every child
reports each round done and waits for the go of the next, which comes
once every child has done it - so their events interleave round by round
however the scheduler of a loaded box runs them (left to run freely, one
child could finish before the other began)."""

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

    both = threading.Barrier(2)

    def work(main_thread: bool) -> None:
        check(cu.cuCtxSetCurrent(ctx))
        for i in range(rounds):
            check(cu.cuMemFree(check(cu.cuMemAlloc(4096 * (i + 1)))))
            both.wait()
            if main_thread:  # this child's round is done: wait for every child's
                print(i, flush=True)
                sys.stdin.readline()
            both.wait()

    print("ready", flush=True)
    sys.stdin.readline()  # the go: every child starts its rounds at once
    other = threading.Thread(target=work, args=(False,))
    other.start()
    work(True)
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
    for r in range(rounds + 1):  # the go of each round, once all did the last
        if r > 0:
            for k in kids:
                assert k.stdout is not None and k.stdout.readline() == f"{r - 1}\n"
        for k in kids:
            assert k.stdin is not None
            k.stdin.write("go\n")
            k.stdin.flush()
    return max(k.wait() for k in kids)


if __name__ == "__main__":
    sys.exit(main())
