"""A traced program that writes garbage over its own trace area: the
summary says the area's header is corrupt and gives the count it can
vouch for (the events it read), never a loss read from the garbage.

Before: "pid N LOST 15371234808221178904 events: its trace area (256 MiB)
was full because the collector fell behind" - an impossible count, and
the wrong cause."""

from __future__ import annotations

import re
import sys

from cli_testing import DEGRADED, HERE, memhook, read_jsonl, warnings_of

SCRIBBLE = HERE / "scripts" / "scribble.py"


def test_a_program_that_wrote_over_its_area_header(tmp_path) -> None:
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
                   sys.executable, str(SCRIBBLE), "200")
    assert "scribbled at 0x" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == DEGRADED, proc.stderr
    events = read_jsonl(out)
    assert len(events) == 400  # the segments were untouched: every event is read
    said = warnings_of(proc.stderr)
    corrupt = [w for w in said if "the area's header is corrupt" in w]
    assert len(corrupt) == 1, proc.stderr
    assert "400 events were read from it" in corrupt[0], corrupt[0]
    assert not [w for w in said if "LOST" in w or "fell behind" in w], proc.stderr
    # Every count said anywhere is one a person can believe.
    assert all(int(n) < 10**12 for n in re.findall(r"\d+", proc.stderr)), proc.stderr
