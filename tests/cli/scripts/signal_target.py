"""A traced Python program that waits for a signal and shows what it saw.

``signal_target.py HOW BEFORE AFTER``: allocates and frees BEFORE buffers,
prints "ready", then waits (at most 30 s, then exits 3: the signal never
came).  HOW says what happens when the signal comes:

* ``handle``: KeyboardInterrupt (SIGINT) or, for SIGTERM/SIGHUP/SIGQUIT, a
  handler installed here; it allocates and frees AFTER buffers, prints
  "handled <name>" and exits 0;
* ``reraise``: like handle, then lets KeyboardInterrupt end the program
  (Python then dies of SIGINT: status 130 to a shell);
* ``default``: no handler: the signal's default action ends it;
* ``ignore``: SIGTERM and SIGINT ignored (SIG_IGN): it waits on, then
  exits 3.
"""

from __future__ import annotations

import signal
import sys
import time

from cuda.bindings import driver as cu


def check(result):
    err, *values = result
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else tuple(values)


def churn(n: int) -> None:
    for i in range(n):
        check(cu.cuMemFree(check(cu.cuMemAlloc(4096 * (i + 1)))))


class Caught(Exception):
    pass


def main() -> int:
    how, before, after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    if how == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    elif how != "default":
        def raise_caught(signum, _frame):
            raise Caught(signal.Signals(signum).name)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, raise_caught)
    churn(before)
    # The trace's streamer sends every 10 ms: let it, so a default action
    # that kills us below loses nothing the trace could have had.
    time.sleep(0.2)
    try:  # the signal may come as soon as "ready" is out: inside print
        print("ready", flush=True)
        time.sleep(30)
    except KeyboardInterrupt:
        name = "SIGINT"
    except Caught as exc:
        name = str(exc)
    else:
        print("no signal came", flush=True)
        return 3
    churn(after)
    print(f"handled {name}", flush=True)
    if how == "reraise":
        time.sleep(0.2)  # as above: the events of the handler go out first
        raise KeyboardInterrupt
    return 0


if __name__ == "__main__":
    sys.exit(main())
