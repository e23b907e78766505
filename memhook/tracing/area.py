"""The collector's view of a traced process's trace area (``trace_proto.h``:
``mh_trace_area``): a memfd the process writes every event into, handed to
the collector at connect.

:meth:`TraceArea.read` takes out what is new in the order
``csrc/queue/event_drain.c`` explains (two looks at every segment's
``published`` count; events that appeared between the looks set a horizon
that what is handed out stays below), converts raw TSC stamps to
``CLOCK_MONOTONIC`` ns, then gives finished segments back: their pages are
punched out of the memfd (``MADV_REMOVE``) and ``done[i]`` is written, so a
collector that keeps up holds a few segments per thread, whatever the
number of events.

Nothing in an area is trusted: it is the traced process's memory, and the
process may be buggy or hostile.

* Every offset and count of the header is checked, before anything is
  read, against the memfd's real size (``fstat``) and against what the
  traced side can make (at most :data:`MAX_SEGMENTS` segments, the module,
  stack, Python and code records' fixed sizes, the depths' bounds): memory
  here is bounded by what a well-formed area of that size holds, whatever
  a header claims.
* Every read is a ``pread`` of the descriptor, never a load from a
  mapping: a memfd cut short under us (the traced side seals it against
  that, ``F_SEAL_SHRINK``, where the kernel allows; a hostile one need
  not) gives a short read, :class:`AreaTruncated`, never a SIGBUS.  The
  one mapping kept is for ``MADV_REMOVE`` only and is never touched.
* Counts read from the area (``published``, ``fresh``, ``modules_used``,
  a stack record's length) are clamped to what their arrays hold; the
  references and lengths inside Python and code records are checked by
  :class:`~memhook.tracing.pyframes.PyRecords` before it reads there.
* The descriptor must be a memfd (the collector writes ``done`` back and
  punches finished segments out: into the process's memory, never into a
  file someone passed instead) open for reading and writing; anything else
  is refused at once, with a message.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat
import struct
import time

import numpy as np

from .protocol import EVENT_DTYPE, VERSION, ProtocolError
from .pyframes import PyRecords, PyStack

__all__ = ["AREA_HEADER", "AREA_MAGIC", "MAX_SEGMENTS", "SEG_CLOSED", "SEG_EVENTS", "SEG_OWNED",
           "AreaTruncated", "TraceArea"]

AREA_MAGIC = 0x41544D48
SEG_EVENTS = 256
SEG_FREE, SEG_CLAIMING, SEG_OWNED, SEG_CLOSED = 0, 1, 2, 3
RAW_TSC = 0x80000000

AREA_HEADER = struct.Struct("<IIIIQQQQQQQiIQQQQQQ")
"""mh_trace_area's fields up to first_off (128 bytes); the counters follow."""
_FRESH, _LOST, _LOST_OWNED, _LOST_FORKED, _DONE_TOTAL, _EXITED, _ANCHOR = (
    128, 152, 160, 168, 192, 76, 96)
RECORDS = struct.Struct("<QQQQQQQIIQQQQQQQQII")
"""modules_off, modules_cap, modules_used, modules_lost, stacks_off,
stacks_cap, stacks_next, stack_depth, py_depth, py_off, py_cap, py_used,
py_lost, codes_off, codes_cap, codes_used, codes_lost, py_version,
reserved2 (at offset 256)."""
_RECORDS_AT, _MODULES_USED, _MODULES_LOST, _STACKS_NEXT = 256, 272, 280, 304
_PY_LOST, _CODES_LOST, _PY_VERSION = 344, 376, 384
_FIXED = ((0, 76), (80, 16), (120, 8), (256, 16), (288, 16), (312, 24), (352, 16))
"""Spans of the header the traced side writes once, when it makes the area
(identity, size, offsets, pid, the first clock anchor, first_off, and the
records' offsets, capacities and depths): changed later, the process wrote
over its header."""
_COUNTERS = ((128, "segments taken fresh"), (136, "claims"),
             (_LOST, "events lost because the collector fell behind"),
             (_LOST_OWNED, "events lost because every segment was owned"),
             (_LOST_FORKED, "events of raw-fork children"),
             (_MODULES_LOST, "module records lost"), (_STACKS_NEXT, "stack records"),
             (_PY_LOST, "Python records lost"), (_CODES_LOST, "code records lost"))
"""The header's counters of things the traced side did, each at most one a
nanosecond a CPU of the area's life (a hooked call takes far longer).
(``scan`` is not one: a search for a free segment adds several to it.)"""
_SEG_BYTES = SEG_EVENTS * EVENT_DTYPE.itemsize
_HEADER_BYTES = 4096
_TS_AT = 24  # timestamp_ns in memhook_event (memhook/_events/layout.py)

MAX_SEGMENTS = 4096 * 2**20 // _SEG_BYTES
"""The most segments the traced side makes (MEMHOOK_TRACE_BUFFER_MB=4096)."""
_MODULES_MAX = 1 << 20           # MH_TRACE_MODULES_BYTES
_STACKS_MAX = 64 << 20           # MH_TRACE_STACKS_MB
_STACK_DEPTH_MAX = 128           # MEMHOOK_TRACE_STACKS's bound
_PY_MAX = 64 << 20               # MH_TRACE_PY_MB
_CODES_MAX = 64 << 20            # MH_TRACE_CODES_MB
_PY_DEPTH_MAX = 128              # MH_TRACE_PY_DEPTH_MAX (MEMHOOK_TRACE_PYTHON's bound)
_MAX_BYTES = (_HEADER_BYTES + MAX_SEGMENTS * 48 + 9 * 4096 + _MODULES_MAX + _STACKS_MAX
              + _PY_MAX + _CODES_MAX + MAX_SEGMENTS * _SEG_BYTES)
"""Larger than any area the traced side makes (the layout of trace_lane.c
with the most segments, and room for its alignment)."""


class AreaTruncated(ProtocolError):
    """The memfd is shorter than its header said: the process cut it."""


class TraceArea:
    """One process image's trace area, read from its memfd (the descriptor
    is this object's from now on: closed by :meth:`close`, or at once if
    the area is refused)."""

    best_ns_per_tick: float | None = None
    """The rate of the longest anchor baseline any area had (one TSC for the
    whole machine): for an area whose process lived too short to have one."""
    machine_ns_per_tick: float | None = None
    """The TSC's rate as the collector's own process measured it
    (``memhook_clock_ns_per_tick``, set by the collector): before any other,
    for an area whose own anchors are too close to size a tick."""
    _best_baseline = 0

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._mm: mmap.mmap | None = None
        try:
            self._open()
        except BaseException:
            if self._mm is not None:
                self._mm.close()
            os.close(fd)
            raise

    def _open(self) -> None:
        fd = self.fd
        st = os.fstat(fd)
        try:
            seals: int | None = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            seals, link = None, ""
        if not stat.S_ISREG(st.st_mode) or seals is None or not link.startswith("/memfd:"):
            # The collector writes into an area (done, and punched pages):
            # only ever into memory the process made for it, never a file.
            raise ProtocolError("its trace area is not a memfd (the collector writes into "
                                "the memory of a trace area, never into a file)")
        self.sealed = bool(seals & fcntl.F_SEAL_SHRINK)
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDWR:
            raise ProtocolError("its trace area's descriptor is not open for reading and "
                                "writing (the collector writes which segments it finished)")
        size = st.st_size
        self.size = size
        if size < _HEADER_BYTES:
            raise ProtocolError(f"trace area of {size} bytes is smaller than its header")
        if size > _MAX_BYTES:
            raise ProtocolError(f"trace area of {size} bytes is larger than any the traced "
                                f"side makes ({_MAX_BYTES} at most)")
        head = self._pread(_HEADER_BYTES, 0)
        (magic, version, seg_events, nseg, asize, state_off, tid_off, claim_off, pub_off,
         done_off, events_off, self.pid, _, self.tsc0, self.ns0, _, _, _,
         first_off) = AREA_HEADER.unpack_from(head)
        if magic != AREA_MAGIC or version != VERSION or seg_events != SEG_EVENTS:
            raise ProtocolError(f"not a version-{VERSION} trace area (magic {magic:#x}, "
                                f"version {version}, {seg_events} events a segment)")
        if not 1 <= nseg <= MAX_SEGMENTS:
            raise ProtocolError(f"trace area claims {nseg} segments; the traced side makes "
                                f"1-{MAX_SEGMENTS}")
        if asize != size:
            raise ProtocolError(f"trace area says it is {asize} bytes; its memfd is {size}")
        for name, off, width in (("state", state_off, 4), ("tid", tid_off, 4),
                                 ("claim", claim_off, 8), ("published", pub_off, 8),
                                 ("done", done_off, 8), ("first", first_off, 8)):
            self._check_span(name, off, nseg * width, width)
        self._check_span("events", events_off, nseg * _SEG_BYTES, 64)
        (self.modules_off, self.modules_cap, _, _, self.stacks_off, self.stacks_cap, _,
         self.stack_depth, self.py_depth, py_off, py_cap, _, _, codes_off, codes_cap, _, _, _,
         _) = RECORDS.unpack_from(head, _RECORDS_AT)
        if self.modules_cap > _MODULES_MAX:
            raise ProtocolError(f"trace area claims {self.modules_cap} bytes of module "
                                f"records; the traced side makes {_MODULES_MAX}")
        self._check_span("module records", self.modules_off, self.modules_cap, 8)
        if self.stack_depth > _STACK_DEPTH_MAX:
            raise ProtocolError(f"trace area claims stacks of {self.stack_depth} frames; "
                                f"at most {_STACK_DEPTH_MAX}")
        self._stack_width = (self.stack_depth + 1) * 8
        stack_bytes = self.stacks_cap * self._stack_width if self.stack_depth else 0
        if stack_bytes > _STACKS_MAX:
            raise ProtocolError(f"trace area claims {stack_bytes} bytes of stack records; "
                                f"the traced side makes {_STACKS_MAX} at most")
        if self.stack_depth:
            self._check_span("stack records", self.stacks_off, stack_bytes, 8)
        self.python: PyRecords | None = None
        """--python: the area's Python and code records, named (None: off)."""
        if self.py_depth:
            if self.py_depth > _PY_DEPTH_MAX:
                raise ProtocolError(f"trace area claims Python stacks of {self.py_depth} "
                                    f"frames; at most {_PY_DEPTH_MAX}")
            for name, off, cap, most in (("Python records", py_off, py_cap, _PY_MAX),
                                         ("code records", codes_off, codes_cap, _CODES_MAX)):
                if cap > most:
                    raise ProtocolError(f"trace area claims {cap} bytes of {name}; the "
                                        f"traced side makes {most} at most")
                self._check_span(name, off, cap, 8)
            self.python = PyRecords(self._pread, py_off, py_cap, self.py_depth, codes_off,
                                    codes_cap, _PY_VERSION)
        self._fixed = [head[at:at + n] for at, n in _FIXED]
        self.nseg = nseg
        self.buffer_mib = nseg * _SEG_BYTES / 2**20
        self.events_off = events_off
        self._off = {"state": state_off, "tid": tid_off, "claim": claim_off,
                     "published": pub_off, "done": done_off, "first": first_off}
        # Only to punch finished segments out (MADV_REMOVE), never read or
        # written through: a memfd cut short cannot fault here.
        self._punch = events_off % mmap.PAGESIZE == 0
        if self._punch:
            try:
                self._mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED,
                                     mmap.PROT_READ | mmap.PROT_WRITE)
            except (OSError, ValueError):
                self._punch = False
        self._last_ns = 0  # the newest stamp handed out: they never step back
        self.rd_claim = np.zeros(nseg, np.uint64)  # the generation read
        self.rd_at = np.zeros(nseg, np.uint64)     # events of it taken out
        self.rd_last = np.zeros(nseg, np.uint64)   # the stamp of the last one
        self._done_total = 0
        self.seq = 0
        self.taken = 0
        self.modules_read = 0
        self.give_back_failed: str | None = None
        """Why segments can no longer be given back (the area then fills)."""
        self.last_stacks: list[tuple[int, ...] | None] | None = None
        """After :meth:`read` with --stacks: each event's return addresses
        (innermost first), or None (a FREE, or no record)."""
        self.last_python: list[PyStack | None] | None = None
        """After :meth:`read` with --python: each event's Python frames, or
        None (a FREE, or no record)."""

    def _check_span(self, name: str, off: int, length: int, align: int) -> None:
        if length == 0:
            return  # (nothing is read there)
        if off % align or off < _HEADER_BYTES or off + length > self.size:
            raise ProtocolError(f"trace area's {name} ({length} bytes at offset {off}) is "
                                f"not inside its {self.size} bytes")

    # ------------------------------------------------------------- reading

    def _truncated(self) -> AreaTruncated:
        size = os.fstat(self.fd).st_size
        return AreaTruncated(f"its trace area shrank from {self.size} to {size} bytes "
                             f"(the program cut its memfd)")

    def _pread(self, n: int, off: int) -> bytes:
        data = os.pread(self.fd, n, off)
        if len(data) != n:
            raise self._truncated()
        return data

    def _load(self, name: str, count: int) -> np.ndarray:
        """``count`` entries of the descriptor array ``name``, copied now."""
        dtype = np.uint32 if name == "state" else np.int32 if name == "tid" else np.uint64
        width = np.dtype(dtype).itemsize
        return np.frombuffer(self._pread(count * width, self._off[name]), dtype)

    def _rows(self, seg: int, at: int, n: int) -> np.ndarray:
        """Events ``[at, at + n)`` of segment ``seg``, a writable copy."""
        buf = bytearray(n * EVENT_DTYPE.itemsize)
        if n and os.preadv(self.fd, [buf], self.events_off + seg * _SEG_BYTES
                           + at * EVENT_DTYPE.itemsize) != len(buf):
            raise self._truncated()
        return np.frombuffer(buf, EVENT_DTYPE)

    def _stamp(self, seg: int, at: int) -> int:
        off = self.events_off + seg * _SEG_BYTES + at * EVENT_DTYPE.itemsize + _TS_AT
        return int(struct.unpack("<Q", self._pread(8, off))[0])

    def _word(self, offset: int) -> int:
        return int(struct.unpack("<Q", self._pread(8, offset))[0])

    def read_modules(self) -> bytes:
        """Module record bytes written since the last call (complete records
        only: the process publishes modules_used after writing one)."""
        used = min(self._word(_MODULES_USED), self.modules_cap)
        if used <= self.modules_read:
            return b""
        data = self._pread(used - self.modules_read, self.modules_off + self.modules_read)
        self.modules_read = used
        return data

    @property
    def modules_lost(self) -> int:
        return self._word(_MODULES_LOST)

    @property
    def stacks_lost(self) -> int:
        return max(0, self._word(_STACKS_NEXT) - self.stacks_cap)

    @property
    def codes_lost(self) -> int:
        return self._word(_CODES_LOST)

    @property
    def python_lost(self) -> int:
        return self._word(_PY_LOST)

    def _stacks(self, ids: np.ndarray) -> list[tuple[int, ...] | None]:
        width, depth = self._stack_width, self.stack_depth
        wanted = [rid for rid in ids.tolist() if 0 < rid <= self.stacks_cap]
        records: dict[int, tuple[int, ...]] = {}
        if wanted:
            # Records are claimed in order: a batch's are near each other,
            # so a few reads of spans of them, not one read each.
            wanted.sort()
            start = 0
            while start < len(wanted):
                end = start
                while (end + 1 < len(wanted)
                       and (wanted[end + 1] - wanted[start] + 1) * width <= 1 << 20):
                    end += 1
                lo, hi = wanted[start], wanted[end]
                data = self._pread((hi - lo + 1) * width, self.stacks_off + (lo - 1) * width)
                for rid in wanted[start:end + 1]:
                    rec = struct.unpack_from(f"<{depth + 1}Q", data, (rid - lo) * width)
                    records[rid] = rec[1:1 + min(rec[0], depth)]
                start = end + 1
        return [records.get(rid) for rid in ids.tolist()]

    # ---------------------------------------------------------------- header

    def header_problem(self, now_ns: int | None = None) -> str | None:
        """Why the area's header can no longer be believed, or None.

        The process may write over its own area (a stray memset, a buffer
        overrun): then its counters (events lost, and the rest) are
        garbage, and a summary that repeated them would claim an
        impossible loss with the wrong cause.  The header is corrupt when
        a field the traced side writes only when it makes the area changed
        since HELLO, when ``done_total`` is not what the collector wrote
        there, or when a counter is more than one a nanosecond since the
        area was made, on every CPU (``now_ns``: CLOCK_MONOTONIC; None: now)."""
        head = self._pread(_HEADER_BYTES, 0)
        changed = [at + i for (at, n), was in zip(_FIXED, self._fixed)
                   for i in range(n) if head[at + i] != was[i]]
        if changed:
            return (f"fields it writes once, when it makes the area, changed after it was "
                    f"handed over (at byte {changed[0]} of the header"
                    f"{f', {len(changed)} bytes in all' if len(changed) > 1 else ''})")
        done_total = struct.unpack_from("<Q", head, _DONE_TOTAL)[0]
        if self.give_back_failed is None and done_total != self._done_total:
            return (f"its count of segments the collector gave back is not the "
                    f"{self._done_total} the collector wrote there")
        now = time.monotonic_ns() if now_ns is None else now_ns
        life = now - self.ns0 if 0 < self.ns0 <= now else now
        cpus = os.cpu_count() or 1
        for at, what in _COUNTERS:
            count = struct.unpack_from("<Q", head, at)[0]
            if count > life * cpus:
                return (f"its count of {what} is more than one a nanosecond on each of "
                        f"{cpus} CPUs in the area's {life / 1e9:.1f} s")
        return None

    @property
    def lost(self) -> int:
        """Events the process could not store because segments waited for
        the collector (it fell behind)."""
        return self._word(_LOST)

    @property
    def lost_owned(self) -> int:
        """Events the process could not store because every segment was
        owned by a live thread (more live threads than segments)."""
        return self._word(_LOST_OWNED)

    @property
    def lost_forked(self) -> int:
        """Events of children made by a raw fork or clone system call (no
        atfork handler ran, so they had no area of their own)."""
        return self._word(_LOST_FORKED)

    @property
    def exited(self) -> bool:
        return bool(struct.unpack("<I", self._pread(4, _EXITED))[0])

    def _anchor(self) -> tuple[int, int]:
        # A seqlock: three reads, in this order (each pread is a copy of its
        # own, so the second cannot be seen before the first).
        for _ in range(1000):
            seq = self._word(_ANCHOR)
            tsc1, ns1 = struct.unpack("<QQ", self._pread(16, _ANCHOR + 8))
            if seq % 2 == 0 and self._word(_ANCHOR) == seq:
                return tsc1, ns1
        return self.tsc0, self.ns0

    def _to_ns(self, ev: np.ndarray) -> None:
        raw = (ev["flags"] & RAW_TSC) != 0
        if not raw.any():
            return
        tsc1, ns1 = self._anchor()
        rate = None
        baseline = tsc1 - self.tsc0
        if baseline > 0 and ns1 > self.ns0:
            rate = (ns1 - self.ns0) / baseline
            if baseline > TraceArea._best_baseline:
                TraceArea._best_baseline = baseline
                TraceArea.best_ns_per_tick = rate
        if baseline < 10_000_000:  # under a few ms: too short to trust
            # (a unit rate, the last resort, put a starved process's first
            # batch far ahead of its true time, and every later one there)
            rate = TraceArea.machine_ns_per_tick or TraceArea.best_ns_per_tick or rate
        if rate is None:
            rate = 1.0
        ticks = ev["timestamp_ns"][raw].astype(np.float64) - float(tsc1)
        with np.errstate(all="ignore"):  # a hostile anchor: nonsense stamps, no exception
            ev["timestamp_ns"][raw] = (ns1 + ticks * rate).astype(np.int64).astype(np.uint64)
        ev["flags"][raw] &= ~np.uint32(RAW_TSC)
        # Batches leave in causal order, but each is converted with the rate
        # and anchor known when it is read, which move (a young area starts
        # on a borrowed or a unit rate): a later batch could map before an
        # earlier one, and the time-ordered output would then put a FREE
        # before its ALLOC.  Stamps never step back within an area.
        ts = np.maximum.accumulate(ev["timestamp_ns"])
        np.maximum(ts, np.uint64(self._last_ns), out=ts)
        ev["timestamp_ns"] = ts
        self._last_ns = int(ts[-1])

    # ----------------------------------------------------------------- read

    def _descriptors(self, used: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One look: states, then claims, then published counts (in that
        order: see trace_proto.h), published clamped to a segment."""
        st = self._load("state", used)
        cl = self._load("claim", used)
        pb = np.minimum(self._load("published", used), np.uint64(SEG_EVENTS))
        return st, cl, pb

    def read(self, final: bool = False, limit: int = 4096) -> np.ndarray:
        """What is new (at most ``limit`` events), in order.
        ``final``: the process is gone - everything, no horizon."""
        used = min(self._word(_FRESH), self.nseg)
        if used == 0:
            return np.empty(0, EVENT_DTYPE)
        # Pass H (state before claim before published: see trace_proto.h).
        st, cl, pb = self._descriptors(used)
        valid = (st == SEG_OWNED) | (st == SEG_CLOSED)
        fresh = valid & (cl != self.rd_claim[:used])
        self.rd_claim[:used][fresh] = cl[fresh]
        self.rd_at[:used][fresh] = 0
        self.rd_last[:used][fresh] = 0
        pb = np.where(valid, pb, self.rd_at[:used])
        horizon = None
        if not final:
            # Pass G: what appeared since H holds back events at or past
            # its smallest stamp.
            # (A segment taken fresh since H counts too: `fresh` again.)
            used2 = min(self._word(_FRESH), self.nseg)
            st2, cl2, pb2 = self._descriptors(used2)
            valid2 = (st2 == SEG_OWNED) | (st2 == SEG_CLOSED)
            start = np.zeros(used2, np.uint64)
            same = valid & (cl2[:used] == cl)
            start[:used] = np.where(same, pb, 0)
            grew = np.nonzero(valid2 & (pb2 > start))[0]
            for i in grew:
                t = self._stamp(int(i), int(start[i]))
                if horizon is None or t < horizon:
                    horizon = t
        todo = np.nonzero(pb > self.rd_at[:used])[0]
        # At most `limit` events, cut by stamp, not by segment: taking one
        # segment whole and leaving another could hand out an ALLOC before
        # the FREE it depends on.  The cut is the limit-th smallest pending
        # stamp; only segments whose first pending stamp is below it (the
        # ones overlapping in time, a few per thread) need looking at.
        # What bounds a segment's first pending stamp from below comes from
        # the descriptors (its first event's stamp, the last one taken):
        # reading every segment's events would copy the whole backlog.
        rows: dict[int, np.ndarray] = {}

        def pending(i: int, n: int) -> np.ndarray:
            got = rows.get(i)
            if got is None or len(got) < n:
                got = rows[i] = self._rows(i, int(self.rd_at[i]), n)
            return got[:n]

        if len(todo):
            at = self.rd_at[todo].astype(np.int64)
            firsts = np.maximum(self._load("first", used)[todo], self.rd_last[todo])
            order = np.argsort(firsts, kind="stable")
            todo, at, firsts = todo[order], at[order], firsts[order]
            lengths = np.minimum(pb[todo].astype(np.int64) - at, limit)
            take = int(np.searchsorted(np.cumsum(lengths), limit)) + 1
            if take < len(todo) or lengths.sum() > limit:
                for _ in range(2):  # widen once to the segments below the cut
                    stamps = np.concatenate([pending(int(i), int(n))["timestamp_ns"]
                                             for i, n in zip(todo[:take], lengths[:take])])
                    k = min(limit, len(stamps)) - 1
                    cut = int(np.partition(stamps, k)[k]) + 1  # up to the k-th, ties too
                    wider = int(np.searchsorted(firsts, cut, "left"))
                    if wider <= take:
                        break
                    take = wider
                horizon = cut if horizon is None else min(horizon, cut)
                todo = todo[:take]
        parts = []
        for i in todo:
            a, end = int(self.rd_at[i]), int(pb[i])
            head = pending(int(i), min(end - a, limit))
            if horizon is not None:
                head = head[:int(np.searchsorted(head["timestamp_ns"], horizon, "left"))]
            if len(head):
                parts.append(head)
                self.rd_at[i] = a + len(head)
                self.rd_last[i] = head["timestamp_ns"][-1]
        self._give_back(st, cl, pb, used)
        if not parts:
            return np.empty(0, EVENT_DTYPE)
        ev = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            ev = ev[np.argsort(ev["timestamp_ns"], kind="stable")]
        self._to_ns(ev)
        # The process wrote into an ALLOC's seq 1 + its stack record's index
        # (bits 0-31) and 1 + its Python record's word offset (bits 32-63).
        self.last_stacks = (self._stacks(ev["seq"] & np.uint64(0xFFFFFFFF)) if self.stack_depth
                            else None)
        self.last_python = (self.python.stacks(ev["seq"] >> np.uint64(32), ev["kind"] == 1)
                            if self.python is not None else None)
        ev["seq"] = np.arange(self.seq, self.seq + len(ev), dtype=np.uint64)
        self.seq += len(ev)
        self.taken += len(ev)
        return ev

    def _give_back(self, st: np.ndarray, cl: np.ndarray, pb: np.ndarray, used: int) -> None:
        # Candidates from the H pass, then each one looked at again now: st
        # was read before cl and pb, so a segment CLOSED in st may since
        # have been taken again (its old claim was given back) and be OWNED
        # under the newer claim that cl shows - still being written.  Only a
        # segment that is CLOSED now, under the claim read, with nothing
        # published past what was read, is finished: CLOSED is stored after
        # the owner's last publish, and nobody takes it again until done
        # says so.
        if self.give_back_failed is not None:
            return
        done = self._load("done", used)
        maybe = np.nonzero((st == SEG_CLOSED) & (self.rd_at[:used] == pb) & (done != cl))[0]
        if not len(maybe):
            return
        st2, cl2, pb2 = self._descriptors(used)
        finished = [int(i) for i in maybe
                    if st2[i] == SEG_CLOSED and cl2[i] == cl[i] and pb2[i] == self.rd_at[i]]
        try:
            for i in finished:
                # Pages first, then done: once done says so, the producer
                # may take the segment again, and a punch then would erase it.
                if self._punch and self._mm is not None:
                    try:
                        self._mm.madvise(mmap.MADV_REMOVE, self.events_off + i * _SEG_BYTES,
                                         _SEG_BYTES)
                    except OSError:  # (gVisor, say): the pages stay, within the area's size
                        self._punch = False
                os.pwrite(self.fd, struct.pack("<Q", int(cl[i])), self._off["done"] + 8 * i)
            if finished:
                self._done_total += len(finished)
                os.pwrite(self.fd, struct.pack("<Q", self._done_total), _DONE_TOTAL)
        except OSError as exc:  # sealed against writes, say: the area only fills
            self.give_back_failed = exc.strerror or str(exc)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
