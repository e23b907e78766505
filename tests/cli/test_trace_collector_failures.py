"""The traced program outlives every failure on the collector's side
(issue 24): an output on a full disk, a name the text output cannot
encode, an exception while reading one area, an exception of the
collector itself.  In each, CMD runs to its end with its own exit status,
every event that could be kept is kept, the summary says what was lost,
and memhook exits DEGRADED (70) when CMD itself succeeded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from cli_testing import DEGRADED, memhook, read_jsonl, warnings_of

from memhook.cli import trace
from memhook.tracing.writers import FORMATS


def test_the_degraded_status_and_the_rule() -> None:
    assert trace.DEGRADED_STATUS == DEGRADED
    assert trace._exit_status(0, degraded=True) == DEGRADED
    assert trace._exit_status(0) == 0
    assert trace._exit_status(5, degraded=True) == 5  # CMD's own failure wins
    assert trace._exit_status(-15, degraded=True) == 128 + 15


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_output_on_a_full_disk(programs, fmt: str) -> None:
    """-o /dev/full: every write fails with ENOSPC (a full disk).  Before:
    a traceback, CMD SIGKILLed before it finished, no summary."""
    proc = memhook("trace", "-f", fmt, "-o", "/dev/full", "--",
                   str(programs.event_storm), "20000", "300")
    assert "event_storm: 20000 events" in proc.stdout, proc.stderr  # CMD ran to its end
    assert proc.returncode == DEGRADED, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "== memhook trace summary: 20000 events from 1 process" in proc.stderr
    failed = [w for w in warnings_of(proc.stderr)
              if w.startswith(f"the {fmt} output to /dev/full failed (No space left on device")]
    assert len(failed) == 1, proc.stderr
    assert f"the {fmt} trace in /dev/full is incomplete" in proc.stderr


def test_cmds_own_failure_wins_over_a_degraded_trace(programs) -> None:
    proc = memhook("trace", "-f", "jsonl", "-o", "/dev/full", "--",
                   "sh", "-c", f"{programs.event_storm} 2000 && exit 5")
    assert proc.returncode == 5, proc.stderr
    assert "No space left on device" in proc.stderr


def test_text_output_of_a_command_line_that_is_not_utf8(programs, tmp_path: Path) -> None:
    """A latin-1 argument (a file name, say) in the text output: written as
    the bytes it is.  Before: UnicodeEncodeError in the writer, rc 1."""
    out = tmp_path / "trace.txt"
    name = os.fsdecode(b"caf\xe9-\xff.dat")  # surrogateescape, as sys.argv holds it
    proc = memhook("trace", "-f", "text", "-o", str(out), "--",
                   "sh", "-c", f"{programs.event_storm} 100", name)
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert b" caf\xe9-\xff.dat\n" in data  # the "process started" line, byte for byte
    assert len(re.findall(rb"\] (alloc|free ) cuMemAlloc_v2|\] (alloc|free ) cuMemFree_v2",
                          data)) == 100
    assert b"== memhook trace summary: 100 events" in data


def _in_process_trace(monkeypatch: pytest.MonkeyPatch, command: list[str],
                      tmp_path: Path) -> tuple[int, list[dict]]:
    out = tmp_path / "trace.jsonl"
    monkeypatch.delenv("MEMHOOK_TRACE_SOCKET", raising=False)
    rc = trace.run_trace(command, fmt="jsonl", output=str(out))
    return rc, read_jsonl(out)


@pytest.mark.parametrize("cmd_status", [0, 4])
def test_a_collector_exception_leaves_cmd_running(programs, monkeypatch: pytest.MonkeyPatch,
                                                  capfd: pytest.CaptureFixture[str],
                                                  tmp_path: Path, cmd_status: int) -> None:
    """The collector itself raises (a bug of ours, stood in for by a
    poll that fails on its 5th turn): memhook stops reading, waits for CMD
    (relaying signals), and CMD finishes.  Before: `finally: child.kill()`
    SIGKILLed it, and the exception came out of run_trace."""
    from memhook.tracing import collector

    real_poll = collector.Collector.poll
    turns = {"n": 0}

    def failing_poll(self: collector.Collector, timeout: float) -> bool:
        turns["n"] += 1
        if turns["n"] == 5:
            raise RuntimeError("a collector bug")
        return real_poll(self, timeout)

    monkeypatch.setattr(collector.Collector, "poll", failing_poll)
    done = tmp_path / "cmd-finished"
    rc, _ = _in_process_trace(monkeypatch, [
        "sh", "-c", f"sleep 1; {programs.event_storm} 1000 >/dev/null; touch {done}; "
                    f"exit {cmd_status}"], tmp_path)
    err = capfd.readouterr().err
    assert done.exists(), err  # CMD ran to its end
    assert rc == (cmd_status or DEGRADED), err
    assert "RuntimeError: a collector bug" in err  # the traceback, on stderr
    assert "warning: the collector failed (its traceback is above)" in err


def test_a_failure_reading_one_area_costs_that_area_alone(
        programs, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    """Reading one process's area raises (stood in for by a _deliver that
    fails for `event_storm 3000`): that area is closed, said, and the other
    process keeps every event."""
    from memhook.tracing import collector

    real = collector.Collector._deliver

    def deliver(self: collector.Collector, image: collector._Image, final: bool) -> int:
        if image.proc.hello is not None and image.proc.hello.argv[1:2] == ["3000"]:
            raise ValueError("a bad batch")
        return real(self, image, final)

    monkeypatch.setattr(collector.Collector, "_deliver", deliver)
    storm = programs.event_storm
    rc, events = _in_process_trace(monkeypatch, [
        "sh", "-c", f"{storm} 3000 200 >/dev/null & {storm} 5000 200 >/dev/null; wait"],
        tmp_path)
    err = capfd.readouterr().err
    assert rc == DEGRADED, err
    by_pid: dict[int, int] = {}
    for e in events:
        by_pid[e["pid"]] = by_pid.get(e["pid"], 0) + 1
    assert sorted(by_pid.values()) == [5000], (by_pid, err)
    failed = [w for w in warnings_of(err) if "ValueError: a bad batch" in w]
    assert len(failed) == 1 and "the rest of its trace area is lost" in failed[0], err
    assert f"({storm} 3000 200)" in failed[0]
