#!/usr/bin/env python3
"""The collector's peak memory in each format of ``memhook trace``, beside
the same trace of 10,000 events, in one run.

    python bench/trace/trace_rss_bench.py [--events N] [--formats text,jsonl,chrome,memviz]

Traces ``event_storm N`` (tests/cli/fixtures/event_storm.c: alloc/free pairs
through the hooks' own recording path, the live set small) in each format,
output to /dev/null, and prints two figures per trace: the summary's
"peak RSS" and the collector's true peak, the kernel's VmHWM read as the
collector exits.  They should agree (the summary is made after every
writer wrote all it holds, memviz's snapshot included), and the peak
should not grow with N: the collector keeps aggregates and live
allocations, never the events, and memviz a ring of fixed-size records.
The README's promise: under 50 MiB for a million events, in every format.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORM = ROOT / "tests" / "cli" / "c" / "event_storm.c"
BASELINE_EVENTS = 10_000

# memhook in this process, then its VmHWM on stderr as the interpreter exits.
RUNNER = """\
import atexit, runpy, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            sys.stderr.write("real peak RSS: %s kB\\n" % line.split()[1])
atexit.register(peak)
sys.argv = ["memhook", *sys.argv[1:]]
runpy.run_module("memhook", run_name="__main__", alter_sys=True)
"""
_SAID = re.compile(r"collector: (\d+) events in ([\d.]+) s .*peak RSS ([\d.]+) MiB")
_REAL = re.compile(r"^real peak RSS: (\d+) kB$", re.M)


def trace(storm: Path, fmt: str, events: int) -> tuple[float, float, float]:
    """(summary's peak MiB, true peak MiB, seconds) of one trace."""
    proc = subprocess.run([sys.executable, "-c", RUNNER, "trace", "-f", fmt, "-o", "/dev/null",
                           "--", str(storm), str(events)],
                          capture_output=True, text=True, timeout=1800, check=False)
    said, real = _SAID.search(proc.stderr), _REAL.search(proc.stderr)
    if proc.returncode != 0 or said is None or real is None or int(said.group(1)) != events:
        raise SystemExit(f"trace -f {fmt} of {events} events failed "
                         f"(status {proc.returncode}):\n{proc.stderr}")
    return float(said.group(3)), int(real.group(1)) / 1024, float(said.group(2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--formats", default="text,jsonl,chrome,memviz")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        storm = Path(tmp) / "event_storm"
        subprocess.run(["cc", "-O2", str(STORM), "-o", str(storm), "-ldl"], check=True)
        print(f"{'format':<8} {'events':>10} {'summary MiB':>12} {'true MiB':>9} "
              f"{'baseline MiB':>13} {'events/s':>10}")
        for fmt in args.formats.split(","):
            _, base, _ = trace(storm, fmt, BASELINE_EVENTS)
            said, real, seconds = trace(storm, fmt, args.events)
            print(f"{fmt:<8} {args.events:>10,} {said:>12.1f} {real:>9.1f} {base:>13.1f} "
                  f"{args.events / seconds:>10,.0f}", flush=True)
    print(f"(baseline: the same format, {BASELINE_EVENTS:,} events; true: VmHWM at exit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
