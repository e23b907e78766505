"""``memhook trace -f memviz``: a pickle in the snapshot format of
PyTorch's memory_viz (``torch.cuda.memory._snapshot()``): ``segments`` and
``device_traces``."""

from __future__ import annotations

import struct
from typing import IO, Any

import numpy as np

from ..ledger import ALLOC, CONTEXT_RESET, HOST_KEY, MEM_CUDA_HOST, Ledger, Process
from ..oom import OomReport
from .base import Writer
from .pickle_stream import PickleStream

__all__ = ["MemvizWriter", "write_oom_snapshot"]

ACTIONS = ("segment_alloc", "alloc", "free_requested", "free_completed", "segment_free", "oom")
(_SEGMENT_ALLOC, _ALLOC, _FREE_REQUESTED, _FREE_COMPLETED, _SEGMENT_FREE,
 _OOM) = range(len(ACTIONS))

_ENTRY = struct.Struct("<QQQiB")
"""A ring entry: address, size, time_us, device, action (an index of ACTIONS)."""
_ENTRY_DTYPE = np.dtype([("addr", "<u8"), ("size", "<u8"), ("time_us", "<u8"),
                         ("device", "<i4"), ("action", "u1")])
_KEYS_MAX = 100_000  # distinct call sites interned before the table starts afresh
_CHUNK = 1024        # entries turned into Python values at a time, when written


class MemvizWriter(Writer):
    """PyTorch memory_viz snapshot (``pickle`` of ``segments`` + ``device_traces``).

    Each successful GPU allocation is a segment holding one block (the
    driver handed it out whole): ``segment_alloc`` + ``alloc`` in the trace;
    its free is ``free_requested`` + ``free_completed`` + ``segment_free``;
    a failed allocation with CUDA_ERROR_OUT_OF_MEMORY / cudaErrorMemoryAllocation
    is ``oom``.  Frames: the Python frames of --python, innermost first
    (memory_viz shows the user's lines first), then the CUDA function, the
    native frames of --stacks (or the caller alone), innermost first, then
    the process.  The final ``segments`` are the allocations never freed,
    which the page shows as still allocated at the end.

    Bounded memory: the trace is a ring of the last ``max_entries`` entries
    (default 100,000, PyTorch's recorder works the same way); older entries
    fall off and the page treats what they freed as allocated before the
    trace.  An entry is a fixed-size record (:data:`_ENTRY`) plus a
    reference to its call site, which is kept once however many entries
    name it; the live set is kept whole.  The snapshot is written at
    :meth:`finish` by a :class:`~.pickle_stream.PickleStream`, a chunk of
    entries at a time, never built whole; each call site's frames are
    written once and shared by every entry that names it.  Pinned host
    memory is not GPU memory and is left out; an unknown device (-1) is
    drawn as device 0.  All processes share one address space per device in
    this format.
    """

    binary = True

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int,
                 max_entries: int = 100_000) -> None:
        super().__init__(out, ledger, t0_ns)
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.max_entries = max_entries
        self._ring = bytearray()         # up to max_entries _ENTRY records
        self._sites: list[tuple] = []    # each record's call site (pid, function, where)
        self._head = 0                   # the oldest record, once the ring is full
        self._interned: dict[tuple, tuple] = {}
        self.live: dict[tuple[int, int], tuple[int, int, tuple]] = {}
        self.frames: dict[tuple, list[dict]] = {}
        self.commands: dict[int, str] = {}
        self._written = False

    def process_started(self, proc: Process) -> None:
        if proc.hello is not None:
            self.commands[proc.pid] = proc.hello.command

    def _frames(self, pid: int, fn: int, where: tuple = (None,)) -> list[dict]:
        """PyTorch's frame dicts (filename, line, name): the Python frames
        (--python), innermost first, then the CUDA function, the native
        frames (--stacks) or the caller, innermost first, and the process.
        ``where`` is (Python frames or None, native frames...).  Cached per
        (pid, function, frames)."""
        key = (pid, fn, where)
        frames = self.frames.get(key)
        if frames is None:
            command = self.commands.get(pid, "?")
            python = where[0]
            frames = [{"filename": f.file, "line": f.line, "name": f.function}
                      for f in (python.frames if python is not None else ())]
            frames.append({"filename": "CUDA", "line": 0, "name": self.ledger.function_name(fn)})
            for c in where[1:]:
                if c is None:
                    continue
                # Named as chrome names a frame (Caller.short: lib!symbol+0xoff, or
                # lib+0xoff past the object's base where it has no symbol).
                frames.append({"filename": c.object or "?", "line": 0, "name": c.short})
            frames.append({"filename": f"pid {pid}: {command}", "line": 0, "name": "process"})
            if len(self.frames) > 100_000:
                self.frames.clear()
            self.frames[key] = frames
        return frames

    # ------------------------------------------------------------ the ring

    def _site(self, key: tuple) -> tuple:
        """``key``, or the equal one already held: one object per call site."""
        held = self._interned.get(key)
        if held is None:
            if len(self._interned) >= _KEYS_MAX:
                self._interned.clear()  # (what the ring holds stays; only sharing restarts)
            self._interned[key] = held = key
        return held

    def _push(self, dev: int, action: int, address: int, size: int, time_us: int,
              site: tuple) -> None:
        if len(self._sites) < self.max_entries:
            self._ring += _ENTRY.pack(address, size, time_us, dev, action)
            self._sites.append(site)
            return
        head = self._head
        _ENTRY.pack_into(self._ring, head * _ENTRY.size, address, size, time_us, dev, action)
        self._sites[head] = site
        self._head = head + 1 if head + 1 < self.max_entries else 0

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        push = self._push
        live = self.live
        for row in rows:
            _, address, size, ts, kind, fn, mem_type, device, pid, _, result, flags, caller, st, \
                python = row
            if mem_type == MEM_CUDA_HOST:
                continue
            dev = max(device, 0)
            time_us = ts // 1000
            if flags & CONTEXT_RESET and not result:  # the device's segments are gone
                for key in [k for k, v in live.items() if k[0] == pid and
                            (device < 0 or v[0] == dev)]:
                    dev_, size_, site = live.pop(key)
                    push(dev_, _FREE_COMPLETED, key[1], size_, time_us, site)
                    push(dev_, _SEGMENT_FREE, key[1], size_, time_us, site)
                continue
            if kind == ALLOC:
                if result:
                    if result == 2:  # CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation
                        push(dev, _OOM, 0, size, time_us,
                             self._site((pid, fn, (python, *(st or (caller,))))))
                    continue
                if not address or fn in self.ledger.globals_:
                    continue
                site = self._site((pid, fn, (python, *(st or (caller,)))))
                live[(pid, address)] = (dev, size, site)
                push(dev, _SEGMENT_ALLOC, address, size, time_us, site)
                push(dev, _ALLOC, address, size, time_us, site)
            elif not result:
                old = live.pop((pid, address), None)
                if old is None:
                    continue
                dev, size, site = old
                push(dev, _FREE_REQUESTED, address, size, time_us, site)
                push(dev, _FREE_COMPLETED, address, size, time_us, site)
                push(dev, _SEGMENT_FREE, address, size, time_us, site)

    def _in_order(self) -> tuple[np.ndarray, np.ndarray]:
        """(the ring's records, the indices of them oldest first, grouped by
        device): a view of the ring, no copy of the records."""
        records = np.frombuffer(self._ring, _ENTRY_DTYPE)
        order = np.roll(np.arange(len(records), dtype=np.int32), -self._head)
        devices = records["device"]
        if len(devices) and devices.min() != devices.max():  # (else: already grouped)
            order = order[np.argsort(devices[order], kind="stable")]
        return records, order

    # ------------------------------------------------------------- writing

    def _write_frames(self, stream: PickleStream, site: tuple) -> None:
        stream.shared(("frames", site), lambda: self._frames(*site))

    def _write_entry(self, stream: PickleStream, addr: int, size: int, time_us: int,
                     action: int, site: tuple) -> None:
        stream.begin_dict()
        stream.text("action")
        stream.text(ACTIONS[action])
        for key, value in (("addr", addr), ("size", size), ("stream", 0), ("time_us", time_us)):
            stream.text(key)
            stream.value(value)
        stream.text("frames")
        self._write_frames(stream, site)
        if action == _OOM:
            stream.text("device_free")
            stream.value(0)
        stream.end_dict()

    def _write_segment(self, stream: PickleStream, dev: int, address: int, size: int,
                       site: tuple) -> None:
        stream.begin_dict()
        for key, value in (("device", dev), ("address", address), ("total_size", size),
                           ("allocated_size", size), ("active_size", size),
                           ("requested_size", size), ("stream", 0), ("segment_type", "large"),
                           ("segment_pool_id", (0, 0)), ("is_expandable", False)):
            stream.text(key)
            stream.value(value)
        stream.text("frames")
        self._write_frames(stream, site)
        stream.text("blocks")
        stream.begin_list()
        stream.begin_dict()
        for key, value in (("address", address), ("size", size), ("requested_size", size),
                           ("state", "active_allocated")):
            stream.text(key)
            stream.value(value)
        stream.text("frames")
        self._write_frames(stream, site)
        stream.end_dict()
        stream.end_list()
        stream.end_dict()

    def write_snapshot(self, out: IO[bytes]) -> None:
        """The snapshot as PyTorch's ``_snapshot()`` shapes it, a pickle
        written to ``out`` as it is made."""
        records, order = self._in_order()
        devices = records["device"]
        highest = [v[0] for v in self.live.values()]
        if len(devices):
            highest.append(int(devices.max()))
        ndev = max(highest, default=0) + 1
        stream = PickleStream(out)
        stream.begin_dict()
        stream.text("segments")
        stream.begin_list()
        for (_, address), (dev, size, site) in sorted(self.live.items(),
                                                       key=lambda kv: (kv[1][0], kv[0][1])):
            self._write_segment(stream, dev, address, size, site)
        stream.end_list()
        stream.text("device_traces")
        stream.begin_list()
        at = 0  # in order: where the next device's records begin
        sorted_devices = devices[order]
        for dev in range(ndev):
            end = at + int(np.searchsorted(sorted_devices[at:], dev, "right"))
            stream.begin_list()
            sites = self._sites
            for lo in range(at, end, _CHUNK):
                idx = order[lo:min(lo + _CHUNK, end)]
                chunk = records[idx]
                for i, addr, size, time_us, action in zip(
                        idx.tolist(), chunk["addr"].tolist(), chunk["size"].tolist(),
                        chunk["time_us"].tolist(), chunk["action"].tolist()):
                    self._write_entry(stream, addr, size, time_us, action, sites[i])
            stream.end_list()
            at = end
        stream.end_list()
        stream.end_dict()
        stream.close()

    def finish(self) -> None:
        if not self._written:
            self._written = True
            self.write_snapshot(self.out)
            self.out.flush()

    def close(self, summary_text: str) -> None:
        self.finish()  # (a caller that never called finish)
        self.out.flush()


def write_oom_snapshot(out: IO[bytes], ledger: Ledger, oom: OomReport) -> None:
    """``memhook trace --oom-snapshot``: the snapshot of what was live on
    the device of ``oom`` (a report that kept its live set) when that
    allocation failed, as the segments still allocated, and one ``oom``
    entry (the failed request) in the device's trace."""
    if oom.allocations is None:
        raise ValueError("this OOM report did not keep its live set")
    w = MemvizWriter(out, ledger, 0, max_entries=1)
    for proc in ledger.processes:
        w.process_started(proc)
    for a in oom.allocations:
        if a.device != HOST_KEY:  # (pinned host memory is not drawn; see MemvizWriter)
            site = w._site((a.pid, a.function, (a.python, *(a.stack or (a.caller,)))))
            w.live[(a.pid, a.address)] = (max(a.device, 0), a.size, site)
    r = oom.request
    w._push(max(r.device, 0), _OOM, 0, r.size, r.ts_ns // 1000,
            w._site((r.pid, r.function, (r.python, *(r.stack or (r.caller,))))))
    w.finish()
