"""Events of all processes come out in timestamp order (the reorder window,
memhook/tracing/reorder.py), and the text format names each event's pid and tid.

scripts/interleave.py runs two children at once, each allocating on two
threads, their rounds in lockstep (so they interleave on a loaded box too);
each child's streamer sends its own batches, so in arrival order one
child's batch comes after newer events of the other.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from cli_testing import HERE, memhook, read_jsonl

ROUNDS = 100
SCRIPT = HERE / "scripts" / "interleave.py"
EVENT = re.compile(r"^ +(\d+)\.(\d{6}) \[(\d+)/(\d+)\] (alloc|free ) ")
MARK = re.compile(r"^ +(\d+)\.(\d{6}) \[(\d+)\] process (\w+)")


def _run(tmp_path: Path, fmt: str) -> tuple[Path, str]:
    out = tmp_path / f"trace.{fmt}"
    proc = memhook("trace", "--sim", "-f", fmt, "-o", str(out), "--",
                   sys.executable, str(SCRIPT), "2", str(ROUNDS))
    assert proc.returncode == 0, proc.stderr
    return out, proc.stderr


def _switches(pids: list[int]) -> int:
    return sum(1 for a, b in zip(pids, pids[1:]) if a != b)


def test_text_lines_in_time_order_with_pid_and_tid(tmp_path: Path) -> None:
    out, stderr = _run(tmp_path, "text")
    lines = out.read_text().splitlines()
    events = [(int(m[1]) * 1_000_000 + int(m[2]), int(m[3]), int(m[4]), i)
              for i, ln in enumerate(lines) if (m := EVENT.match(ln))]
    assert len(events) == 2 * 2 * 2 * ROUNDS, lines
    times = [e[0] for e in events]
    assert times == sorted(times)
    pids = [e[1] for e in events]
    children = set(pids)
    assert len(children) == 2
    # The children really overlapped: else order proves nothing.
    assert _switches(pids) >= 20, _switches(pids)
    for pid in children:
        tids = {e[2] for e in events if e[1] == pid}
        assert len(tids) == 2 and pid in tids, (pid, tids)
        # Each process's "started" line comes before its events, "exited" after.
        marks = {m[4]: i for i, ln in enumerate(lines) if (m := MARK.match(ln)) and
                 int(m[3]) == pid}
        mine = [e[3] for e in events if e[1] == pid]
        assert marks["started"] < mine[0] and mine[-1] < marks["exited"], marks
    # ... and the whole file, marks included, reads forward in time.
    stamps = [int(m[1]) * 1_000_000 + int(m[2]) for ln in lines
              if (m := EVENT.match(ln) or MARK.match(ln))]
    assert stamps == sorted(stamps)
    assert "written after newer events" not in stderr  # none came too late


def test_jsonl_in_time_order(tmp_path: Path) -> None:
    out, _ = _run(tmp_path, "jsonl")
    events = read_jsonl(out)
    assert len(events) == 2 * 2 * 2 * ROUNDS
    assert [e["ts_ns"] for e in events] == sorted(e["ts_ns"] for e in events)
    assert _switches([e["pid"] for e in events]) >= 20
