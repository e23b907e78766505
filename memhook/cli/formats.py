# %-formatting builds the per-event lines: measured ~25% cheaper than f-strings here.
# ruff: noqa: UP031
"""The output formats of ``memhook trace``: text, jsonl, chrome, memviz.

Every writer streams: it gets each batch of events once, in the order the
collector received them (text, jsonl and memviz: in timestamp order, through
:mod:`memhook.cli.reorder`), and keeps nothing per event - except memviz, whose
history is a bounded ring (like PyTorch's own recorder), see
:class:`MemvizWriter`.

* text   - one line per event, written as it arrives, then the summary;
* jsonl  - one JSON object per event, with the keys
  ``kind`` ("alloc"/"free"), ``function``, ``address``, ``size``,
  ``mem_type`` (name), ``device``, ``pid``, ``tid``, ``ts_ns``
  (CLOCK_MONOTONIC), ``result``;
* chrome - Chrome trace / Perfetto JSON (Trace Event Format): an instant
  event per call on its process and thread, and a counter track
  "live bytes <device>" per device (pinned host memory on its own track);
* memviz - a pickle in the snapshot format of PyTorch's memory_viz
  (``torch.cuda.memory._snapshot()``): ``segments`` and ``device_traces``.
"""

from __future__ import annotations

import codecs
import collections
import json
import pickle
import time
from typing import IO, Any

from .._symbolize import Caller
from .pyframes import PyStack

from .ledger import (
    ALLOC,
    CONTEXT_RESET,
    MEM_CUDA_HOST,
    Ledger,
    Process,
    device_label,
    human_size,
    mem_type_name,
)

__all__ = ["FORMATS", "TEXT_ERRORS", "ChromeWriter", "JsonlWriter", "MemvizWriter", "TextWriter",
           "Writer", "make_writer"]

FORMATS = ("text", "jsonl", "chrome", "memviz")
SIZE_UNKNOWN = 0x1

TEXT_ERRORS = "memhook-bytes"
"""The ``errors`` of every text stream memhook trace writes: a name that
was not UTF-8 (a latin-1 file name in a command line, decoded with
surrogateescape as :func:`os.fsdecode` does) goes out as the bytes it was;
anything else the stream's encoding cannot hold, as a backslash escape.
Never an exception."""


def _as_bytes(exc: UnicodeError) -> tuple[str | bytes, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = bytearray()
    for ch in exc.object[exc.start:exc.end]:
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:
            out.append(cp - 0xDC00)  # the byte surrogateescape decoded it from
        else:
            out += ch.encode("ascii", "backslashreplace")
    return bytes(out), exc.end


codecs.register_error(TEXT_ERRORS, _as_bytes)


class Writer:
    """Base: what the collector calls, in this order."""

    binary = False

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int) -> None:
        self.out = out
        self.ledger = ledger
        self.t0_ns = t0_ns

    def process_started(self, proc: Process) -> None:
        pass

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        pass

    def process_ended(self, proc: Process, changes: list[tuple],
                      ts_ns: int | None = None) -> None:
        """``proc`` is gone (at ``ts_ns``, CLOCK_MONOTONIC; None: now)."""

    def tick(self) -> None:
        """Called every collector turn, events or not."""

    def close(self, summary_text: str) -> None:
        """The trace is over (``summary_text`` is the printed summary)."""
        self.out.flush()

    @property
    def summary_inline(self) -> bool:
        """True when the summary belongs in this output (text)."""
        return False


# ------------------------------------------------------------------ text

class TextWriter(Writer):
    """``  0.012345 [pid/tid] alloc cuMemAlloc_v2  0x... 1 MiB  CUDA  dev 0  ok``

    Behind a :class:`~memhook.cli.reorder.Reorder` in ``memhook trace``, so
    the lines of all processes come in timestamp order."""

    def _rel(self, ns: int) -> str:
        d = max(ns - self.t0_ns, 0)
        return "%4d.%06d" % (d // 1000000000, d % 1000000000 // 1000)

    def process_started(self, proc: Process) -> None:
        h = proc.hello
        if h is None:
            return
        how = "forked" if h.forked else "started"
        hooks = ("hooks failed: " + (h.why or f"errno {h.install_rc}")) if h.install_rc \
            else f"hooks {_mode_name(h.mode)}"
        ns = f"pid {proc.own_pid} in its PID namespace; " if proc.own_pid is not None else ""
        self.out.write(f"{self._rel(h.start_ns)} [{proc.pid}] process {how} ({ns}ppid {h.ppid}; "
                       f"{hooks}): {h.command}\n")
        self.out.flush()

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int) -> None:
        super().__init__(out, ledger, t0_ns)
        self._names = _Padded(ledger.function_name, 28)
        self._types = _Padded(mem_type_name, 12)
        self._sizes = _Padded(human_size, 10, right=True)

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        ledger = self.ledger
        t0 = self.t0_ns
        names, types, sizes = self._names, self._types, self._sizes
        lines: list[str] = []
        append = lines.append
        for _, address, size, ts, kind, fn, mem_type, device, pid, tid, result, flags, caller, \
                _, python in rows:
            # %-formatting: the cheapest way CPython has to build these lines.
            d = ts - t0 if ts > t0 else 0
            append("%4d.%06d [%d/%d] %s %s %#014x %s  %s dev %2d  %s  from %s%s\n" % (
                d // 1000000000, d % 1000000000 // 1000, pid, tid, _KIND_TEXT.get(kind, "?    "),
                names[fn], address,
                "         ?" if (flags & SIZE_UNKNOWN and not size) else sizes[size],
                types[mem_type], device,
                "%s (%d)" % (ledger.error_name(fn, result), result) if result else "ok",
                caller.library if caller is not None else "?",
                "" if python is None else _python_text(python)))
        self.out.write("".join(lines))
        self.out.flush()

    def process_ended(self, proc: Process, changes: list[tuple],
                      ts_ns: int | None = None) -> None:
        if proc.hello is None:
            return
        when = time.monotonic_ns() if ts_ns is None else ts_ns
        self.out.write(f"{self._rel(when)} [{proc.pid}] process "
                       f"{proc.how_ended} ({proc.events} events)\n")
        self.out.flush()

    @property
    def summary_inline(self) -> bool:
        return True

    def close(self, summary_text: str) -> None:
        self.out.write(summary_text)
        self.out.flush()


_KIND_TEXT = {ALLOC: "alloc", 2: "free "}


class _Padded(dict):
    """value -> its text, padded to a width; computed once per value (a
    bounded number of them: functions, types, and the sizes a program uses,
    forgotten when there are too many)."""

    def __init__(self, fmt: Any, width: int, right: bool = False, limit: int = 4096) -> None:
        super().__init__()
        self.fmt, self.width, self.right, self.limit = fmt, width, right, limit

    def __missing__(self, key: int) -> str:
        text = self.fmt(key)
        text = text.rjust(self.width) if self.right else text.ljust(self.width)
        if len(self) >= self.limit:
            self.clear()
        self[key] = text
        return text


def _short(c: Caller | None) -> str:
    return c.short if c is not None else "?"


def _python_text(python: PyStack) -> str:
    """The text line's end with --python: the innermost user frame."""
    f = python.user_frame
    if f is None:
        return "  (no Python: %s)" % python.why
    return "  at %s in %s" % (f.location, f.function)


_PYTHON_CHARS = 32 << 20  # the most text JsonlWriter keeps of Python stacks


def _python_json(python: PyStack) -> str:
    """jsonl's ``python`` (and why it is empty, or ends early)."""
    text = ',"python":' + json.dumps([{"file": f.file, "line": f.line, "function": f.function}
                                      for f in python.frames])
    if python.why:
        text += ',"python_note":' + json.dumps(python.why)
    if python.more:
        text += ',"python_truncated":true'
    return text


def _mode_name(mode: int) -> str:
    names = [n for bit, n in ((1, "bistro"), (2, "reloc")) if mode & bit]
    return ",".join(names) if names else "none"


# ----------------------------------------------------------------- jsonl

def _frame_json(c: Caller | None) -> dict | None:
    if c is None:
        return None
    return {"object": c.object, "symbol": c.symbol, "offset": c.offset, "address": c.address}


class JsonlWriter(Writer):
    """One object per event (the keys are in this module's docstring).  ``caller``:
    ``{"object", "symbol", "offset", "address"}`` (null when unknown);
    with --stacks, ALLOCs have ``stack``, a list of the same, innermost
    first; with --python, ``python``, a list of ``{"file", "line",
    "function"}``, innermost first (line 0: unknown), and where it is empty
    or ends early ``python_note`` says why (``python_truncated``: more
    frames than the depth)."""

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int) -> None:
        super().__init__(out, ledger, t0_ns)
        self._names = _Padded(ledger.function_name, 0)
        self._types = _Padded(mem_type_name, 0)
        self._callers: dict[Caller | None, str] = {}
        self._python: dict[PyStack, str] = {}
        self._python_chars = 0  # what _python holds: bounded, however long the names

    def _caller(self, caller: Caller | None) -> str:
        text = self._callers.get(caller)
        if text is None:
            text = json.dumps(_frame_json(caller))
            if len(self._callers) > 100_000:
                self._callers.clear()
            self._callers[caller] = text
        return text

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        names, types = self._names, self._types
        lines: list[str] = []
        append = lines.append
        pys = self._python
        for _, address, size, ts, kind, fn, mem_type, device, pid, tid, result, _, caller, \
                frames, python in rows:
            # Names are C identifiers: no JSON escaping needed (paths and
            # symbols go through json.dumps).
            stack = ""
            if frames:
                stack = ',"stack":' + json.dumps([_frame_json(c) for c in frames])
            if python is not None:
                text = pys.get(python)
                if text is None:
                    text = _python_json(python)
                    if len(pys) > 100_000 or self._python_chars + len(text) > _PYTHON_CHARS:
                        pys.clear()
                        self._python_chars = 0
                    self._python_chars += len(text)
                    pys[python] = text
                stack += text
            append('{"kind":"%s","function":"%s","address":%d,"size":%d,"mem_type":"%s",'
                   '"device":%d,"pid":%d,"tid":%d,"ts_ns":%d,"result":%d,"caller":%s%s}\n' % (
                       "alloc" if kind == ALLOC else "free", names[fn], address, size,
                       types[mem_type], device, pid, tid, ts, result,
                       self._caller(caller), stack))
        self.out.write("".join(lines))
        self.out.flush()


# ---------------------------------------------------------------- chrome

class ChromeWriter(Writer):
    """Trace Event Format JSON, written as it goes: ``{"traceEvents":[...]}``.

    Instant events (``ph: "i"``, thread scope) named by the function, with
    address/size/type/device/result in ``args``; counters (``ph: "C"``)
    named ``live bytes cuda:N`` / ``live bytes host (pinned)`` on the
    traced command's process; ``ts`` in microseconds since the trace began.
    """

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int, counter_pid: int = 0) -> None:
        super().__init__(out, ledger, t0_ns)
        self.counter_pid = counter_pid
        self._names = _Padded(ledger.function_name, 0)
        self._types = _Padded(mem_type_name, 0)
        self.first = True
        self.pids: dict[int, str] = {}
        out.write('{"displayTimeUnit":"ns","otherData":{"tool":"memhook trace"},'
                  '"traceEvents":[\n')

    def _emit(self, items: list[str]) -> None:
        if not items:
            return
        text = ",\n".join(items)
        if not self.first:
            text = ",\n" + text
        self.first = False
        self.out.write(text)

    def process_started(self, proc: Process) -> None:
        if proc.hello is not None:
            self.pids[proc.pid] = proc.hello.command

    def _counter(self, d: int, key: int, total: int) -> str:
        return ('{"name":"live bytes %s","ph":"C","ts":%d.%03d,"pid":%d,"args":{"bytes":%d}}'
                % (device_label(key), d // 1000, d % 1000, self.counter_pid, total))

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        ledger = self.ledger
        t0 = self.t0_ns
        names, types = self._names, self._types
        items: list[str] = []
        append = items.append
        ci = 0
        nchanges = len(changes)
        for i, (_, address, size, ts, kind, fn, mem_type, device, pid, tid, result,
                _, caller, _, python) in enumerate(rows):
            d = ts - t0 if ts > t0 else 0
            if result:
                cat = ('alloc,failed' if kind == ALLOC else 'free,failed')
                err = ',"error":"%s"' % ledger.error_name(fn, result)
            else:
                cat = 'alloc' if kind == ALLOC else 'free'
                err = ''
            append('{"name":"%s","cat":"%s","ph":"i","s":"t","ts":%d.%03d,"pid":%d,"tid":%d,'
                   '"args":{"address":"%#x","size":%d,"mem_type":"%s","device":%d,'
                   '"result":%d%s,"caller":%s%s}}' % (
                       names[fn], cat, d // 1000, d % 1000, pid, tid, address, size,
                       types[mem_type], device, result, err,
                       json.dumps(_short(caller)),
                       "" if python is None else ',"python":%s' % json.dumps(
                           python.site if python.frames else "(no Python: %s)" % python.why)))
            while ci < nchanges and changes[ci][0] == i:
                append(self._counter(d, changes[ci][1], changes[ci][2]))
                ci += 1
        self._emit(items)

    def process_ended(self, proc: Process, changes: list[tuple],
                      ts_ns: int | None = None) -> None:
        d = max((time.monotonic_ns() if ts_ns is None else ts_ns) - self.t0_ns, 0)
        self._emit([self._counter(d, key, total) for _, key, total in changes])

    def close(self, summary_text: str) -> None:
        import json

        meta = [json.dumps({"name": "process_name", "ph": "M", "pid": pid,
                            "args": {"name": f"{command} (pid {pid})"}})
                for pid, command in self.pids.items()]
        if self.counter_pid not in self.pids:
            meta.append(json.dumps({"name": "process_name", "ph": "M", "pid": self.counter_pid,
                                    "args": {"name": "memhook: live bytes"}}))
        self._emit(meta)
        self.out.write("\n]}\n")
        self.out.flush()


# ---------------------------------------------------------------- memviz

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


def make_writer(fmt: str, out: IO[Any], ledger: Ledger, t0_ns: int,
                counter_pid: int = 0, memviz_entries: int | None = None) -> Writer:
    if fmt == "text":
        return TextWriter(out, ledger, t0_ns)
    if fmt == "jsonl":
        return JsonlWriter(out, ledger, t0_ns)
    if fmt == "chrome":
        return ChromeWriter(out, ledger, t0_ns, counter_pid)
    if fmt == "memviz":
        return MemvizWriter(out, ledger, t0_ns, memviz_entries or 100_000)
    raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")

