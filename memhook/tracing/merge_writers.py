# %-formatting builds the per-event lines, as the trace's own writers do.
# ruff: noqa: UP031
"""``memhook merge``'s outputs, one class a format, each fed the merged
stream (:func:`memhook.tracing.merge.merged`) one event at a time:

* :class:`ChromeMerge` - Chrome trace / Perfetto JSON: one process track
  per input file (rank), named "rank R @ host", sorted by rank; an instant
  event per call on its thread, and a "live bytes DEVICE" counter per
  device of the rank; ``ts`` in microseconds from the earliest start;
* :class:`JsonlMerge` - one jsonl stream: a header naming every input,
  then each event's own line with ``rank``, ``host``, ``track`` (the
  input's index) and ``wall_ns`` (aligned CLOCK_REALTIME) added;
* :class:`MemvizMerge` - a PyTorch memory_viz pickle: each (rank, device)
  is a device of its own, numbered in the order first seen; the outermost
  frame of every entry names the rank; a bounded ring of entries, as
  ``memhook trace -f memviz`` keeps.

Each writes as it goes except memviz (a pickle is written whole, at the end).
"""

from __future__ import annotations

import collections
import json
import pickle
from typing import IO, Any

from .._version import __version__
from .diff import CONTEXT_TEARDOWNS
from .ledger import HOST_KEY, device_label
from .merge import MergeSummary, Track
from .runinfo import HEADER_FORMAT
from .tracefile import Event

__all__ = ["MERGE_FORMATS", "ChromeMerge", "JsonlMerge", "MemvizMerge", "make_merge_writer"]

MERGE_FORMATS = ("chrome", "jsonl", "memviz")


class MergeWriter:
    binary = False

    def __init__(self, out: IO[Any], tracks: list[Track], start_ns: int) -> None:
        self.out, self.tracks, self.start_ns = out, tracks, start_ns

    def event(self, wall_ns: int, track: Track, e: Event, changes: list[tuple[int, int]]) -> None:
        raise NotImplementedError

    def close(self, summary: MergeSummary) -> None:
        self.out.flush()


class ChromeMerge(MergeWriter):
    """Trace Event Format; a track's ``pid`` is its index + 1 (real pids of
    different machines may be equal), the process's own pid is in ``args``."""

    def __init__(self, out: IO[Any], tracks: list[Track], start_ns: int) -> None:
        super().__init__(out, tracks, start_ns)
        self.items: list[str] = []
        self.heads: dict[tuple, str] = {}
        self.tails: dict[tuple, str] = {}
        self.counters: dict[tuple[int, int], str] = {}
        self.first = True
        out.write('{"displayTimeUnit":"ns","otherData":{"tool":"memhook merge","version":%s},'
                  '"traceEvents":[\n' % json.dumps(__version__))

    def _flush_items(self) -> None:
        if not self.items:
            return
        text = ",\n".join(self.items)
        self.out.write(text if self.first else ",\n" + text)
        self.first = False
        self.items.clear()

    def event(self, wall_ns: int, track: Track, e: Event, changes: list[tuple[int, int]]) -> None:
        # A line is its head (name, category, track, thread), its time, its
        # address and size, and its tail (the rest of args): heads and tails
        # repeat, so each is made once (a bounded cache).
        d = max(wall_ns - self.start_ns, 0)
        head_key = (track.index, e.tid, e.function, e.alloc, e.result)
        head = self.heads.get(head_key)
        if head is None:
            cat = ("alloc" if e.alloc else "free") + (",failed" if e.result else "")
            head = '{"name":%s,"cat":"%s","ph":"i","s":"t","pid":%d,"tid":%d,"ts":' % (
                json.dumps(e.function), cat, track.index + 1, e.tid)
            if len(self.heads) >= 65_536:
                self.heads.clear()
            self.heads[head_key] = head
        tail_key = (e.pid, e.mem_type, e.device, e.result, e.caller_short)
        tail = self.tails.get(tail_key)
        if tail is None:
            tail = '"pid":%d,"mem_type":%s,"device":%d,"result":%d,"caller":%s}}' % (
                e.pid, json.dumps(e.mem_type), e.device, e.result, json.dumps(e.caller_short))
            if len(self.tails) >= 65_536:
                self.tails.clear()
            self.tails[tail_key] = tail
        append = self.items.append
        append('%s%d.%03d,"args":{"address":"%#x","size":%d,%s' % (
            head, d // 1000, d % 1000, e.address, e.size, tail))
        for key, live in changes:
            counter = self.counters.get((track.index, key))
            if counter is None:
                counter = self.counters[(track.index, key)] = (
                    '{"name":"live bytes %s","ph":"C","pid":%d,"ts":' % (device_label(key),
                                                                         track.index + 1))
            append('%s%d.%03d,"args":{"bytes":%d}}' % (counter, d // 1000, d % 1000, live))
        if len(self.items) >= 4096:
            self._flush_items()

    def close(self, summary: MergeSummary) -> None:
        for t in self.tracks:
            rank = t.header.rank
            self.items.append(json.dumps({"name": "process_name", "ph": "M", "pid": t.index + 1,
                                          "args": {"name": t.label}}))
            self.items.append(json.dumps({
                "name": "process_sort_index", "ph": "M", "pid": t.index + 1,
                "args": {"sort_index": rank if rank is not None else 1_000_000 + t.index}}))
        self._flush_items()
        self.out.write('\n],"memhookMerge":%s}\n' % json.dumps(summary.as_dict()))
        self.out.flush()


class JsonlMerge(MergeWriter):
    """One header (``kind`` "header", ``merged``: each input's header),
    then the inputs' lines in aligned order, each with ``rank``, ``host``,
    ``track`` and ``wall_ns`` added."""

    def __init__(self, out: IO[Any], tracks: list[Track], start_ns: int) -> None:
        super().__init__(out, tracks, start_ns)
        self.suffix = {}
        sources = []
        for t in tracks:
            h = t.header
            assert h.anchor is not None
            sources.append({"track": t.index, "path": h.path, "label": t.label, "rank": h.rank,
                            "host": h.host, "pid": h.pid, "memhook": h.version,
                            "clock": {"realtime_ns": h.anchor.realtime_ns,
                                      "monotonic_ns": h.anchor.monotonic_ns,
                                      "uncertainty_ns": h.anchor.uncertainty_ns}})
            self.suffix[t.index] = (',"rank":%s,"host":%s,"track":%d,"wall_ns":' % (
                json.dumps(h.rank), json.dumps(h.host), t.index)).encode()
        out.write(json.dumps({"kind": "header", "format": HEADER_FORMAT, "memhook": __version__,
                              "host": None, "rank": None, "clock": None,
                              "merged": sources}).encode() + b"\n")
        self.lines: list[bytes] = []

    binary = True

    def event(self, wall_ns: int, track: Track, e: Event, changes: list[tuple[int, int]]) -> None:
        line = e.line.rstrip(b"\r\n")
        self.lines.append(line[:-1] + self.suffix[track.index] + b"%d}\n" % wall_ns)
        if len(self.lines) >= 4096:
            self.out.write(b"".join(self.lines))
            self.lines.clear()

    def close(self, summary: MergeSummary) -> None:
        self.out.write(b"".join(self.lines))
        self.lines.clear()
        self.out.flush()


class MemvizMerge(MergeWriter):
    """PyTorch's snapshot (``segments``, ``device_traces``), one device a
    (rank, device); pinned host memory left out, as ``trace -f memviz`` does."""

    binary = True

    def __init__(self, out: IO[Any], tracks: list[Track], start_ns: int,
                 max_entries: int = 100_000) -> None:
        super().__init__(out, tracks, start_ns)
        self.ring: collections.deque[tuple] = collections.deque(maxlen=max_entries)
        self.devices: dict[tuple[int, int], int] = {}
        self.live: dict[tuple[int, int, int], tuple[int, int, tuple]] = {}

    def _device(self, track: Track, device: int) -> int:
        key = (track.index, device)
        n = self.devices.get(key)
        if n is None:
            n = self.devices[key] = len(self.devices)
        return n

    def event(self, wall_ns: int, track: Track, e: Event, changes: list[tuple[int, int]]) -> None:
        if e.mem_type == "CUDA_HOST":
            return
        t_us = max(wall_ns - self.start_ns, 0) // 1000
        where = (track.index, e.pid, e.function, e.caller_short,
                 tuple((f.get("file"), f.get("line"), f.get("function"))
                       for f in e.python or () if isinstance(f, dict)))
        if e.alloc:
            dev = self._device(track, max(e.device, 0))
            if e.result:
                if e.result == 2:  # CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation
                    self.ring.append((dev, "oom", 0, e.size, t_us, where))
                return
            if not e.address:
                return
            self.live[(track.index, e.pid, e.address)] = (dev, e.size, where)
            self.ring.append((dev, "segment_alloc", e.address, e.size, t_us, where))
            self.ring.append((dev, "alloc", e.address, e.size, t_us, where))
            return
        if e.result:
            return
        if e.function.startswith(CONTEXT_TEARDOWNS):  # what the context held is gone
            held = self.devices.get((track.index, e.device))
            gone = [k for k in self.live if k[:2] == (track.index, e.pid) and
                    (e.device < 0 or self.live[k][0] == held)]
        else:
            gone = [(track.index, e.pid, e.address)]
        for key in gone:
            old = self.live.pop(key, None)
            if old is None:
                continue
            for action in ("free_requested", "free_completed", "segment_free"):
                self.ring.append((old[0], action, key[2], old[1], t_us, old[2]))

    def _frames(self, where: tuple) -> list[dict]:
        index, pid, function, caller, python = where
        frames = [{"filename": str(f), "line": int(line or 0), "name": str(fn)}
                  for f, line, fn in python]
        frames.append({"filename": "CUDA", "line": 0, "name": function})
        frames.append({"filename": caller, "line": 0, "name": caller})
        frames.append({"filename": f"{self.tracks[index].label} (pid {pid})", "line": 0,
                       "name": "process"})
        return frames

    def close(self, summary: MergeSummary) -> None:
        ndev = max(len(self.devices), 1)
        traces: list[list[dict]] = [[] for _ in range(ndev)]
        for dev, action, addr, size, t_us, where in self.ring:
            entry = {"action": action, "addr": addr, "size": size, "stream": 0,
                     "time_us": t_us, "frames": self._frames(where)}
            if action == "oom":
                entry["device_free"] = 0
            traces[dev].append(entry)
        segments = []
        for (_, _, address), (dev, size, where) in sorted(self.live.items(),
                                                         key=lambda kv: (kv[1][0], kv[0])):
            frames = self._frames(where)
            segments.append({
                "device": dev, "address": address, "total_size": size,
                "allocated_size": size, "active_size": size, "requested_size": size,
                "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                "is_expandable": False, "frames": frames,
                "blocks": [{"address": address, "size": size, "requested_size": size,
                            "state": "active_allocated", "frames": frames}]})
        names = {n: f"{self.tracks[i].label} {device_label(d)}"
                 for (i, d), n in self.devices.items() if d != HOST_KEY}
        pickle.dump({"segments": segments, "device_traces": traces,
                     "memhook_devices": names, "memhook_merge": summary.as_dict()},
                    self.out, protocol=4)
        self.out.flush()


def make_merge_writer(fmt: str, out: IO[Any], tracks: list[Track], start_ns: int,
                      memviz_entries: int = 100_000) -> MergeWriter:
    if fmt == "chrome":
        return ChromeMerge(out, tracks, start_ns)
    if fmt == "jsonl":
        return JsonlMerge(out, tracks, start_ns)
    if fmt == "memviz":
        return MemvizMerge(out, tracks, start_ns, memviz_entries)
    raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(MERGE_FORMATS)}")
