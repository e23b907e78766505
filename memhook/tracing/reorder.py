"""The reorder window of ``memhook trace``: events of all processes, merged
in timestamp order before a writer sees them.

The collector reads each traced process's trace area in its own turn
(every ~20 ms, :mod:`memhook.tracing.collector`), so in arrival order one
process's batch can come after a later batch of another's.
:class:`Reorder` sits between the collector and a writer and holds every
event until ``window_ns`` (default :data:`WINDOW_MS` = 250 ms) has passed
since its timestamp - timestamps are
CLOCK_MONOTONIC, the clock this process reads too - then hands the held
events on, merged in timestamp order, with the "process started/ended"
marks in their place among them.

Bounds, and what they cost:

* latency: an event is written at most ``window_ns`` plus one collector
  turn (``tick``, ~50 ms) after it happened, or as soon as it arrives when it
  arrives later than that;
* memory: at most ``max_held`` events (default :data:`MAX_HELD`, ~5 MB of
  tuples) are held; beyond that the oldest go out early (a storm: the
  collector then holds the newest ``max_held / 2``, not ``window_ns``);
* order: an event that reaches the collector more than ``window_ns`` after
  it happened (a streamer descheduled on a loaded machine, a collector
  behind in a storm), or after ``max_held`` forced a flush, may come after
  events of other processes that are newer than it.  Such events are
  counted in :attr:`Reorder.out_of_order`, and ``memhook trace`` reports
  the count under its summary; one process's own events always keep their
  timestamp order.

A writer behind a Reorder gets ``events(proc, rows, [])``: the merged rows
of several processes in one call (``proc`` is :data:`MERGED`), and no
counter changes (the ledger computes those in arrival order); so it suits
writers that read what they need from the rows (text, jsonl, memviz), not
chrome, whose counters follow the ledger (Perfetto sorts by time itself).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from .ledger import Process

__all__ = ["CHUNK", "MAX_HELD", "MERGED", "WINDOW_MS", "Reorder"]

WINDOW_MS = 250
"""How long an event is held (of its timestamp) before it is written:
more than 10x what an event waits on a quiet box before the collector
reads it (~22 ms: its 20 ms poll), so a collector descheduled for that
long on a loaded machine still writes every event in order."""

MAX_HELD = 16384
"""Most events held at once (16 full batches)."""

CHUNK = 1024
"""Most rows per writer call."""

MERGED = Process(conn_id=-2)
"""The ``proc`` of a merged batch (the rows name their own pid and tid)."""

_TS = itemgetter(3)  # timestamp_ns in an EVENT_DTYPE row


def _count_before(rows: list[tuple], ts: int) -> int:
    """How many of ``rows`` (sorted by timestamp) are before ``ts`` (bisect
    with a key needs Python 3.10)."""
    lo, hi = 0, len(rows)
    while lo < hi:
        mid = (lo + hi) // 2
        if rows[mid][3] < ts:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _count_upto(rows: list[tuple], ts: int) -> int:
    """How many of ``rows`` (sorted by timestamp) are at or before ``ts``."""
    return _count_before(rows, ts + 1)


class Reorder:
    """Wraps a writer (see the module docstring); what the collector calls
    (``process_started``, ``events``, ``process_ended``, ``tick``, ``finish``,
    ``close``),
    and ``flush``."""

    def __init__(self, writer: Any, window_ns: int = WINDOW_MS * 1_000_000,
                 max_held: int = MAX_HELD,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.writer = writer
        self.out = writer.out
        self.window_ns = window_ns
        self.max_held = max_held
        self.clock = clock
        self.batches: list[list[tuple]] = []  # each sorted by timestamp
        self.held = 0
        # (ts, seq, call): process started/ended, in timestamp order
        self.marks: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.last_ts = 0          # the newest timestamp written so far
        self.out_of_order = 0     # events written after a newer one

    @property
    def summary_inline(self) -> bool:
        return bool(self.writer.summary_inline)

    # ------------------------------------------------------------- input

    def _mark(self, ts: int, call: Callable[[], None]) -> None:
        self._seq += 1
        bisect.insort(self.marks, (ts, self._seq, call))

    def process_started(self, proc: Process) -> None:
        ts = proc.hello.start_ns if proc.hello is not None else self.clock()
        self._mark(ts, lambda: self.writer.process_started(proc))

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        if rows:
            batch = sorted(rows, key=_TS)  # one process's threads: nearly sorted
            self.batches.append(batch)
            self.held += len(batch)
        self.tick()

    def process_ended(self, proc: Process, changes: list[tuple]) -> None:
        # Stamped now: after every event the process sent.
        ts = self.clock()
        self._mark(ts, lambda: self.writer.process_ended(proc, changes, ts))
        self.tick()

    # ------------------------------------------------------------ output

    def tick(self) -> None:
        """Write what has been held long enough (the collector calls this
        every turn, so held events go out even when no more arrive)."""
        self._release(self.clock() - self.window_ns)
        if self.held > self.max_held:
            # Over the bound: the oldest go out early, down to half of it,
            # and the newest stay to be merged with what comes next.
            held = sorted((row for batch in self.batches for row in batch), key=_TS)
            self._release(held[self.held - self.max_held // 2 - 1][3])

    def _release(self, cutoff: int | None) -> None:
        """Write every held event and mark with timestamp <= cutoff (all: None)."""
        ready: list[tuple] = []
        parts = 0
        keep: list[list[tuple]] = []
        for batch in self.batches:
            n = len(batch) if cutoff is None else _count_upto(batch, cutoff)
            if n:
                ready.extend(batch[:n] if n < len(batch) else batch)
                parts += 1
            if n < len(batch):
                keep.append(batch[n:] if n else batch)
        self.batches = keep
        self.held -= len(ready)
        if parts > 1:
            ready.sort(key=_TS)  # a merge of sorted runs
        if cutoff is None:
            marks, self.marks = self.marks, []
        else:
            n = bisect.bisect_right(self.marks, (cutoff, float("inf")))
            marks, self.marks = self.marks[:n], self.marks[n:]
        if ready:
            self.out_of_order += _count_before(ready, self.last_ts)
            self.last_ts = max(self.last_ts, ready[-1][3])
        start = 0
        for ts, _, call in marks:
            end = _count_upto(ready, ts) if start < len(ready) else start
            self._write(ready, start, end)
            start = max(start, end)
            call()
        self._write(ready, start, len(ready))

    def _write(self, rows: list[tuple], start: int, end: int) -> None:
        """rows[start:end] to the writer, at most :data:`CHUNK` at a time (what
        it builds per call - a string of lines - stays small)."""
        for i in range(start, end, CHUNK):
            self.writer.events(MERGED, rows[i:min(i + CHUNK, end)], [])

    def flush(self) -> None:
        """Write everything held (the trace is over)."""
        self._release(None)

    def finish(self) -> None:
        """Everything held out, then the writer's own :meth:`finish`."""
        self._release(None)
        self.writer.finish()

    def close(self, summary_text: str) -> None:
        self._release(None)
        self.writer.close(summary_text)
