"""A lane's span summary (csrc/queue/lane_span.c): what a query that cannot
take the consumer lock reads to tell whether events the cache lacks may
touch its answer.  It must never be short: fixtures/lane_span.c records
random ALLOCs and FREEs (some of unknown size: their address) and, with the
newest index on and around every alignment of blocks and chunks, asks about
each event's own range for backlogs from one event to the whole stream; a
marker touches everything while it is among the events asked about, and
no longer once it is not."""

from __future__ import annotations

from pathlib import Path

from queue_testing import FIXTURES


def test_the_summary_covers_every_event_it_is_asked_about(native, tmp_path: Path) -> None:
    exe = native.compile(FIXTURES / "lane_span.c", tmp_path / "lane_span",
                         extra=[f"-L{native.core.parent}", "-lmemhook",
                                f"-Wl,-rpath,{native.core.parent}"])
    out = native.run([str(exe), "100000"], timeout=240).stdout
    assert "FAIL" not in out and int(out.split("checks ")[1].split()[0]) > 100000, out
