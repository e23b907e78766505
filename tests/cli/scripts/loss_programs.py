"""Traced programs that end in every way a process can, for
tests/cli/test_trace_loss.py.  ``python loss_programs.py CASE [ARGS]``.

Each allocates and frees through cuda-python on memhook's simulator (the
hooks' path, as a user's program runs it) and prints the pids whose events
the test counts, as ``pids: NAME=PID ...``, before it ends.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import time

_ctx = None


def cuda():
    """cuda-python's driver with a current context (made once per process)."""
    global _ctx
    from cuda.bindings import driver as cu
    if _ctx is None:
        assert cu.cuInit(0)[0] == cu.CUresult.CUDA_SUCCESS
        _, dev = cu.cuDeviceGet(0)
        _, _ctx = cu.cuDevicePrimaryCtxRetain(dev)
    cu.cuCtxSetCurrent(_ctx)
    return cu


def alloc(n: int, size: int = 4096) -> list:
    cu = cuda()
    out = []
    for _ in range(n):
        err, ptr = cu.cuMemAlloc(size)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        out.append(ptr)
    return out


def free(ptrs: list) -> None:
    cu = cuda()
    for p in ptrs:
        assert cu.cuMemFree(p)[0] == cu.CUresult.CUDA_SUCCESS


def say(**pids: int) -> None:
    print("pids: " + " ".join(f"{k}={v}" for k, v in pids.items()), flush=True)


def fork_exit() -> None:
    """Parent and forked child each allocate 5 (the parent frees its 5,
    the child 2); the child ends with os._exit(0).  CUDA is initialised
    after the fork: a child may not use its parent's."""
    kid = os.fork()
    if kid == 0:
        free(alloc(5)[:2])
        os._exit(0)
    free(alloc(5))
    os.waitpid(kid, 0)
    say(parent=os.getpid(), child=kid)


def _task(i: int) -> int:
    free(alloc(3))
    return os.getpid()


def pool(method: str) -> None:
    """multiprocessing.Pool(2), 6 tasks x 3 alloc/free; a worker ends (with
    os._exit) right after its task, as one with maxtasksperchild=1 does."""
    ctx = multiprocessing.get_context(method)
    with ctx.Pool(2, maxtasksperchild=1) as p:
        workers = set(p.map(_task, range(6), chunksize=1))
    say(**{f"w{i}": w for i, w in enumerate(sorted(workers))})


def sigkill() -> None:
    free(alloc(50))
    say(me=os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


def segfault() -> None:
    alloc(20)
    say(me=os.getpid())
    ctypes.string_at(0)


def execv() -> None:
    alloc(7)
    say(me=os.getpid())
    os.execv(sys.executable, [sys.executable, "-c", "pass"])


def tree() -> None:
    """Three levels: the root allocates 1, its child 2, the grandchild 3;
    every level frees what it allocated, the grandchild then os._exit(0)."""
    child = os.fork()
    if child == 0:
        grandchild = os.fork()
        if grandchild == 0:
            free(alloc(3))
            say(grandchild=os.getpid())
            os._exit(0)
        free(alloc(2))
        os.waitpid(grandchild, 0)
        say(child=os.getpid())
        sys.stdout.flush()
        os._exit(0)
    free(alloc(1))
    os.waitpid(child, 0)
    say(root=os.getpid())


def closerange() -> None:
    """10 allocations; then every descriptor but the simulated GPU's (a real
    driver's /dev/nvidia* would be kept too) dup2'd over and closed; 30
    more; then all 40 freed.  The trace must keep nothing open that this
    breaks, now or at the trace's start (a fresh start closes first)."""
    ptrs = alloc(10)
    keep = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if "memhook-sim" in os.readlink(f"/proc/self/fd/{name}"):
                keep.add(int(name))
        except OSError:
            pass
    null = os.open(os.devnull, os.O_RDWR)
    for fd in range(3, 256):
        if fd not in keep and fd != null:
            os.dup2(null, fd)  # whatever was there is gone
    for fd in range(3, 1 << 16):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    ptrs += alloc(30)
    free(ptrs)
    say(me=os.getpid())


def stalled(n_children: str, events: str) -> None:
    """SIGSTOP the collector (our parent, `memhook trace`), then fork
    children that each allocate and free `events` times and exit; the
    collector is resumed only after every child has been reaped.  A trace
    that blocks the program on the collector hangs here (SIGALRM ends it)."""
    signal.alarm(60)
    collector = os.getppid()
    os.kill(collector, signal.SIGSTOP)
    try:
        kids = []
        for _ in range(int(n_children)):
            kid = os.fork()
            if kid == 0:
                free(alloc(int(events)))
                os._exit(0)
            kids.append(kid)
        for kid in kids:
            os.waitpid(kid, 0)
        free(alloc(int(events)))
    finally:
        os.kill(collector, signal.SIGCONT)
    say(parent=os.getpid(), **{f"k{i}": k for i, k in enumerate(kids)})


def flood(events: str) -> None:
    """With the collector stopped, far more events than the trace area
    holds: the rest must be counted, not waited for."""
    signal.alarm(120)
    cuda()
    collector = os.getppid()
    os.kill(collector, signal.SIGSTOP)
    try:
        for _ in range(int(events) // 1000):
            free(alloc(500))
    finally:
        os.kill(collector, signal.SIGCONT)
    say(me=os.getpid())


def threads(count: str) -> None:
    """`count` short-lived threads, one after another, each allocating and
    freeing once: every thread's segment must be given back when it ends,
    or a small trace area runs out of segments.  A pause of 1 s every 100
    threads gives the collector the time to read and give back (on a quiet
    box it does within ~40 ms: 25x)."""
    import threading
    cuda()
    for i in range(int(count)):
        t = threading.Thread(target=lambda: free(alloc(1)))
        t.start()
        t.join()
        if i % 100 == 99:
            time.sleep(1.0)
    say(me=os.getpid())


def live_threads(count: str) -> None:
    """`count` threads live at once, each allocating once, then (all of
    them still live) freeing once: with more threads than the trace area
    has segments, the rest find none - not because the collector is
    behind, but because every segment is some live thread's."""
    import threading
    cuda()
    n = int(count)
    allocated, freed = threading.Barrier(n), threading.Barrier(n)

    def work() -> None:
        ptrs = alloc(1)
        allocated.wait()
        free(ptrs)
        freed.wait()

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    say(me=os.getpid())


if __name__ == "__main__":
    case, *args = sys.argv[1:]
    globals()[case](*args)
