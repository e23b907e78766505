"""``memhook report``'s figures, read from jsonl traces as they stream by.

What is kept is bounded by the shape of the program, never by the length
of its trace:

* per lane - one (rank, device) pair - live bytes per calling library as a
  :class:`Series` of at most ``2 * points`` buckets.  A bucket keeps the
  moments its total was highest and lowest (with each library's share
  then) and the state at its end, so peaks and drops survive any amount of
  downsampling;
* per distinct call path (Python frames, then native frames, then the API
  function) the bytes allocated through it;
* the live allocations (what a FREE must find), each with its lane,
  library and call path: what was live when an allocation failed for lack
  of memory (the trace's ``oom`` record), and what was never freed, are
  read from them.

The accounting is the trace summary's (:mod:`memhook.tracing.ledger`): a
failed call allocates nothing, module globals are not allocations, a FREE
matches an ALLOC of the same pid, a context teardown frees what its process
held on that device.  Each input file is read in its own order; a file
from ``memhook merge -f jsonl`` holds many tracks and carries each line's
aligned wall-clock time, which is used as it is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterable

from .._values.printable import printable
from ..tracing.diff import CONTEXT_TEARDOWNS
from ..tracing.ledger import GLOBAL_FUNCTIONS, HOST_KEY, device_label, human_size
from ..tracing.tracefile import Event, TraceError, TraceFile

__all__ = ["DEFAULT_POINTS", "OOM_VIEWS_MAX", "FlameNode", "Lane", "OomMark", "ReportModel",
           "Series", "TrackInfo", "merged_sources"]

DEFAULT_POINTS = 1000
"""Buckets a lane's series is folded to (it holds up to twice as many)."""

OOM_VIEWS_MAX = 16
"""Flame views of what was live at an OOM: the first OOM of each lane, up to this many."""

_PATHS_MAX = 65_536             # distinct line tails kept parsed...
_PATH_BYTES_MAX = 64 << 20      # ...and their bytes
_FLAME_DEPTH_MAX = 96
_INTERPRETER = re.compile(r"^(lib)?python\d*(\.\d+)*[a-z]*(\.so.*)?$")
_STACK = re.compile(rb'"stack"\s*:\s*')
# The keys `memhook merge -f jsonl` adds at the end of every line it copies.
_MERGED_TAIL = re.compile(rb',"rank":(?:-?\d+|null),"host":(?:"(?:[^"\\]|\\.)*"|null),'
                          rb'"track":(\d+),"wall_ns":(-?\d+)\}\s*$')


class Series:
    """Live bytes per library over time, folded to a bounded number of
    buckets: ``add`` each new state in time order (a late one is counted in
    the bucket of the latest time seen).  A bucket keeps its highest and its
    lowest total, each with its moment and every library's share then, and
    its last state: the envelope of the curve at any folding."""

    # A bucket: three states - [peak, low, end] - each [total, time, sequence
    # number, shares]; the end's shares are None while it is the state now.
    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        self.points = max(points, 2)
        self.start: int | None = None
        self.width = 1_000  # ns; doubled whenever the buckets outgrow 2 * points
        self.buckets: dict[int, list[list]] = {}
        self._index = -1
        self._latest = 0
        self._seq = 0  # orders states of one time (equal stamps, late events)

    def add(self, t_ns: int, total: int, shares: list[int], lib: int, delta: int) -> None:
        """The state after ``delta`` bytes of library ``lib`` at ``t_ns``."""
        if self.start is None:
            self.start = t_ns
        t_ns = max(t_ns, self._latest)
        self._latest = t_ns
        self._seq += 1
        index = (t_ns - self.start) // self.width
        b = self.buckets.get(index)
        if b is None:
            # A new bucket closes the last one: its end is the state before this change.
            last = self.buckets.get(self._index)
            if last is not None and last[2][3] is None:
                before = list(shares)
                before[lib] -= delta
                last[2][3] = tuple(before)
            snapshot = tuple(shares)
            self.buckets[index] = [[total, t_ns, self._seq, snapshot] for _ in range(3)]
            self._index = index
            if len(self.buckets) > 2 * self.points:
                self._fold()
            return
        peak, low, end = b
        if total > peak[0]:
            peak[:] = total, t_ns, self._seq, tuple(shares)
        elif total < low[0]:
            low[:] = total, t_ns, self._seq, tuple(shares)
        end[:] = total, t_ns, self._seq, None

    def _fold(self) -> None:
        folded: dict[int, list[list]] = {}
        for index in sorted(self.buckets):
            b = self.buckets[index]
            into = folded.get(index // 2)
            if into is None:
                folded[index // 2] = b
                continue
            if b[0][0] > into[0][0]:
                into[0] = b[0]
            if b[1][0] < into[1][0]:
                into[1] = b[1]
            into[2] = b[2]
        self.buckets = folded
        self.width *= 2
        self._index //= 2

    def samples(self, now: list[int]) -> list[tuple[int, tuple[int, ...]]]:
        """(time ns, shares) in the order they were reached: each bucket's
        peak, low and end."""
        out: list[tuple[int, tuple[int, ...]]] = []
        for index in sorted(self.buckets):
            states = {}
            for _, t, seq, shares in self.buckets[index]:
                states[seq] = (t, shares if shares is not None else tuple(now))
            out += [states[seq] for seq in sorted(states)]
        return out


@dataclasses.dataclass
class OomMark:
    """An allocation that failed for lack of memory: the trace's ``oom`` record."""

    t_ns: int
    record: dict
    flame: int | None = None  # the index of the flame view of what was live then


@dataclasses.dataclass
class Lane:
    """One rank's one device."""

    track: int
    device: int
    series: Series
    shares: list[int] = dataclasses.field(default_factory=list)
    total: int = 0
    peak: int = 0
    peak_t_ns: int = 0
    ooms: list[OomMark] = dataclasses.field(default_factory=list)

    def change(self, t_ns: int, lib: int, delta: int) -> None:
        shares = self.shares
        if lib >= len(shares):
            shares.extend([0] * (lib + 1 - len(shares)))
        shares[lib] += delta
        self.total += delta
        if self.total > self.peak:
            self.peak, self.peak_t_ns = self.total, t_ns
        self.series.add(t_ns, self.total, shares, lib, delta)


@dataclasses.dataclass
class TrackInfo:
    """One rank (an input file, or one of a merged file's tracks)."""

    label: str
    path: str
    rank: int | None
    host: str | None
    events: int = 0


@dataclasses.dataclass
class FlameNode:
    name: str
    kind: str  # "rank", "py", "native", "api"
    value: int = 0
    children: dict[str, FlameNode] = dataclasses.field(default_factory=dict)

    def child(self, name: str, kind: str) -> FlameNode:
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = FlameNode(name, kind)
        return node

    def as_json(self, floor: int, depth: int = 0) -> dict:
        """The node and its children of at least ``floor`` bytes, largest first."""
        out: dict = {"n": self.name, "k": self.kind, "v": self.value}
        kids = [c for c in self.children.values() if c.value >= floor]
        if kids and depth < _FLAME_DEPTH_MAX:
            kids.sort(key=lambda c: (-c.value, c.name))
            out["c"] = [c.as_json(floor, depth + 1) for c in kids]
        return out


def merged_sources(path: str) -> list[dict] | None:
    """The inputs a ``memhook merge -f jsonl`` file names in its header, or
    None when ``path`` is not such a file."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
        header = json.loads(first)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(header, dict) or header.get("kind") != "header":
        return None
    sources = header.get("merged")
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        return None
    return sources


def _frame_of(caller: dict) -> tuple[str, str] | None:
    """A native frame's flame name, or None for the interpreter's own frames."""
    obj = os.path.basename(str(caller.get("object") or "")) or "?"
    if _INTERPRETER.match(obj):
        return None
    symbol = caller.get("symbol") or ""
    if symbol:
        return f"{symbol} ({obj})", "native"
    return f"{obj}+{int(caller.get('offset') or 0):#x}", "native"


class ReportModel:
    """Everything the page shows, fed one file at a time (:meth:`read`)."""

    def __init__(self, points: int = DEFAULT_POINTS) -> None:
        self.points = points
        self.tracks: list[TrackInfo] = []
        self.lanes: dict[tuple[int, int], Lane] = {}
        self.libraries: list[str] = []
        self._library_ids: dict[str, int] = {}
        self._caller_libs: dict[str, int] = {}
        self.paths: list[tuple[tuple[str, str], ...]] = []
        self._path_ids: dict[tuple, int] = {}
        self._tails: dict[bytes, int] = {}
        self._tail_bytes = 0
        self._merged = False
        self.allocated: dict[tuple[int, int], int] = {}  # (track, path) -> bytes
        # (track, pid, address) -> (lane, library, size, path)
        self.live: dict[tuple[int, int, int], tuple[Lane, int, int, int]] = {}
        self.oom_views: list[tuple[str, dict[tuple[int, int], int]]] = []
        self.oom_views_left = 0
        self.start_ns: int | None = None
        self.events = 0
        self.notes: list[str] = []

    # ---------------------------------------------------------------- input

    def read(self, f: TraceFile, tracks: list[TrackInfo],
             to_wall: Callable[[int], int] | None = None, merged: bool = False) -> None:
        """Every event of ``f``: one track (``tracks[0]``, times through
        ``to_wall``: the file's anchor, or None for its own clock), or, when
        ``merged``, a merged file's tracks (each line's own ``wall_ns``)."""
        base = len(self.tracks)
        self.tracks += tracks
        self._merged = merged
        current = base
        ooms: list[dict] = []
        f.on_record = lambda r: ooms.append(r) if r.get("kind") == "oom" else None
        for e in f.events():
            if ooms:  # read just now, after the failed ALLOC and before this event
                for r in ooms:
                    self._oom(current, self._oom_time(r, to_wall, merged), r)
                ooms.clear()
            if merged:
                m = _MERGED_TAIL.search(e.line)
                if m is None:
                    raise TraceError(f"{printable(f.path)}: an event of this merged trace has "
                                     f"no track and wall_ns (line {f.events_read + 1})")
                track = base + int(m.group(1))
                if track >= len(self.tracks):
                    raise TraceError(f"{printable(f.path)}: an event names track "
                                     f"{int(m.group(1))}, which its header does not list")
                t = int(m.group(2))
            else:
                track = base
                t = e.ts_ns if to_wall is None else to_wall(e.ts_ns)
            current = track
            if self.start_ns is None or t < self.start_ns:
                self.start_ns = t
            self.tracks[track].events += 1
            self._event(track, t, e)
        for r in ooms:  # a record after the last event
            self._oom(current, self._oom_time(r, to_wall, merged), r)
        f.on_record = None
        if f.cut:
            self.notes.append(f.cut)

    def _lane(self, track: int, device: int) -> Lane:
        lane = self.lanes.get((track, device))
        if lane is None:
            lane = self.lanes[(track, device)] = Lane(track, device, Series(self.points))
        return lane

    def _library(self, caller: str) -> int:
        lib = self._caller_libs.get(caller)
        if lib is None:
            name = os.path.basename(caller) or "(unknown library)"
            lib = self._library_ids.get(name)
            if lib is None:
                lib = self._library_ids[name] = len(self.libraries)
                self.libraries.append(name)
            if len(self._caller_libs) < 100_000:
                self._caller_libs[caller] = lib
        return lib

    def _event(self, track: int, t: int, e: Event) -> None:
        self.events += 1
        if e.result:
            return
        if e.alloc:
            if not e.address or e.function in GLOBAL_FUNCTIONS:
                return
            device = HOST_KEY if e.mem_type == "CUDA_HOST" else e.device
            lane = self._lane(track, device)
            lib = self._library(e.caller)
            path = self._path(e)
            key = (track, e.pid, e.address)
            old = self.live.pop(key, None)
            if old is not None:  # its FREE was not seen (an exec between)
                old[0].change(t, old[1], -old[2])
            self.live[key] = (lane, lib, e.size, path)
            lane.change(t, lib, e.size)
            site = (track, path)
            self.allocated[site] = self.allocated.get(site, 0) + e.size
        elif e.function.startswith(CONTEXT_TEARDOWNS):
            gone = [k for k, v in self.live.items()
                    if k[0] == track and k[1] == e.pid
                    and (e.device < 0 or v[0].device in (e.device, -1, HOST_KEY))]
            for k in gone:
                lane, lib, size, _ = self.live.pop(k)
                lane.change(t, lib, -size)
        else:
            old = self.live.pop((track, e.pid, e.address), None)
            if old is not None:
                old[0].change(t, old[1], -old[2])

    def _path(self, e: Event) -> int:
        """The id of an ALLOC's call path, outermost first."""
        line = e.line
        # Lines that differ only before their caller (address, size, time)
        # share a path: the rest of the line is its key.  ("caller" is the
        # first key whose value is not a number or a plain name.)
        at = line.find(b'"caller"')
        tail = line[at:] if at >= 0 else line
        if self._merged:  # the keys merge added differ on every line: not part of the path
            m = _MERGED_TAIL.search(tail)
            if m is not None:
                tail = tail[:m.start()]
        tail += e.function.encode()
        known = self._tails.get(tail)
        if known is not None:
            return known
        frames: list[tuple[str, str]] = []
        for f in reversed(e.python or []):
            try:
                frames.append((f"{f['function']} ({f['file']}:{int(f['line'] or 0)})", "py"))
            except (KeyError, TypeError, ValueError):
                continue
        native = self._native(line)
        if native is None:
            native = [(e.caller_short, "native")] if e.caller_short != "?" else []
        frames += native
        frames.append((e.function, "api"))
        key = tuple(frames)
        path = self._path_ids.get(key)
        if path is None:
            path = self._path_ids[key] = len(self.paths)
            self.paths.append(key)
        if len(self._tails) >= _PATHS_MAX or self._tail_bytes > _PATH_BYTES_MAX:
            self._tails.clear()
            self._tail_bytes = 0
        self._tails[tail] = path
        self._tail_bytes += len(tail)
        return path

    @staticmethod
    def _native(line: bytes) -> list[tuple[str, str]] | None:
        """The ``stack`` of a line (--stacks), outermost first, without the
        interpreter's frames; None when the line has none."""
        m = _STACK.search(line)
        if m is None:
            return None
        try:
            stack, _ = json.JSONDecoder().raw_decode(line[m.end():].decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        if not isinstance(stack, list):
            return None
        frames = []
        for c in reversed(stack):
            try:
                frame = _frame_of(c) if isinstance(c, dict) else None
            except (TypeError, ValueError):  # not what memhook writes: the frame is left out
                continue
            if frame is not None:
                frames.append(frame)
        return frames

    @staticmethod
    def _oom_time(r: dict, to_wall: Callable[[int], int] | None, merged: bool) -> int | None:
        """When the failed call was made, on the report's clock (None: not said)."""
        ts = r.get("wall_ns" if merged else "ts_ns")
        if not isinstance(ts, int) or isinstance(ts, bool):
            return None
        return ts if to_wall is None or merged else to_wall(ts)

    def _oom(self, track: int, t: int | None, r: dict) -> None:
        try:
            device = int(r["device"])
        except (KeyError, TypeError, ValueError):
            self.notes.append(f"{printable(self.tracks[track].path)}: an oom record without "
                              f"its device was left out")
            return
        lane = self._lane(track, device)
        if t is None:
            t = lane.series._latest or (self.start_ns or 0)
        mark = OomMark(t, r)
        lane.ooms.append(mark)
        # A flame view of what was live: for a lane's first OOM (a program
        # that retries fails again, and memhook trace reports up to 16).
        if len(lane.ooms) > 1:
            return
        if len(self.oom_views) >= OOM_VIEWS_MAX:
            self.oom_views_left += 1
            return
        snapshot: dict[tuple[int, int], int] = {}
        for (tr, _, _), (held_in, _, size, path) in self.live.items():
            if tr == track and held_in is lane:
                snapshot[(tr, path)] = snapshot.get((tr, path), 0) + size
        mark.flame = len(self.oom_views)
        label = self.tracks[track].label
        self.oom_views.append((f"live at the OOM on {label}, {device_label(device)}", snapshot))

    # --------------------------------------------------------------- output

    def flame(self, weights: dict[tuple[int, int], int]) -> FlameNode:
        root = FlameNode("all", "root")
        ranks = len(self.tracks) > 1
        for (track, path), size in weights.items():
            if size <= 0:
                continue
            node = root
            node.value += size
            if ranks:
                node = node.child(self.tracks[track].label, "rank")
                node.value += size
            for name, kind in self.paths[path]:
                node = node.child(name, kind)
                node.value += size
        return root

    def never_freed(self) -> dict[tuple[int, int], int]:
        out: dict[tuple[int, int], int] = {}
        for (track, _, _), (_, _, size, path) in self.live.items():
            out[(track, path)] = out.get((track, path), 0) + size
        return out

    def page_data(self, title: str, inputs: Iterable[str]) -> dict:
        """The page's data, as JSON-ready values."""
        start = self.start_ns or 0
        lanes = []
        def order(item: tuple[tuple[int, int], Lane]) -> tuple:
            # By rank where the files say it (t-10 after t-2, whatever the
            # order of the arguments), then host, then input order; devices
            # in number order, pinned host memory last.
            (track, device), _ = item
            info = self.tracks[track]
            return (info.rank is None, info.rank or 0, info.host or "", track,
                    device == HOST_KEY, device)

        for (track, device), lane in sorted(self.lanes.items(), key=order):
            shares = lane.shares
            libs = [i for i in range(len(shares))
                    if any(i < len(s) and s[i] for _, s in lane.series.samples(shares))]
            points = []
            for t, s in lane.series.samples(shares):
                points.append([round((t - start) / 1e9, 9)] +
                              [s[i] if i < len(s) else 0 for i in libs])
            lanes.append({
                "track": track, "label": self.tracks[track].label,
                "device": device_label(device), "libs": libs, "points": points,
                "peak": lane.peak, "peak_text": human_size(lane.peak),
                "peak_s": round((lane.peak_t_ns - start) / 1e9, 9) if lane.peak else 0,
                "ooms": [self._oom_json(m, start) for m in lane.ooms]})
        views = [("bytes allocated", self.allocated),
                 ("live at the end (never freed)", self.never_freed())]
        views[1:1] = [(name, weights) for name, weights in self.oom_views]
        notes = list(self.notes)
        if self.oom_views_left:
            notes.append(f"{self.oom_views_left} more lanes ran out of memory; the flame graph "
                         f"shows what was live at the first OOM of {OOM_VIEWS_MAX} lanes only")
        flames = []
        for name, weights in views:
            root = self.flame(weights)
            flames.append({"name": name, "total": root.value, "total_text": human_size(root.value),
                           "tree": root.as_json(max(root.value // 1000, 1))})
        return {"title": title, "inputs": list(inputs),
                "tracks": [dataclasses.asdict(t) for t in self.tracks],
                "events": self.events, "libraries": self.libraries, "lanes": lanes,
                "flames": flames, "notes": notes}

    @staticmethod
    def _oom_json(m: OomMark, start: int) -> dict:
        r = m.record

        def rows(key: str, name: str) -> list[list]:
            out = []
            for row in r.get(key) or []:
                if isinstance(row, dict):
                    out.append([str(row.get(name)), int(row.get("bytes") or 0),
                                int(row.get("count") or 0)])
            return out

        size = r.get("size")
        return {"t": round((m.t_ns - start) / 1e9, 9), "flame": m.flame,
                "function": str(r.get("function")), "error": str(r.get("error")),
                "size": size, "size_text": human_size(size) if isinstance(size, int) else "?",
                "live_bytes": r.get("live_bytes"), "device_free": r.get("device_free"),
                "device_total": r.get("device_total"),
                "by_library": rows("by_library", "library"),
                "by_python_site": rows("by_python_site", "site")}
