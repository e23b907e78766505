#!/usr/bin/env python3
"""The collector's own cost for a Python program's events under
``--python``: the ledger (program call sites, binding layers) and the
text or jsonl writer, on synthetic rows, without a traced process.

    python bench/trace/python_sites_bench.py [--events N]

Each ALLOC row has a ctypes (libffi) caller and one of eight Python stacks
(a helper called from eight lines, threading's frames on top), each FREE
none: what a ctypes program under ``memhook trace --python`` hands the
collector.  Prints events/s per format, the best of three, summary
included.  To compare with other code, run it in that checkout.
"""

from __future__ import annotations

import argparse
import io
import time

from memhook._objects.symbolize import Caller
from memhook.tracing.ledger import Ledger, Process, format_summary
from memhook.tracing.pyframes import PyFrame, PyStack
from memhook.tracing.writers.jsonl import JsonlWriter
from memhook.tracing.writers.text import TextWriter

BATCH = 4096  # the collector's batch


def _rows(n: int) -> list[tuple]:
    ffi = Caller("/lib/x86_64-linux-gnu/libffi.so.8", "", 0x6F7A, 0x7F0000006F7A)
    stacks = [PyStack((PyFrame("/srv/app/mem.py", 7, "alloc"),
                       PyFrame("/srv/app/train.py", 80 + k, "load"),
                       PyFrame("/usr/lib/python3.11/threading.py", 900, "run")))
              for k in range(8)]
    rows = []
    for i in range(n // 2):
        address = 0x7E0000000000 + (i % 1000) * 0x10000
        rows.append((0, address, 4096, i, 1, 0, 1, 0, 7, 7, 0, 0, ffi, None, stacks[i % 8]))
        rows.append((0, address, 4096, i, 2, 1, 1, 0, 7, 7, 0, 0, ffi, None, None))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    args = ap.parse_args()
    rows = _rows(args.events)
    for name, writer_type in (("text", TextWriter), ("jsonl", JsonlWriter)):
        best = float("inf")
        for _ in range(3):
            ledger = Ledger(["cuMemAlloc_v2", "cuMemFree_v2"], [False, False])
            proc = Process(conn_id=0)
            ledger.process_started(proc)
            writer = writer_type(io.StringIO(), ledger, 0)
            start = time.perf_counter()
            for at in range(0, len(rows), BATCH):
                batch = rows[at:at + BATCH]
                writer.events(proc, batch, ledger.add(proc, batch))
            ledger.finish()
            format_summary(ledger.summary(), "bistro,reloc", 1.0, 0)
            best = min(best, time.perf_counter() - start)
        print(f"{name}: {len(rows)} events in {best:.3f} s, {len(rows) / best:,.0f} events/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
