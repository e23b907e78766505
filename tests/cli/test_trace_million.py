"""A million events through `memhook trace` with the collector's memory flat.

The traced program records alloc/free pairs through memhook_events_record
(the hooks' own path into the queue) as fast as it can; the collector
streams them to jsonl and keeps the summary.  Its peak RSS (the summary's
"collector:" line, VmHWM of the collector process) must not grow with
the number of events: a million events are 64 MB raw, several hundred MB as
Python objects, so holding them would show.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from cli_testing import HERE, memhook, parse_collector_line, summary_section

MILLION = 1_000_000
PEAK_RSS = HERE / "scripts" / "peak_rss.py"


def _run(programs, count: int) -> tuple[int, float, float, str]:
    proc = memhook("trace", "-f", "jsonl", "-o", "/dev/null", "--",
                   str(programs.event_storm), str(count), timeout=300)
    assert proc.returncode == 0, proc.stderr
    events, rate, rss = parse_collector_line(proc.stderr)
    return events, rate, rss, proc.stderr


def _peak_run(programs, fmt: str, count: int) -> tuple[subprocess.CompletedProcess[str], float]:
    """A trace of ``count`` events in ``fmt`` through scripts/peak_rss.py
    (``memhook`` in-process): the run, and the collector's true peak RSS
    (VmHWM at its exit) in MiB."""
    proc = subprocess.run([sys.executable, str(PEAK_RSS), "trace", "-f", fmt, "-o", "/dev/null",
                           "--", str(programs.event_storm), str(count)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    real = re.search(r"^real peak RSS: (\d+) kB$", proc.stderr, re.M)
    assert real, proc.stderr
    return proc, int(real.group(1)) / 1024


@pytest.fixture(scope="module")
def million_jsonl(programs) -> tuple[subprocess.CompletedProcess[str], float]:
    """One jsonl trace of a million events, read by both tests below."""
    return _peak_run(programs, "jsonl", MILLION)


def test_a_million_events_in_flat_memory(programs, million_jsonl) -> None:
    small, _, rss_small, _ = _run(programs, 10_000)
    summary = million_jsonl[0].stderr
    events, rate, rss = parse_collector_line(summary)
    print(f"\ncollector peak RSS: {rss:.1f} MiB for {events} events "
          f"({rss_small:.1f} MiB for {small}); {rate:,.0f} events/s")
    assert small == 10_000 and events == MILLION
    functions = summary_section(summary, "calls and bytes per function:")
    assert any(f.split()[:2] == ["cuMemAlloc_v2", str(MILLION // 2)] for f in functions)
    assert any(f.split()[:2] == ["cuMemFree_v2", str(MILLION // 2)] for f in functions)
    assert summary_section(summary, "allocations never freed:") == ["(none)"]
    peaks = summary_section(summary, "peak live bytes per device:")
    assert peaks[0].startswith("cuda:0") and "(4096 bytes)" in peaks[0]
    # 100x the events, (nearly) the same memory.
    assert rss - rss_small < 16, (rss_small, rss)


def test_memviz_over_a_million_events_in_flat_memory_and_the_summary_says_its_peak(
        programs, million_jsonl) -> None:
    """memviz keeps a ring of the last 100,000 entries and writes its
    pickle at the end.  Before: the ring held a tuple per entry and the
    pickle was built whole, so the collector peaked at ~83 MiB for a
    million events (the README promises under 50, as jsonl's ~43), and the
    summary, made before the pickle was written, said ~57.  Now the ring is
    fixed-size records and the pickle is streamed: flat as jsonl, and the
    summary's figure is the collector's true peak."""
    baseline = million_jsonl[1]
    proc, real = _peak_run(programs, "memviz", MILLION)
    events, _, said = parse_collector_line(proc.stderr)
    assert events == MILLION, proc.stderr
    print(f"\nmemviz, a million events: summary {said:.1f} MiB, true peak {real:.1f} MiB; "
          f"jsonl: {baseline:.1f} MiB")
    assert abs(real - said) < 1.5, (said, real)
    assert real - baseline < 12, (baseline, real)
