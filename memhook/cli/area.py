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
"""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np

from .protocol import EVENT_DTYPE, VERSION, ProtocolError
from .pyframes import PyRecords, PyStack

__all__ = ["AREA_HEADER", "AREA_MAGIC", "SEG_CLOSED", "SEG_EVENTS", "SEG_OWNED", "TraceArea"]

AREA_MAGIC = 0x41544D48
SEG_EVENTS = 256
SEG_FREE, SEG_CLAIMING, SEG_OWNED, SEG_CLOSED = 0, 1, 2, 3
RAW_TSC = 0x80000000

AREA_HEADER = struct.Struct("<IIIIQQQQQQQiIQQQQQQ")
"""mh_trace_area's fields up to first_off (128 bytes); the counters follow."""
_FRESH, _LOST, _DONE_TOTAL, _EXITED, _ANCHOR = 128, 152, 192, 76, 96
RECORDS = struct.Struct("<QQQQQQQIIQQQQQQQQII")
"""modules_off, modules_cap, modules_used, modules_lost, stacks_off,
stacks_cap, stacks_next, stack_depth, py_depth, py_off, py_cap, py_used,
py_lost, codes_off, codes_cap, codes_used, codes_lost, py_version,
reserved2 (at offset 256)."""
_RECORDS_AT, _MODULES_USED, _MODULES_LOST, _STACKS_NEXT = 256, 272, 280, 304
_PY_LOST, _CODES_LOST, _PY_VERSION = 344, 376, 384
_SEG_BYTES = SEG_EVENTS * EVENT_DTYPE.itemsize


class TraceArea:
    """One process image's trace area, mapped from its memfd (the fd is
    closed here; the mapping keeps the memory)."""

    best_ns_per_tick: float | None = None
    """The rate of the longest anchor baseline any area had (one TSC for the
    whole machine): for an area whose process lived too short to have one."""
    _best_baseline = 0

    def __init__(self, fd: int) -> None:
        self._punch = True  # give read segments' pages back (MADV_REMOVE) while it works
        self._last_ns = 0  # the newest stamp handed out: they never step back
        try:
            size = os.fstat(fd).st_size
            if size < 4096:
                raise ProtocolError(f"trace area of {size} bytes is smaller than its header")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        (magic, version, seg_events, nseg, asize, state_off, tid_off, claim_off, pub_off,
         done_off, events_off, self.pid, _, self.tsc0, self.ns0, _, _, _,
         first_off) = AREA_HEADER.unpack_from(self.mm)
        if magic != AREA_MAGIC or version != VERSION or seg_events != SEG_EVENTS:
            self.mm.close()
            raise ProtocolError(f"not a version-{VERSION} trace area (magic {magic:#x}, "
                                f"version {version}, {seg_events} events a segment)")
        if asize != size or events_off + nseg * _SEG_BYTES > size:
            self.mm.close()
            raise ProtocolError(f"trace area of {size} bytes does not hold its {nseg} segments")
        self.nseg = nseg
        self.buffer_mib = nseg * _SEG_BYTES / 2**20
        self.events_off = events_off
        self._header = np.frombuffer(self.mm, np.uint64, 64, 0)
        self.state = np.frombuffer(self.mm, np.uint32, nseg, state_off)
        self.tid = np.frombuffer(self.mm, np.int32, nseg, tid_off)
        self.claim = np.frombuffer(self.mm, np.uint64, nseg, claim_off)
        self.published = np.frombuffer(self.mm, np.uint64, nseg, pub_off)
        self.done = np.frombuffer(self.mm, np.uint64, nseg, done_off)
        self.first = np.frombuffer(self.mm, np.uint64, nseg, first_off)
        self.events = np.frombuffer(self.mm, EVENT_DTYPE, nseg * SEG_EVENTS,
                                    events_off).reshape(nseg, SEG_EVENTS)
        self.rd_claim = np.zeros(nseg, np.uint64)  # the generation read
        self.rd_at = np.zeros(nseg, np.uint64)     # events of it taken out
        self.rd_last = np.zeros(nseg, np.uint64)   # the stamp of the last one
        self.seq = 0
        self.taken = 0
        (self.modules_off, self.modules_cap, _, _, self.stacks_off, self.stacks_cap, _,
         self.stack_depth, self.py_depth, py_off, py_cap, _, _, codes_off, codes_cap, _, _, _,
         _) = RECORDS.unpack_from(self.mm, _RECORDS_AT)
        records_end = max(self.stacks_off + self.stacks_cap * (self.stack_depth + 1) * 8,
                          py_off + py_cap if self.py_depth else 0,
                          codes_off + codes_cap if self.py_depth else 0)
        if records_end > size:
            self.mm.close()
            raise ProtocolError(f"trace area of {size} bytes does not hold its frame records")
        self.python = (PyRecords(self.mm, py_off, py_cap, self.py_depth, codes_off, codes_cap,
                                 _PY_VERSION) if self.py_depth else None)
        """--python: the area's Python and code records, named."""
        self.modules_read = 0
        self.last_stacks: list[tuple[int, ...] | None] | None = None
        """After :meth:`read` with --stacks: each event's return addresses
        (innermost first), or None (a FREE, or no record)."""
        self.last_python: list[PyStack | None] | None = None
        """After :meth:`read` with --python: each event's Python frames, or
        None (a FREE, or no record)."""

    def read_modules(self) -> bytes:
        """Module record bytes written since the last call (complete records
        only: the process publishes modules_used after writing one)."""
        used = min(self._word(_MODULES_USED), self.modules_cap)
        if used <= self.modules_read:
            return b""
        data = self.mm[self.modules_off + self.modules_read:self.modules_off + used]
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
        out: list[tuple[int, ...] | None] = []
        width = (self.stack_depth + 1) * 8
        for rid in ids.tolist():
            if rid == 0 or rid > self.stacks_cap:
                out.append(None)
                continue
            at = self.stacks_off + (rid - 1) * width
            rec = struct.unpack_from(f"<{self.stack_depth + 1}Q", self.mm, at)
            n = min(rec[0], self.stack_depth)
            out.append(rec[1:1 + n])
        return out

    # ---------------------------------------------------------------- header

    def _word(self, offset: int) -> int:
        return int(self._header[offset // 8])

    @property
    def lost(self) -> int:
        """Events the process could not store (its area was full)."""
        return self._word(_LOST)

    @property
    def exited(self) -> bool:
        return bool(struct.unpack_from("<I", self.mm, _EXITED)[0])

    def _anchor(self) -> tuple[int, int]:
        for _ in range(1000):
            seq, tsc1, ns1 = struct.unpack_from("<QQQ", self.mm, _ANCHOR)
            if seq % 2 == 0 and struct.unpack_from("<Q", self.mm, _ANCHOR)[0] == seq:
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
        if baseline < 10_000_000 and TraceArea.best_ns_per_tick is not None:
            rate = TraceArea.best_ns_per_tick  # under a few ms: too short to trust
        if rate is None:
            rate = 1.0
        ticks = ev["timestamp_ns"][raw].astype(np.float64) - float(tsc1)
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

    def read(self, final: bool = False, limit: int = 4096) -> np.ndarray:
        """What is new (at most ``limit`` events), in order.
        ``final``: the process is gone - everything, no horizon."""
        used = min(self._word(_FRESH), self.nseg)
        if used == 0:
            return np.empty(0, EVENT_DTYPE)
        # Pass H (state before claim before published: see trace_proto.h).
        st = self.state[:used].copy()
        cl = self.claim[:used].copy()
        pb = self.published[:used].copy()
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
            st2 = self.state[:used2].copy()
            cl2 = self.claim[:used2].copy()
            pb2 = self.published[:used2].copy()
            valid2 = (st2 == SEG_OWNED) | (st2 == SEG_CLOSED)
            start = np.zeros(used2, np.uint64)
            same = valid & (cl2[:used] == cl)
            start[:used] = np.where(same, pb, 0)
            grew = np.nonzero(valid2 & (pb2 > start))[0]
            for i in grew:
                t = int(self.events[i, int(start[i])]["timestamp_ns"])
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
        # touching every segment's events would fault the whole backlog in.
        if len(todo):
            at = self.rd_at[todo].astype(np.int64)
            firsts = np.maximum(self.first[todo], self.rd_last[todo])
            order = np.argsort(firsts, kind="stable")
            todo, at, firsts = todo[order], at[order], firsts[order]
            lengths = np.minimum(pb[todo].astype(np.int64) - at, limit)
            take = int(np.searchsorted(np.cumsum(lengths), limit)) + 1
            if take < len(todo) or lengths.sum() > limit:
                for _ in range(2):  # widen once to the segments below the cut
                    stamps = np.concatenate([self.events["timestamp_ns"][i, a:a + n] for i, a, n
                                             in zip(todo[:take], at[:take], lengths[:take])])
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
            head = self.events[i, a:min(end, a + limit)]
            if horizon is not None:
                head = head[:int(np.searchsorted(head["timestamp_ns"], horizon, "left"))]
            if len(head):
                parts.append(head.copy())
                self.rd_at[i] = a + len(head)
                self.rd_last[i] = parts[-1]["timestamp_ns"][-1]
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
        # was copied before cl and pb, so a segment CLOSED in st may since
        # have been taken again (its old claim was given back) and be OWNED
        # under the newer claim that cl shows - still being written.  Only a
        # segment that is CLOSED now, under the claim read, with nothing
        # published past what was read, is finished: CLOSED is stored after
        # the owner's last publish, and nobody takes it again until done
        # says so.
        maybe = np.nonzero((st == SEG_CLOSED) & (self.rd_at[:used] == pb)
                           & (self.done[:used] != cl))[0]
        finished = [i for i in maybe
                    if self.state[i] == SEG_CLOSED and self.claim[i] == cl[i]
                    and self.published[i] == self.rd_at[i]]
        for i in finished:
            # Pages first, then done: once done says so, the producer may
            # take the segment again, and a punch then would erase it.
            if self._punch:
                try:
                    self.mm.madvise(mmap.MADV_REMOVE, self.events_off + int(i) * _SEG_BYTES,
                                    _SEG_BYTES)
                except OSError:  # (gVisor, say): the pages stay, within the area's size
                    self._punch = False
            self.done[i] = cl[i]
        if len(finished):
            self._header[_DONE_TOTAL // 8] += np.uint64(len(finished))

    def close(self) -> None:
        del self._header, self.state, self.tid, self.claim, self.published, self.done, self.first
        del self.events
        self.mm.close()
