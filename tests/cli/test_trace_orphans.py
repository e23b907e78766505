"""A traced process that outlives CMD (issue 33, item 2): the trace waits
for it, as ``strace -f`` waits for every descendant; ``--no-wait-orphans``
or a signal to memhook (SIGTERM once, ^C twice) stops the wait, and the summary names what was left
running, with status 70.

Before: the trace ended 1 s after CMD; a child that allocated later was
cut off (10 of 30 events), exit status 0, no warning.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from cli_testing import DEGRADED, memhook, read_jsonl, warnings_of


def _counts(path: Path) -> dict[int, int]:
    out: dict[int, int] = {}
    for e in read_jsonl(path):
        out[e["pid"]] = out.get(e["pid"], 0) + 1
    return out


def _orphans_named(stderr: str) -> list[int]:
    return [int(p) for p in re.findall(r"^warning: pid (\d+) \(.*\) outlived CMD and was still "
                                       r"running when the trace stopped waiting for it",
                                       stderr, re.M)]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_child_that_outlives_cmd_is_waited_for(programs, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--", "sh", "-c",
                   f"{programs.pairs} 5; (sleep 2; {programs.pairs} 10) & exit 0")
    assert proc.returncode == 0, proc.stderr
    assert sorted(_counts(out).values()) == [10, 20], proc.stderr
    assert warnings_of(proc.stderr) == [], proc.stderr
    # Said while it waits, so a trace that seems to hang says why.
    assert re.search(r"^memhook trace: CMD has ended; waiting for the traced processes it left "
                     r"running: pid \d+ \(sh -c .*\(\^C twice, or --no-wait-orphans, stops the "
                     r"wait\)$", proc.stderr, re.M), proc.stderr


def test_no_wait_orphans_names_what_runs_on_and_exits_70(programs, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    t0 = time.monotonic()
    proc = memhook("trace", "--sim", "--no-wait-orphans", "-f", "jsonl", "-o", str(out), "--",
                   "sh", "-c", f"{programs.pairs} 5; (sleep 60; {programs.pairs} 10) "
                               f">/dev/null 2>&1 & exit 0")
    took = time.monotonic() - t0
    left = _orphans_named(proc.stderr)  # (their output is not ours: run() ends)
    _kill(left)
    assert proc.returncode == DEGRADED, proc.stderr
    assert took < 30, took  # not the orphan's 60 s (the grace is 1 s)
    assert len(left) >= 1, proc.stderr  # the subshell (and its sleep)
    assert "--no-wait-orphans" in proc.stderr
    assert sorted(_counts(out).values()) == [10], proc.stderr


def test_a_second_signal_stops_waiting_for_orphans(programs, tmp_path: Path) -> None:
    """The orphan ignores SIGINT and SIGTERM; the tracer's first SIGINT
    (CMD is gone) changes nothing, the second ends the wait."""
    out = tmp_path / "trace.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memhook", "trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
         "sh", "-c", f"{programs.pairs} 5; (trap '' INT TERM; sleep 60; {programs.pairs} 10) "
                     f">/dev/null 2>&1 & echo ready; exit 0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    left: list[int] = []
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].startswith("pairs:") and lines[1] == "ready\n", lines
        time.sleep(1.5)  # CMD has ended; the trace waits for the orphan
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # one signal: still waiting
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
        left = _orphans_named(stderr)
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill(left)
    assert proc.returncode == DEGRADED, stderr
    assert left and "(SIGINT)" in stderr, stderr
    assert sorted(_counts(out).values()) == [10], stderr


def test_sigterm_to_memhook_stops_waiting_for_orphans(programs, tmp_path: Path) -> None:
    """With CMD gone there is nobody to pass SIGTERM on to: it is for the
    trace (a supervisor, `timeout`), which stops waiting at once and writes
    its summary, rather than wait for a daemon until a SIGKILL."""
    out = tmp_path / "trace.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memhook", "trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
         "sh", "-c", f"{programs.pairs} 5; (trap '' INT TERM; sleep 60; {programs.pairs} 10) "
                     f">/dev/null 2>&1 & echo ready; exit 0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    left: list[int] = []
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[1] == "ready\n", lines
        time.sleep(1.5)
        assert proc.poll() is None  # waiting for the orphan
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - t0
        left = _orphans_named(stderr)
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill(left)
    assert proc.returncode == DEGRADED, stderr
    assert took < 25, took  # not the orphan's 60 s
    assert left and "(SIGTERM)" in stderr, stderr
    assert sorted(_counts(out).values()) == [10], stderr
