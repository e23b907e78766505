"""fork() at any moment of install/uninstall churn (scripts/fork_churn.py):
20 children forked while other threads install and uninstall (through the
Python API and straight through the core) and dlopen/dlclose a library that
links the driver - in each mode alone, and in every mode in turn.  Each
child dlopens a new library, answers memory_type(), gives status(),
installs and uninstalls, within 10 s (a child past that is killed and fails
the test, naming the step it hung in).  Without atfork handling of the
install lock every child hangs in memory_type(); without reloc's, some hang
in dlopen; with install's handlers registered before bistro's (prepare
taking bistro's lock before install's) the parent itself deadlocks in
fork() and the scenario times out - which is what mode reloc alone did
before the handlers were registered in one place at load (issue 23: bistro
registered lazily, at its first remove, after install's)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _target(c_test_dir: Path) -> Path:
    """A library nothing has loaded yet, for the children's dlopen."""
    src = c_test_dir / "fork_churn_target.c"
    out = c_test_dir / "libfork_churn_target.so"
    src.write_text("int hk_fork_churn_target(void) { return 13; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out


@pytest.mark.parametrize("mode", ["bistro", "reloc", "bistro,reloc", "all"])
def test_fork_during_install_churn(scenario, hook_fixtures, c_test_dir: Path, mode: str) -> None:
    churner = c_test_dir / "libhk_dl_churn.so"
    if not churner.exists():
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(FIXTURES / "dl_churn.c"), "-o",
                        str(churner), "-ldl", "-lpthread"], check=True)
    outcome = scenario("fork_churn.py", mode, str(_target(c_test_dir)), str(churner),
                       str(hook_fixtures.stress), timeout=120)
    outcome.check("forks during churn")
    outcome.check_all_clean()


_PY_LOCKS = r"""
import ctypes, os, signal, sys, threading
import memhook
from memhook import MemoryType, cache, hooks
from memhook._binding import driver as _driver
cu = ctypes.CDLL("libcuda.so.1")  # the simulator: memory_type asks it on a miss
allocated = sys.argv[1] == "allocated"
ptr = ctypes.c_uint64()
if allocated:
    memhook.install("bistro,reloc")  # (binds the driver: its lock is not taken again)
    # One allocation the hooks recorded and nobody drained yet: the child's
    # first drain applies it to the process cache, under the cache's lock.
    # (Otherwise the child's memory_type binds the driver, under its lock.)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    assert cu.cuMemAlloc_v2(ctypes.byref(ptr), 4096) == 0
    assert memhook.status().queue.pending > 0

# A thread of the parent holds each lock the library takes in Python while
# the main thread forks; the child has no such thread to release them.
locks = [cache.process_cache()._lock, _driver._driver._lock, hooks._lock]
held, release = threading.Event(), threading.Event()
def holder():
    for lock in locks:
        lock.acquire()
    held.set()
    release.wait()
    for lock in locks:
        lock.release()
t = threading.Thread(target=holder)
t.start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(10)  # the default action ends a hung child
    buf = ctypes.create_string_buffer(64)
    host = memhook.memory_type(ctypes.addressof(buf))
    if allocated:  # (after cuInit the child's driver may not answer for host memory)
        ok = cache.process_cache().memory_type(ptr.value) is MemoryType.CUDA  # the parent's event
    else:
        ok = host is MemoryType.HOST
    memhook.status()
    memhook.install("reloc")
    memhook.uninstall()
    os._exit(0 if ok else 1)
release.set()
t.join()
_, status = os.waitpid(pid, 0)
print("child status", status)
sys.exit(0 if status == 0 else 1)
"""


@pytest.mark.parametrize("state", ["driver-unbound", "allocated"])
def test_child_of_a_fork_while_python_locks_are_held(native, state: str) -> None:
    """The Python locks memory_type/status/install take (the process cache's,
    the driver binding's, the install lock) are made afresh in a fork child:
    a child forked while another thread holds them all does not hang.  Seen
    fail: without the driver binding's reset the child hangs in
    memory_type() in "driver-unbound"; without the cache's, in its drain of
    the parent's allocation in "allocated"."""
    import sys

    env = native.env()
    env.pop("MEMHOOK_CUDA_MODE", None)
    proc = subprocess.run([sys.executable, "-c", _PY_LOCKS, state], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
