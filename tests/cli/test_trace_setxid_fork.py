"""Programs that change themselves under the trace (issue 24): one that
changes its uid and gid as setpriv does (per-thread capabilities first,
then glibc's all-threads setxid), and a child made by the raw fork system
call, which runs no atfork handler.  Each runs as it does untraced."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_testing import DEGRADED, memhook, read_jsonl, warnings_of

SETPRIV = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
           "sh", "-c", "id -u; id -g; exit 3"]
# A line of the trace's own timeline ("   0.003241 [pid] process started ...").
_TIMELINE = re.compile(r"^\s*\d+\.\d{6} \[\d+(?:/\d+)?\] ")


def _cmd_stdout(stdout: str) -> str:
    """CMD's own output in a trace's stdout, which it shares with the
    trace's timeline and summary.  A timeline line is written once the
    reorder window has passed since its timestamp: after CMD's output where
    CMD ends within the window, between its lines where it does not (a
    loaded box)."""
    cmd = stdout.split("== memhook trace summary")[0]
    return "".join(line for line in cmd.splitlines(keepends=True) if not _TIMELINE.match(line))


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0,
                    reason="needs util-linux setpriv and root (to drop to uid 65534)")
@pytest.mark.parametrize("options", [(), ("--stacks", "--python")], ids=["plain", "frames"])
def test_setpriv_runs_as_it_does_untraced(options: tuple[str, ...]) -> None:
    """Before: SIGABRT, 4 of 4 (glibc aborted setresgid: the trace's
    streamer thread lacked the capabilities setpriv had kept, with
    PR_SET_KEEPCAPS and capset, in its own thread alone)."""
    untraced = subprocess.run(SETPRIV, capture_output=True, text=True, timeout=60, check=False)
    assert (untraced.returncode, untraced.stdout) == (3, "65534\n65534\n"), untraced.stderr
    for _ in range(4):
        proc = memhook("trace", *options, "--", *SETPRIV)
        assert proc.returncode == untraced.returncode, proc.stderr
        assert _cmd_stdout(proc.stdout) == untraced.stdout, proc.stdout
        # What runs as uid 65534 cannot reach the collector (the tracing
        # user's socket): it says so, and runs untraced.
        assert "runs as uid 65534, and only the user who started `memhook trace` may " \
               "connect" in proc.stderr, proc.stderr


@pytest.mark.parametrize("options", [(), ("--stacks", "--python")], ids=["plain", "frames"])
def test_a_raw_fork_child_that_records(programs, tmp_path: Path,
                                       options: tuple[str, ...]) -> None:
    """syscall(SYS_fork): no atfork handler runs in the child.  Before: the
    child wrote into its parent's area, which is not mapped in a child
    (MADV_DONTFORK): SIGSEGV.  Now it finds no area; its events are counted
    lost in the parent's area and said."""
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", *options, "-f", "jsonl", "-o", str(out), "--",
                   str(programs.raw_fork), "5", "10")
    match = re.search(r"raw_fork: parent (\d+) child (\d+) status (\d+)", proc.stdout)
    assert match, (proc.stdout, proc.stderr)
    parent, child, status = (int(x) for x in match.groups())
    assert status == 0, proc.stderr  # the child ended well, not by a signal
    assert proc.returncode == DEGRADED, proc.stderr  # CMD succeeded; 20 events not traced
    events = read_jsonl(out)
    pids = [e["pid"] for e in events]
    assert pids == [parent] * 20, pids  # the parent's 2 x 5 pairs, all of them
    if options:  # (a C program: its ALLOCs have frames, and no Python, and say so)
        allocs = [e for e in events if e["kind"] == "alloc"]
        assert all(e["stack"] and e["python"] == [] and e["python_note"] for e in allocs), \
            allocs
    said = [w for w in warnings_of(proc.stderr) if w.startswith(f"pid {parent}: ")]
    assert said == [f"pid {parent}: 20 events of its children made by a raw fork or clone "
                    f"system call were not traced (no fork handler runs there, so such a "
                    f"child has no trace area of its own)"], proc.stderr
    assert child != parent
