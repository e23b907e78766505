"""bistro beside a thread that blocks every signal (issue 32, item 7).

faulthandler.dump_traceback_later() starts a watchdog thread that blocks
every signal (pytest starts one for faulthandler_timeout).  An int3 would
kill such a thread and no probe reaches it, so bistro used to refuse every
entry that starts with a one-byte instruction (every libcuda entry: 55,
push %rbp) and install("bistro") raised BlockingIOError.  Now the jump goes
after the entry's pushes under the spin barrier, and a thread the kernel
shows parked outside every window refuses nothing
(docs/design/live-patching.md).  Each case runs in a child on the
simulator: hooks installed here would stay for every later test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hooks_api_testing import DRIVER_CALLS, DRIVER_NAMES, run_sim_script
from hooks_testing import FIXTURES

SETUP = f"""
import faulthandler
import threading
from memhook import HookMode, EventKind, MemoryType as M
DRIVER = {DRIVER_NAMES!r}
""" + DRIVER_CALLS + f"""
def entry_bytes():
    # looked up before any install (reloc answers lookups made while it is
    # installed with its wrappers)
    d = driver()
    return {{n: ctypes.string_at(ctypes.cast(getattr(d, n), ctypes.c_void_p).value, 24)
             for n in DRIVER}}
def pairs_seen(k):
    # k alloc/free pairs from this thread: exactly their 2k events, in order
    seen = []
    with memhook.subscribe(seen.append):
        ptrs = []
        for i in range(k):
            p = alloc(4096 * (i + 1))
            assert memhook.memory_type(p) is M.CUDA
            free(p)
            ptrs.append(p)
        memhook.flush()
    mine = [(e.kind, e.function, e.address, e.size) for e in seen if e.tid == threading.get_native_id()]
    want = []
    for i, p in enumerate(ptrs):
        want += [(EventKind.ALLOC, "cuMemAlloc_v2", p, 4096 * (i + 1)),
                 (EventKind.FREE, "cuMemFree_v2", p, 4096 * (i + 1))]
    assert mine == want, (mine[:6], want[:6])
"""


def blocked_watchdog_tid() -> str:
    """Script lines: all_blocked_threads() lists the threads that block
    every signal and sit in a system call (so the case tests what it
    says); wait_parked() waits until there is one."""
    return """
    def all_blocked_threads():
        out = []
        for tid in os.listdir("/proc/self/task"):
            status = open(f"/proc/self/task/{tid}/status").read()
            blk = int(status.split("SigBlk:")[1].split()[0], 16)
            parked = not open(f"/proc/self/task/{tid}/syscall").read().startswith("running")
            if blk & (1 << 4) and blk & (1 << 62) and parked:  # SIGTRAP, SIGRTMAX-1
                out.append(int(tid))
        return out
    def wait_parked():
        import time
        for _ in range(1000):
            if all_blocked_threads():
                return
            time.sleep(0.01)
        raise AssertionError("no thread blocks every signal in a system call")
    """


@pytest.mark.parametrize("mode", ["bistro", "bistro,reloc"])
def test_install_beside_faulthandler_watchdog(native, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    """Every driver entry is patched by bistro (the 5-byte jump), events
    flow from the patched entries, and uninstall puts every byte back; three
    cycles, so the reinstall reuses the site's trampolines and stubs."""
    run_sim_script(native, tmp_path, setup=SETUP, body=blocked_watchdog_tid() + f"""
    init()
    faulthandler.dump_traceback_later(3600)
    wait_parked()
    before = entry_bytes()
    for cycle in range(3):
        report = memhook.install({mode!r})
        drv = [h for h in report.hooks if h.api == "driver" and h.kind]
        bad = [(h.name, h.reason) for h in drv
               if not (h.present and h.mechanism & HookMode.BISTRO and h.bistro_jump == 5)]
        assert not bad, bad
        now = entry_bytes()
        assert all(now[n] != before[n] for n in DRIVER), "an entry was not written"
        pairs_seen(20)
        memhook.uninstall()
        assert entry_bytes() == before, "uninstall left bytes behind"
        with memhook.subscribe(lambda e: None):
            free(alloc(4096))   # the driver still works unhooked
    faulthandler.cancel_dump_traceback_later()
    print("ALL OK")
    """)


def test_install_cycles_beside_a_parked_native_thread(native, hook_fixtures,  # type: ignore[no-untyped-def]
                                                      tmp_path: Path) -> None:
    """A native thread that blocks every signal and sits in read(), while two
    native callers hammer cuMemAlloc_v2/cuMemFree_v2: 30 install/uninstall
    cycles of bistro, each covering every driver entry by bistro, and every
    pair this thread makes while installed is seen exactly (no event lost);
    no caller's call goes wrong."""
    run_sim_script(native, tmp_path, setup=SETUP, body=blocked_watchdog_tid() + f"""
    init()
    churn = ctypes.CDLL({str(hook_fixtures.churn)!r})
    churn.hk_churn_stop.restype = ctypes.c_long
    churn.hk_churn_calls.restype = ctypes.c_long
    ok(churn.hk_churn_start(2, 0, 0, 0))
    ok(churn.hk_churn_park(1))
    wait_parked()
    try:
        before = entry_bytes()
        for cycle in range(30):
            report = memhook.install("bistro")
            bad = [(h.name, h.reason) for h in report.hooks
                   if h.api == "driver" and h.kind and not h.mechanism & HookMode.BISTRO]
            assert not bad, (cycle, bad)
            churn.hk_churn_pause(1)   # (a Python subscriber cannot keep up with them)
            memhook.flush()
            pairs_seen(5)
            churn.hk_churn_pause(0)
            memhook.uninstall()
            assert entry_bytes() == before, cycle
        calls = churn.hk_churn_calls()
    finally:
        errors = churn.hk_churn_stop()
    assert errors == 0, errors
    assert calls > 0
    print("ALL OK")
    """)


def test_busy_thread_blocking_every_signal_is_refused_cleanly(native, hook_fixtures,  # type: ignore[no-untyped-def]
                                                               tmp_path: Path) -> None:
    """A thread that blocks every signal and spins is never parked: the
    kernel says "running" for it (on a CPU or preempted alike), so where it
    stands cannot be known and every window with an instruction boundary
    inside is refused naming it - every driver entry of the simulator:
    install("bistro") raises BlockingIOError and writes nothing, bistro,reloc
    is covered by reloc - and nothing crashes; a caller's calls stay right."""
    run_sim_script(native, tmp_path, setup=SETUP, body=f"""
    init()
    churn = ctypes.CDLL({str(hook_fixtures.churn)!r})
    churn.hk_churn_stop.restype = ctypes.c_long
    ok(churn.hk_churn_start(1, 1, 0, 3))
    try:
        before = entry_bytes()
        for cycle in range(5):
            try:
                memhook.install("bistro")
                raise AssertionError("installed beside a thread that may stand in a window")
            except BlockingIOError as e:
                assert "blocks" in str(e) and "is running" in str(e), str(e)
            assert memhook.status().mode == HookMode.NONE
            assert entry_bytes() == before, "a refused install wrote bytes"
        report = memhook.install("bistro,reloc")
        drv = [h for h in report.hooks if h.api == "driver" and h.kind]
        assert all(h.mechanism == HookMode.RELOC for h in drv), drv
        assert all("is running" in h.reason for h in drv), drv[0].reason
        churn.hk_churn_pause(1)   # (a Python subscriber cannot keep up with it)
        memhook.flush()
        pairs_seen(3)
        churn.hk_churn_pause(0)
        memhook.uninstall()
        assert entry_bytes() == before
    finally:
        errors = churn.hk_churn_stop()
    assert errors == 0, errors
    print("ALL OK")
    """)


def test_far_jump_beside_faulthandler_watchdog_is_refused_cleanly(native, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """MEMHOOK_BISTRO_FAR_JUMP=1 beside the watchdog: the 12-byte form
    cannot step over the entry's push (its window would need a wider
    trampoline than the site keeps), so every push-first entry is refused
    with that reason - bistro raises BlockingIOError and writes nothing,
    bistro,reloc covers everything by reloc - and nothing crashes."""
    run_sim_script(native, tmp_path, setup=SETUP, env=native.env(MEMHOOK_BISTRO_FAR_JUMP="1"),
                   body=blocked_watchdog_tid() + """
    init()
    faulthandler.dump_traceback_later(3600)
    wait_parked()
    before = entry_bytes()
    try:
        memhook.install("bistro")
        raise AssertionError("the far form was installed beside the watchdog")
    except BlockingIOError as e:
        assert "blocks SIGTRAP" in str(e) and "one byte long" in str(e), str(e)
    assert entry_bytes() == before
    report = memhook.install("bistro,reloc")
    drv = [h for h in report.hooks if h.api == "driver" and h.kind]  # (kind 0: pointer attributes, off)
    assert all(h.installed for h in drv), [h for h in drv if not h.installed]
    assert all("one byte long" in h.reason for h in drv if not h.mechanism & HookMode.BISTRO)
    pairs_seen(5)
    memhook.uninstall()
    assert entry_bytes() == before
    faulthandler.cancel_dump_traceback_later()
    print("ALL OK")
    """)


def test_far_jump_beside_a_thread_not_yet_run(native, c_test_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """A thread just created and not yet given a CPU blocks every signal
    (glibc restores its mask in its first instructions) and is "running":
    bistro waits until it has run, however long the run queue keeps it
    (tests/hooks/fixtures/starved_newborn.c makes that wait with a
    real-time spinner on the thread's CPU), and installs.  Before: after a
    fixed 10 ms bistro called it deaf and refused every window with a
    boundary inside - with the 12-byte jump every driver entry, EAGAIN;
    the IPC child of test_behaviour_driver[bistro-far-*] met it beside CPU
    hogs, right after numpy's import had started OpenBLAS's thread."""
    core = native.core.parent
    exe = native.compile(FIXTURES / "starved_newborn.c", c_test_dir / "starved_newborn",
                         extra=[f"-L{core}", "-lmemhook", f"-Wl,-rpath,{core}", "-ldl",
                                "-lpthread"])
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                          env=native.env(MEMHOOK_BISTRO_FAR_JUMP="1"), check=False)
    if proc.returncode == 77:
        pytest.skip(proc.stdout.strip())
    assert "newborn: state R, blocks every signal: yes" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 0 and "install: rc 0 " in proc.stdout, proc.stdout + proc.stderr
