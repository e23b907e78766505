"""A million events through `memhook trace` with the collector's memory flat.

The traced program records alloc/free pairs through memhook_events_record
(the hooks' own path into the queue) as fast as it can; the collector
streams them to jsonl and keeps the summary.  Its peak RSS (the summary's
"collector:" line, ru_maxrss of the collector process) must not grow with
the number of events: a million events are 64 MB raw, several hundred MB as
Python objects, so holding them would show.
"""

from __future__ import annotations

from cli_testing import memhook, parse_collector_line, summary_section

MILLION = 1_000_000


def _run(programs, count: int) -> tuple[int, float, float, str]:
    proc = memhook("trace", "-f", "jsonl", "-o", "/dev/null", "--",
                   str(programs.event_storm), str(count), timeout=300)
    assert proc.returncode == 0, proc.stderr
    events, rate, rss = parse_collector_line(proc.stderr)
    return events, rate, rss, proc.stderr


def test_a_million_events_in_flat_memory(programs) -> None:
    small, _, rss_small, _ = _run(programs, 10_000)
    events, rate, rss, summary = _run(programs, MILLION)
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
