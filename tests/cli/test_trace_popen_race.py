"""A shell started by popen() whose parent exits at once is still traced.

glibc's popen spawns `/bin/sh -c CMD` through its internal posix_spawn:
no interposed name runs, so before trace_popen.c the collector learned of
the shell only when the shell's own core connected.  A parent that exited
first (no pclose) ended the trace without it: the shell's program - its
allocations through the simulator included - was silently not traced
(status 0; the shell said "cannot reach the collector").  Now popen
announces the child it made (EXPECT with a pidfd) before it returns.

MEMHOOK_TESTING_TRACE_LOAD_DELAY_MS holds every traced image that long at
load, before it connects: the late shell, made certain.  Nothing here
waits a fixed time for the child: the trace ends when the collector has
read every process, and the tests read what it wrote.

os.popen and subprocess are not glibc's popen: CPython's fork_exec runs
the exec in a vfork child, which trace_exec.c announces already.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from cli_testing import HERE, memhook, read_jsonl, warnings_of

_LATE = {"MEMHOOK_TESTING_TRACE_LOAD_DELAY_MS": "1500"}
_TIMEOUT = 120  # s: a generous bound for a trace whose images each wait 1.5 s at load


@pytest.fixture(scope="module")
def popen_exit(native, c_test_dir: Path) -> Path:
    return native.compile(HERE / "fixtures" / "popen_exit.c", c_test_dir / "cli_popen_exit",
                          extra=["-lpthread"])


def _trace(tmp_path: Path, *cmd: str) -> tuple[list[dict], str]:
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--", *cmd,
                   env={**os.environ, **_LATE}, timeout=_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert "cannot reach the collector" not in proc.stderr, proc.stderr
    assert warnings_of(proc.stderr) == [], proc.stderr
    return read_jsonl(out), proc.stderr


@pytest.mark.parametrize("form", ["exec", "background"])
def test_a_popen_child_that_outlives_its_parent_is_traced(programs, popen_exit: Path,
                                                          tmp_path: Path, form: str) -> None:
    """The shell runs a program that allocates through the simulated
    runtime, either as itself (exec) or as a child it leaves behind (&)."""
    app = shlex.quote(str(programs.static_app))
    command = f"exec {app}" if form == "exec" else f"{app} &"
    events, stderr = _trace(tmp_path, str(popen_exit), "1", command)
    allocs = [e for e in events if e["kind"] == "alloc"]
    assert len({e["pid"] for e in events}) == 1, stderr  # the app's; the parent made none
    assert 256 * 1024 * 1024 in {e["size"] for e in allocs}, stderr  # static_app's cudaMalloc


def test_popen_children_of_threads_at_once_are_each_traced(programs, popen_exit: Path,
                                                           tmp_path: Path) -> None:
    """Four threads popen at once: each stream's own child is announced,
    whatever order the spawns and the announcements interleave in.  Each
    thread has a cancel pending: glibc's popen has no cancellation point,
    and the announcement's system calls must not add one (the fixture
    fails when a thread got no stream)."""
    events, stderr = _trace(tmp_path, str(popen_exit), "4",
                            f"exec {shlex.quote(str(programs.pairs))} 10", "cancelled")
    pids = {e["pid"] for e in events}
    assert len(pids) == 4, stderr
    assert len(events) == 4 * 20, stderr  # each child's 10 pairs


def test_a_popen_child_of_a_python_program_is_traced(programs, tmp_path: Path) -> None:
    """Python reaching glibc's popen (an extension module, here ctypes).
    A first shell is closed: its status is still pclose's (the child is
    checked with WNOWAIT, never reaped)."""
    code = ("import ctypes, sys; libc = ctypes.CDLL(None); "
            "libc.popen.restype = ctypes.c_void_p; libc.pclose.argtypes = [ctypes.c_void_p]; "
            "status = libc.pclose(libc.popen(b'exit 7', b'r')); "
            "fp = libc.popen(sys.argv[1].encode(), b'w'); "
            "sys.exit(0 if fp and status == 7 << 8 else 1)")
    events, stderr = _trace(tmp_path, sys.executable, "-c", code,
                            f"exec {shlex.quote(str(programs.pairs))} 10")
    assert len(events) == 20, stderr
