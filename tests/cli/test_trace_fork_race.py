"""A fork child that runs only after its parent has exited is still traced.

``sh -c 'job & exit 0'``: the shell forks and exits at once.  A fork
child says HELLO from its atfork handler, but only once the scheduler
runs it; on a loaded box that can be after the parent (CMD) is gone.
Before: the collector then saw no process and no connection and ended,
and the child was silently not traced (exit status 0, no warning).  Now
the parent's fork() connects for the child, and the collector waits for
that connection until the child says HELLO or ends.

MEMHOOK_TESTING_TRACE_FORK_DELAY_MS holds every fork child in its atfork
handler for that long, before it does anything of the trace: the late
child, made certain.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_testing import memhook, read_jsonl, warnings_of

_LATE = {"MEMHOOK_TESTING_TRACE_FORK_DELAY_MS": "2000"}


def test_a_child_that_runs_after_its_parent_exited_is_traced(programs, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--", "sh", "-c",
                   f"({programs.pairs} 10) & exit 0", env={**os.environ, **_LATE})
    assert proc.returncode == 0, proc.stderr
    assert len(read_jsonl(out)) == 20, proc.stderr  # the subshell's 10 pairs
    assert warnings_of(proc.stderr) == [], proc.stderr


def test_a_late_child_is_waited_for_until_it_is_killed(programs,
                                                          tmp_path: Path) -> None:
    """The trace waits for it; the connection made for it closes with it,
    and the trace ends."""
    out = tmp_path / "trace.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memhook", "trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
         "sh", "-c", f"({programs.pairs} 10) >/dev/null 2>&1 & echo $!; exit 0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "MEMHOOK_TESTING_TRACE_FORK_DELAY_MS": "10000"})
    try:
        assert proc.stdout is not None
        late = int(proc.stdout.readline())
        time.sleep(0.5)
        assert proc.poll() is None  # waiting for the late child
        os.kill(late, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(late, signal.SIGKILL)
    assert proc.returncode == 0, stderr
    assert read_jsonl(out) == [], stderr
