"""A traced process with no consumer of its own, whose trace trimmed events,
then imports memhook: every answer is right (issue 14 item 4, issue 15).
The trim drops ALLOCs the late cache never sees; the core then stops
vouching for coverage, so a pointer the cache lacks is asked of the driver
instead of answered HOST (before: 4,464 of 70,000 wrong with coverage said
complete)."""

from __future__ import annotations

import re
import subprocess
import sys

from cli_testing import HERE, memhook


def test_late_consumer_gets_the_truth(tmp_path) -> None:
    script = HERE / "scripts" / "late_consumer.py"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(tmp_path / "t.jsonl"), "--",
                   sys.executable, str(script), "70000")
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"late_consumer: (\d+) wrong of 70000; coverage_complete=(\w+)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert int(m.group(1)) == 0, proc.stdout
    assert m.group(2) == "False", proc.stdout  # it cannot vouch: events were trimmed


_FEEDER_PROBE = ("import threading, memhook, memhook._events.feeder as feeder\n"
                 "names = [t.name for t in threading.enumerate()]\n"
                 "print('feeder', feeder.running(), 'memhook-feeder' in names)\n")


def test_a_traced_process_runs_the_feeder_from_the_import_on(tmp_path) -> None:
    """Hooks installed before ``import memhook`` (the trace preloads them):
    events already pile up, so the import starts the background feeder at
    once (memhook/__init__.py does, on the drain's word: the feeder sits
    above the drain).  A plain process starts none until install()."""
    traced = memhook("trace", "--sim", "-o", str(tmp_path / "t.txt"), "--",
                     sys.executable, "-c", _FEEDER_PROBE)
    assert traced.returncode == 0, traced.stderr
    assert "feeder True True" in traced.stdout, traced.stdout + traced.stderr
    plain = subprocess.run([sys.executable, "-c", _FEEDER_PROBE], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert "feeder False False" in plain.stdout, plain.stdout
