"""Helpers for the CLI tests (tests/cli): run ``python -m memhook`` in a
subprocess and read back what it wrote.

Imported as ``from cli_testing import ...`` (a unique module name; never
from conftest).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["DEGRADED", "HERE", "MiB", "memhook", "parse_collector_line", "read_jsonl",
           "summary_section", "warnings_of"]

HERE = Path(__file__).resolve().parent
MiB = 1 << 20
DEGRADED = 70
"""memhook trace's status when CMD succeeded but the trace is incomplete
(memhook/cli/trace.py: DEGRADED_STATUS; test_trace_collector_failures
holds the two together)."""

_COLLECTOR = re.compile(r"collector: (\d+) events in ([\d.]+) s \(([\d,]+) events/s\), "
                        r"peak RSS ([\d.]+) MiB")


def memhook(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m memhook ARGS...``; never raises on a non-zero exit."""
    return subprocess.run([sys.executable, "-m", "memhook", *args], check=False, capture_output=True,
                          text=True, env=env if env is not None else dict(os.environ),
                          timeout=timeout, cwd=cwd)


def read_jsonl(path: Path) -> list[dict]:
    """The events of a jsonl trace (its other records - the header, an
    ``oom`` report - left out, as a reader skips kinds it does not know)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r["kind"] in ("alloc", "free")]


def summary_section(text: str, title: str) -> list[str]:
    """The indented lines under a summary heading such as "failed calls:",
    less the table's column headings (its first line, when it has no digit:
    every row of figures has one)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line == title:
            out = []
            for follow in lines[i + 1:]:
                if not follow.startswith("  "):
                    break
                out.append(follow.strip())
            if out and not any(c.isdigit() for c in out[0]) and not out[0].startswith("("):
                out = out[1:]
            return out
    raise AssertionError(f"no {title!r} section in:\n{text}")


def parse_collector_line(text: str) -> tuple[int, float, float]:
    """(events, events per second, peak RSS in MiB) from the summary."""
    match = _COLLECTOR.search(text)
    assert match, f"no collector line in:\n{text}"
    return int(match.group(1)), float(match.group(3).replace(",", "")), float(match.group(4))


def warnings_of(text: str) -> list[str]:
    """The "warning: ..." lines under a summary."""
    return [line[len("warning: "):] for line in text.splitlines() if line.startswith("warning: ")]
