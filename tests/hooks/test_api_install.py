"""install / uninstall / status, end to end on the simulator, each in a
child process (hooks installed in the pytest process would stay for every
later test)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hooks_api_testing import (DRIVER_API_NAMES, DRIVER_CALLS, RUNTIME_NAMES, TABLE,
                               run_sim_script)

import memhook
from memhook import HookInfo, HookMode, HookReport

SETUP = f"""
from memhook import HookMode, EventKind, MemoryType as M
TABLE = {TABLE!r}
DRIVER = {DRIVER_API_NAMES!r}
RUNTIME = {RUNTIME_NAMES!r}
""" + DRIVER_CALLS


def test_status_in_this_process_lists_the_table_uninstalled() -> None:
    """(Read-only: safe in the pytest process.)"""
    report = memhook.status()
    assert isinstance(report, HookReport) and report.mode is HookMode.NONE
    assert report.coverage_complete is False
    assert [h.name for h in report.hooks] == list(TABLE)
    assert [h.index for h in report.hooks] == list(range(len(TABLE)))
    for h in report.hooks:
        assert isinstance(h, HookInfo)
        assert h.api == ("driver" if h.name in DRIVER_API_NAMES else "runtime")
        assert h.mechanism is HookMode.NONE and not h.installed and h.reason
        if h.name.startswith(("cuPointer", "cudaPointer")):
            assert h.kind is memhook.EventKind(0), h  # answers, records nothing
            continue
        assert h.kind is (memhook.EventKind.FREE if any(
            w in h.name for w in ("Free", "Unmap", "Close", "Unregister", "Reset", "Release",
                                  "Destroy")) else memhook.EventKind.ALLOC)
    assert report.hook("cudaMalloc").api == "runtime"
    with pytest.raises(KeyError, match="cuNothing"):
        report.hook("cuNothing")
    assert memhook.hooks.hook_index("cuMemFree_v2") == TABLE.index("cuMemFree_v2")
    assert memhook.hooks.hook_index("cuNothing") is None
    assert report.queue.produced >= report.queue.consumed and report.queue.segment_bytes > 0


@pytest.mark.parametrize("mode", ["bistro", "reloc", "bistro,reloc", "bistro,reloc far"])
def test_install_status_and_events_in_each_mode(native, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    env = native.env(MEMHOOK_BISTRO_FAR_JUMP="1") if mode.endswith(" far") else None
    mode = mode.replace(" far", "")
    run_sim_script(native, tmp_path, setup=SETUP, body=f"""
        init()
        mode = HookMode.parse({mode!r})
        far = os.environ.get("MEMHOOK_BISTRO_FAR_JUMP") == "1"
        before = memhook.status()
        assert before.mode == HookMode.NONE
        assert [h.name for h in before.hooks] == list(TABLE)

        report = memhook.install({mode!r})
        assert report.mode == mode and memhook.status().mode == mode, report.mode
        assert [h.name for h in report.hooks] == list(TABLE)
        for h in report.hooks:
            assert h.api == ("driver" if h.name in DRIVER else "runtime"), h
            assert h.mechanism & ~mode == 0, h          # only what was asked for
            assert h.installed == bool(h.mechanism), h
            if not h.installed:
                assert h.reason, h                       # why not
            if h.mechanism & HookMode.BISTRO:
                assert h.bistro_jump == (12 if far else 5), h
            else:
                assert h.bistro_jump == 0, h
        # The simulated driver exports every driver function: all covered
        # (by bistro too, save where the 12-byte jump does not fit); the
        # pointer-attribute calls (kind 0) only with pointer_attributes=True.
        drv = [h for h in report.hooks if h.api == "driver" and h.kind]
        assert all(h.present and h.installed for h in drv), [h for h in drv if not h.installed]
        if mode & HookMode.BISTRO:
            refused = [h for h in drv if not h.mechanism & HookMode.BISTRO]
            assert far or not refused, refused
            assert all(h.name in h.reason and "bistro" in h.reason for h in refused), refused
        if mode == HookMode.BISTRO:  # runtime entry points are reloc's
            rt = [h for h in report.hooks if h.api == "runtime" and h.kind]
            assert not any(h.installed for h in rt) and all("reloc" in h.reason for h in rt), rt

        # Idempotent: the same mode again changes nothing.
        again = memhook.install(mode)
        assert [(h.name, h.mechanism, h.bistro_jump) for h in again.hooks] == \\
            [(h.name, h.mechanism, h.bistro_jump) for h in report.hooks]

        # One event per call, into the cache and to subscribers.
        seen = []
        sub = memhook.subscribe(seen.append)
        p = alloc(1 << 20)
        assert memhook.memory_type(p + 4096) is M.CUDA
        assert memhook.lookup(p) == memhook.Region(p, 1 << 20, M.CUDA, 0)
        free(p)
        assert memhook.memory_type(p + 4096) is not M.CUDA
        assert memhook.flush() == 0
        assert [(e.kind, e.function, e.address, e.size, e.mem_type, e.device, e.result, e.pid)
                for e in seen] == [
            (EventKind.ALLOC, "cuMemAlloc_v2", p, 1 << 20, M.CUDA, 0, 0, os.getpid()),
            (EventKind.FREE, "cuMemFree_v2", p, 1 << 20, M.CUDA, 0, 0, os.getpid())], seen

        # A failed allocation: an event with the error, no cache entry.
        q = ctypes.c_ulonglong()
        rc = cu.cuMemAlloc_v2(ctypes.byref(q), ctypes.c_size_t(1 << 50))
        assert rc != 0
        memhook.flush()
        assert seen[-1].kind is EventKind.ALLOC and seen[-1].result == rc, seen[-1]
        assert seen[-1].address == 0 and seen[-1].size == 1 << 50
        sub.close()

        # uninstall: nothing hooked, nothing recorded.
        memhook.uninstall()
        after = memhook.status()
        assert after.mode == HookMode.NONE and not any(h.installed for h in after.hooks)
        assert after.coverage_complete is False
        from memhook._binding.core import lib
        assert lib.memhook_reloc_patched_slots() == 0
        n = len(seen)
        with memhook.subscribe(seen.append):
            free(alloc(4096))
            assert memhook.flush() == 0
        assert len(seen) == n
        memhook.uninstall()  # idempotent
        print("ALL OK")
        """, env=env)


def test_switching_modes_and_the_environment(native, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run_sim_script(native, tmp_path, setup=SETUP, body="""
        init()
        B, R = HookMode.BISTRO, HookMode.RELOC
        assert memhook.install().mode == R          # MEMHOOK_CUDA_MODE=reloc
        seen = []
        memhook.subscribe(seen.append)
        for mode in (B, B | R, R, "3", 1, "none", "reloc , bistro"):
            report = memhook.install(mode)
            want = HookMode.parse(mode)
            assert report.mode == want and memhook.status().mode == want, (mode, report.mode)
            assert any(h.installed for h in report.hooks) == bool(want)
            n = len(seen)
            p = alloc(64)
            free(p)
            memhook.flush()
            assert len(seen) - n == (2 if want else 0), (mode, seen[n:])
        os.environ["MEMHOOK_CUDA_MODE"] = "none"
        assert memhook.install().mode == HookMode.NONE
        del os.environ["MEMHOOK_CUDA_MODE"]
        assert memhook.install().mode == B | R      # unset: the default
        print("ALL OK")
        """, env=native.env(MEMHOOK_CUDA_MODE="reloc"))


def test_fork_child_sees_its_own_allocations(native, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The child keeps the hooks and what the parent's cache knew; its drain
    lock is its own (fork waits for a drain under way in another thread),
    its events carry its pid, and its cache learns its allocations.  (CUDA
    does not survive fork: the parent leaves it uninitialised, the child
    initialises it.)"""
    run_sim_script(native, tmp_path, setup=SETUP, body="""
        import threading
        from memhook._events import drain as _drain
        from memhook._binding.core import lib
        memhook.install()
        seen = []
        memhook.subscribe(seen.append)
        known = 0x7D00_0000_0000
        lib.memhook_events_record(1, lib.memhook_hook_index(b"cudaMalloc"), known, 4096, 1, 0, 0)
        stop = threading.Event()
        def spin():  # another thread drains while we fork
            while not stop.is_set():
                memhook.flush()
                lib.memhook_events_record(1, -1, 0, 0, 1, 0, 0)
        t = threading.Thread(target=spin)
        t.start()
        try:
            for _ in range(10):
                pid = os.fork()
                if pid == 0:
                    try:
                        stop.set()
                        assert _drain._lock.acquire(blocking=False)  # nobody holds it
                        _drain._lock.release()
                        assert memhook.memory_type(known) is M.CUDA    # inherited
                        init()
                        n = len(seen)
                        p = alloc(1 << 16)
                        assert memhook.memory_type(p) is M.CUDA
                        free(p)
                        assert memhook.memory_type(p) is not M.CUDA
                        memhook.flush()  # (a query hands subscribers what it can in 5 ms)
                        mine = [e for e in seen[n:] if e.function != "function#-1"]
                        assert [(e.kind, e.address, e.pid) for e in mine] == [
                            (EventKind.ALLOC, p, os.getpid()),
                            (EventKind.FREE, p, os.getpid())], mine
                        assert memhook.status().mode == HookMode.BISTRO | HookMode.RELOC
                    except BaseException:
                        import traceback
                        traceback.print_exc()
                        os._exit(1)
                    os._exit(0)
                _, status = os.waitpid(pid, 0)
                assert status == 0, status
        finally:
            stop.set()
            t.join()
        assert memhook.memory_type(known) is M.CUDA
        print("ALL OK")
        """)
