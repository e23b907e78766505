"""fork() while other threads churn install/uninstall, in one process:

    python fork_churn.py MODE DLOPEN_TARGET DL_CHURN_FIXTURE CHURN_LIBRARY

The parent loads the simulated driver (not initialised: a child forked after
cuInit could not use CUDA) and starts three churners: one cycles
memhook.install(MODE) and uninstall() (MODE "all": "bistro", "reloc" and
"bistro,reloc" in turn); one calls the core's install/uninstall directly,
in the same modes (past the Python lock, so the C locks are held at every
moment); and a C thread of DL_CHURN_FIXTURE
dlopens and dlcloses CHURN_LIBRARY (while reloc is in, each dlopen
refreshes under reloc's lock, and the dlclose wrapper holds that lock
across the real call).  The parent keeps CHURN_LIBRARY loaded: glibc 2.36
does not reset its dl_load_write_lock in a fork child, so a child forked
while another thread adds an object to the link map hangs in its own next
dlopen with no memhook frame on the stack - a glibc hazard this test
leaves out.  It forks
CHILDREN times at random moments (at most IN_FLIGHT children at once).  Each child, with no other thread, must
dlopen DLOPEN_TARGET (a library not loaded yet), answer memory_type() for a
host buffer, give status(), install MODE and uninstall - within
CHILD_LIMIT_S seconds, or it is killed and the case names the step it hung
in.  A child inheriting a lock held by a churner hangs at the first step
that takes it.  The churn runs in MODE alone because which modules' locks
a process has taken, and in what order it first took them, is what
decided the order of their fork handlers (issue 23: in mode reloc alone
the parent hung in fork()).
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import sys
import threading
import time

from hkchild import MODES, Cases, load_driver, mode_arg

import memhook
from memhook import MemoryType
from memhook._binding.core import lib

CHILDREN = 20
CHILD_LIMIT_S = 10.0
IN_FLIGHT = 4
ALL_MODES = ("bistro", "reloc", "bistro,reloc")
_MODE_BITS = {"bistro": 1, "reloc": 2, "bistro,reloc": 3}
STEPS = ("dlopen", "memory_type", "status", "install", "uninstall", "done")


def child(mode: str, target: str, wfd: int) -> None:
    """Runs in the forked child; reports each step it reaches on wfd."""
    def step(name: str) -> None:
        os.write(wfd, name.encode() + b"\n")

    code = 1
    try:
        step("dlopen")
        ctypes.CDLL(target)
        step("memory_type")
        buf = ctypes.create_string_buffer(4096)
        got = memhook.memory_type(ctypes.addressof(buf))
        if got is not MemoryType.HOST:
            step(f"problem: memory_type(host buffer) = {got!r}")
        step("status")
        memhook.status()
        step("install")
        report = memhook.install(MODES[mode])
        if not report.mode:
            step(f"problem: install({mode!r}) left mode {report.mode!r}")
        step("uninstall")
        memhook.uninstall()
        if memhook.status().mode:
            step("problem: hooks still installed after uninstall()")
        step("done")
        code = 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        step(f"problem: {type(exc).__name__}: {exc}")
    finally:
        os._exit(code)


def churn_python(modes: tuple[str, ...], stop: threading.Event, counts: dict[str, int]) -> None:
    i = 0
    while not stop.is_set():
        try:
            memhook.install(modes[i % len(modes)])
        except BlockingIOError:
            # EAGAIN: bistro alone refused every entry point because a thread
            # blocked SIGTRAP at that moment - the thread inside fork(),
            # which glibc runs with signals blocked.  install() says so; the
            # next cycle goes on.
            pass
        memhook.uninstall()
        i += 1
    counts["python"] = i


def churn_core(modes: tuple[str, ...], stop: threading.Event, counts: dict[str, int]) -> None:
    i = 0
    while not stop.is_set():
        lib.memhook_hooks_install(_MODE_BITS[modes[i % len(modes)]],
                                  memhook._binding.core.ffi.NULL, 0)
        lib.memhook_hooks_uninstall()
        i += 1
    counts["core"] = i


def wait_child(pid: int, rfd: int, deadline: float) -> tuple[str, list[str], float]:
    """(how it ended, the steps it reported, when it ended); kills it past
    the deadline."""
    status = None
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = -1
        else:
            time.sleep(0.02)
    chunks = []
    while True:
        b = os.read(rfd, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(rfd)
    steps = b"".join(chunks).decode(errors="replace").splitlines()
    if status == -1:
        return f"hung for {CHILD_LIMIT_S:.0f} s", steps, time.monotonic()
    return f"exit status {status}", steps, time.monotonic()


def main() -> int:
    if sys.argv[1] == "all":
        churn_modes, mode = ALL_MODES, "bistro,reloc"
    else:
        mode = mode_arg()
        churn_modes = (MODES[mode],)
    target = sys.argv[2]
    cases = Cases()
    load_driver()
    rng = random.Random(13)
    stop = threading.Event()
    counts: dict[str, int] = {}
    threads = [threading.Thread(target=f, args=(churn_modes, stop, counts), daemon=True)
               for f in (churn_python, churn_core)]
    dl = ctypes.CDLL(sys.argv[3])
    pinned = ctypes.CDLL(sys.argv[4])  # (see the docstring: churn by reference count)
    dl.hk_dl_churn_start.argtypes = (ctypes.c_char_p, ctypes.c_int)
    dl.hk_dl_churn_stop.restype = ctypes.c_long
    with cases.case("forks during churn"):
        for t in threads:
            t.start()
        assert dl.hk_dl_churn_start(sys.argv[4].encode(), 1) == 0
        time.sleep(0.2)
        waiting: list[tuple[int, int, int, float]] = []
        bad, slowest = 0, 0.0

        def reap() -> None:
            nonlocal bad, slowest
            n, pid, rfd, deadline = waiting.pop(0)
            how, steps, ended = wait_child(pid, rfd, deadline)
            slowest = max(slowest, ended - (deadline - CHILD_LIMIT_S))
            problems = [s for s in steps if s.startswith("problem")]
            if steps[-1:] != ["done"] or problems or how != "exit status 0":
                bad += 1
                where = steps[-1] if steps else "before its first step"
                cases.check(False, f"child {n}: {how}; last step {where!r}; {problems}")

        for n in range(CHILDREN):
            if len(waiting) == IN_FLIGHT:  # (20 at once starve each other on 2 cores)
                reap()
            time.sleep(rng.uniform(0.0, 0.05))
            rfd, wfd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(rfd)
                child(mode, target, wfd)
            os.close(wfd)
            waiting.append((n, pid, rfd, time.monotonic() + CHILD_LIMIT_S))
        stop.set()
        counts["dl"] = dl.hk_dl_churn_stop()
        while waiting:
            reap()
        for t in threads:
            t.join(timeout=60)
        cases.note(f"{CHILDREN - bad}/{CHILDREN} children fine, the slowest done "
                   f"{slowest:.2f} s after its fork; churn cycles {counts}")
        cases.check(all(not t.is_alive() for t in threads), "a churner did not stop")
        cases.check(len(counts) == 3 and all(counts.values()),
                    f"a churner never completed a cycle: {counts}")
    memhook.uninstall()
    del pinned
    return 0


if __name__ == "__main__":
    sys.exit(main())
