"""``memhook trace -f memviz``: a pickle in the snapshot format of
PyTorch's memory_viz (``torch.cuda.memory._snapshot()``): ``segments`` and
``device_traces``."""

from __future__ import annotations

import collections
import pickle
from typing import IO, Any

from ..ledger import ALLOC, CONTEXT_RESET, MEM_CUDA_HOST, Ledger, Process
from .base import Writer

__all__ = ["MemvizWriter"]


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
    trace.  The live set is kept whole.  Pinned host memory is not GPU
    memory and is left out; an unknown device (-1) is drawn as device 0.
    All processes share one address space per device in this format.
    """

    binary = True

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int,
                 max_entries: int = 100_000) -> None:
        super().__init__(out, ledger, t0_ns)
        self.ring: collections.deque[tuple] = collections.deque(maxlen=max_entries)
        self.live: dict[tuple[int, int], tuple[int, int, tuple]] = {}
        self.frames: dict[tuple, list[dict]] = {}
        self.commands: dict[int, str] = {}
        self.dropped = 0

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

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        ring = self.ring
        live = self.live
        for row in rows:
            _, address, size, ts, kind, fn, mem_type, device, pid, _, result, flags, caller, st, \
                python = row
            where = (python, *(st or (caller,)))
            if mem_type == MEM_CUDA_HOST:
                continue
            dev = max(device, 0)
            time_us = ts // 1000
            if flags & CONTEXT_RESET and not result:  # the device's segments are gone
                for key in [k for k, v in live.items() if k[0] == pid and
                            (device < 0 or v[0] == dev)]:
                    dev_, size_, fkey = live.pop(key)
                    ring.append((dev_, "free_completed", key[1], size_, time_us, fkey))
                    ring.append((dev_, "segment_free", key[1], size_, time_us, fkey))
                continue
            if kind == ALLOC:
                if result:
                    if result == 2:  # CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation
                        ring.append((dev, "oom", 0, size, time_us, (pid, fn, where)))
                    continue
                if not address or fn in self.ledger.globals_:
                    continue
                fkey = (pid, fn, where)
                live[(pid, address)] = (dev, size, fkey)
                ring.append((dev, "segment_alloc", address, size, time_us, fkey))
                ring.append((dev, "alloc", address, size, time_us, fkey))
            elif not result:
                old = live.pop((pid, address), None)
                if old is None:
                    continue
                dev, size, fkey = old
                ring.append((dev, "free_requested", address, size, time_us, fkey))
                ring.append((dev, "free_completed", address, size, time_us, fkey))
                ring.append((dev, "segment_free", address, size, time_us, fkey))

    def snapshot(self) -> dict:
        """The snapshot as PyTorch's ``_snapshot()`` shapes it."""
        devices = {e[0] for e in self.ring} | {v[0] for v in self.live.values()}
        ndev = max(devices) + 1 if devices else 1
        traces: list[list[dict]] = [[] for _ in range(ndev)]
        for dev, action, addr, size, time_us, fkey in self.ring:
            entry = {"action": action, "addr": addr, "size": size, "stream": 0,
                     "time_us": time_us, "frames": self._frames(*fkey)}
            if action == "oom":
                entry["device_free"] = 0
            traces[dev].append(entry)
        segments = []
        for (_, address), (dev, size, fkey) in sorted(self.live.items(),
                                                       key=lambda kv: (kv[1][0], kv[0][1])):
            frames = self._frames(*fkey)
            segments.append({
                "device": dev, "address": address, "total_size": size,
                "allocated_size": size, "active_size": size, "requested_size": size,
                "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                "is_expandable": False, "frames": frames,
                "blocks": [{"address": address, "size": size, "requested_size": size,
                            "state": "active_allocated", "frames": frames}],
            })
        return {"segments": segments, "device_traces": traces}

    def close(self, summary_text: str) -> None:
        pickle.dump(self.snapshot(), self.out, protocol=4)
        self.out.flush()
