"""``memhook merge``'s engine: many traces (a job's ranks, from any number
of machines) read as one stream in wall-clock order.

Each file's events are stamped with its own machine's CLOCK_MONOTONIC; its
header's anchor (:class:`memhook.tracing.runinfo.ClockAnchor`) turns them
into CLOCK_REALTIME, the one clock the machines share (to within their NTP
sync).  Every file is one *track*, named by its header's rank and host -
ranks and hosts are whatever the files say, in any number and order.

Streaming: the files are read at once, one line each at a time, and
merged by aligned time (``heapq.merge``).  A file is in time order but for
the few events its trace wrote late (``memhook trace`` says how many); a
bounded window per file (:data:`REORDER_EVENTS`) puts those back in order,
and one later than that is written where it came, and counted.  What is
kept is that window, each track's live allocations and the figures of
:class:`MergeSummary`.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
from collections.abc import Iterator

from .diff import CONTEXT_TEARDOWNS
from .ledger import GLOBAL_FUNCTIONS, HOST_KEY, device_label, human_size
from .._values.printable import printable
from .tracefile import Event, TraceError, TraceFile, TraceHeader

__all__ = ["REORDER_EVENTS", "MergeSummary", "Track", "TrackPeak", "make_tracks", "merged"]

REORDER_EVENTS = 1024
"""Events of one file held to put late ones back in time order."""


@dataclasses.dataclass
class TrackPeak:
    bytes: int = 0
    at_ns: int = 0  # aligned wall-clock time it was first reached


@dataclasses.dataclass
class Track:
    """One input file: one rank's process track in the merged view."""

    index: int
    file: TraceFile
    label: str
    # (pid, address) -> (device key, size)
    live: dict[tuple[int, int], tuple[int, int]] = dataclasses.field(default_factory=dict)
    live_bytes: dict[int, int] = dataclasses.field(default_factory=dict)
    device_peaks: dict[int, TrackPeak] = dataclasses.field(default_factory=dict)
    gpu_live: int = 0
    gpu_peak: TrackPeak = dataclasses.field(default_factory=TrackPeak)
    events: int = 0
    late: int = 0

    @property
    def header(self) -> TraceHeader:
        return self.file.header

    def to_wall(self, ts_ns: int) -> int:
        anchor = self.header.anchor
        assert anchor is not None
        return anchor.to_wall(ts_ns)

    def account(self, e: Event, wall_ns: int) -> list[tuple[int, int]]:
        """Apply one event; the (device key, live bytes) it changed."""
        self.events += 1
        if e.result:
            return []
        if e.alloc:
            if not e.address or e.function in GLOBAL_FUNCTIONS:
                return []
            key = HOST_KEY if e.mem_type == "CUDA_HOST" else e.device
            old = self.live.pop((e.pid, e.address), None)
            changed = [] if old is None else [self._add(*old, -1, wall_ns)]
            self.live[(e.pid, e.address)] = (key, e.size)
            return [*changed, self._add(key, e.size, 1, wall_ns)]
        if e.function.startswith(CONTEXT_TEARDOWNS):
            gone = [k for k, (key, _) in self.live.items()
                    if k[0] == e.pid and (e.device < 0 or key in (e.device, -1, HOST_KEY))]
            return [self._add(*self.live.pop(k), -1, wall_ns) for k in gone]
        old = self.live.pop((e.pid, e.address), None)
        return [] if old is None else [self._add(*old, -1, wall_ns)]

    def _add(self, key: int, size: int, sign: int, wall_ns: int) -> tuple[int, int]:
        live = self.live_bytes.get(key, 0) + sign * size
        self.live_bytes[key] = live
        peak = self.device_peaks.get(key)
        if peak is None:
            peak = self.device_peaks[key] = TrackPeak()
        if live > peak.bytes:
            peak.bytes, peak.at_ns = live, wall_ns
        if key != HOST_KEY:
            self.gpu_live += sign * size
            if self.gpu_live > self.gpu_peak.bytes:
                self.gpu_peak = TrackPeak(self.gpu_live, wall_ns)
        return key, live


def make_tracks(files: list[TraceFile]) -> list[Track]:
    """One track a file; a file whose header has no clock anchor cannot be
    aligned (:class:`TraceError`).  Labels are "rank R @ host", with the
    file's name added where two files say the same."""
    for f in files:
        if f.header.anchor is None:
            raise TraceError(f"{printable(f.path)} has no clock anchor (no header: it was "
                             f"written by an older memhook, or is a merged file); merge reads "
                             f"the traces `memhook trace -f jsonl -o FILE` writes")
    labels = [f.header.label for f in files]
    tracks = []
    for i, f in enumerate(files):
        label = labels[i]
        if labels.count(label) > 1:
            label = f"{label} ({os.path.basename(f.path)})"
        tracks.append(Track(i, f, printable(label)))
    return tracks


def _in_order(track: Track) -> Iterator[tuple[int, int, int, Event]]:
    """(wall ns, track, sequence, event) of one file, in time order but
    for events later than the window (counted in ``track.late``)."""
    window: list[tuple[int, int, int, Event]] = []
    last = None
    to_wall = track.to_wall
    index = track.index
    for seq, e in enumerate(track.file.events()):
        heapq.heappush(window, (to_wall(e.ts_ns), index, seq, e))
        if len(window) > REORDER_EVENTS:
            item = heapq.heappop(window)
            if last is not None and item[0] < last:
                track.late += 1
            last = item[0] if last is None else max(last, item[0])
            yield item
    while window:
        item = heapq.heappop(window)
        if last is not None and item[0] < last:
            track.late += 1
        last = item[0] if last is None else max(last, item[0])
        yield item


def merged(tracks: list[Track]) -> Iterator[tuple[int, Track, Event, list[tuple[int, int]]]]:
    """Every event of every track in aligned time order, accounted:
    (wall ns, track, event, live bytes it changed per device key)."""
    for wall, index, _, e in heapq.merge(*(_in_order(t) for t in tracks)):
        track = tracks[index]
        yield wall, track, e, track.account(e, wall)


@dataclasses.dataclass
class MergeSummary:
    """The merged view's figures: peak bytes per rank and device."""

    tracks: list[Track]
    start_ns: int

    def first_peak(self) -> Track | None:
        """The track whose GPU bytes peaked first (None: nothing on a GPU)."""
        peaked = [t for t in self.tracks if t.gpu_peak.bytes > 0]
        return min(peaked, key=lambda t: (t.gpu_peak.at_ns, t.index)) if peaked else None

    def as_dict(self) -> dict:
        first = self.first_peak()
        return {
            "start_realtime_ns": self.start_ns,
            "tracks": [{
                "path": t.file.path, "label": t.label, "rank": t.header.rank,
                "host": t.header.host, "events": t.events, "late_events": t.late,
                "peak_bytes": t.gpu_peak.bytes,
                "peak_at_s": (t.gpu_peak.at_ns - self.start_ns) / 1e9,
                "devices": {device_label(k): {"peak_bytes": p.bytes,
                                              "peak_at_s": (p.at_ns - self.start_ns) / 1e9}
                            for k, p in sorted(t.device_peaks.items())},
            } for t in self.tracks],
            "first_to_peak": None if first is None else first.label,
        }

    def text(self) -> str:
        n_events = sum(t.events for t in self.tracks)
        hosts = {t.header.host for t in self.tracks}
        lines = [f"== memhook merge: {len(self.tracks)} traces from {len(hosts)} "
                 f"host{'s' if len(hosts) != 1 else ''}, {n_events:,} events; "
                 f"times in s from the earliest start, clocks aligned by each file's anchor",
                 "peak live bytes per rank and device:",
                 f"  {'track':<36} {'device':<14} {'peak':>12} {'at (s)':>10}"]
        for t in self.tracks:
            rows = [(device_label(k), p) for k, p in sorted(t.device_peaks.items())]
            rows.append(("all GPUs", t.gpu_peak))
            for name, p in rows:
                lines.append(f"  {t.label:<36} {name:<14} {human_size(p.bytes):>12} "
                             f"{(p.at_ns - self.start_ns) / 1e9 if p.bytes else 0:>10.3f}")
        first = self.first_peak()
        lines.append("first to peak: " + (
            "(no GPU memory in any trace)" if first is None else
            f"{first.label}, {human_size(first.gpu_peak.bytes)} at "
            f"{(first.gpu_peak.at_ns - self.start_ns) / 1e9:.3f} s"))
        for t in self.tracks:
            if t.late:
                lines.append(f"warning: {t.label}: {t.late} events were more than "
                             f"{REORDER_EVENTS} events late in their file and are written "
                             f"out of time order")
        return "\n".join(lines) + "\n"
