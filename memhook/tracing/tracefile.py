"""Reading a ``memhook trace -f jsonl`` file back, one line at a time, for
``memhook diff`` and ``memhook merge``: nothing of a file is kept but the
line being read, so a trace of any size streams through.

A file is taken as a trace only if its first line is a header record
(:func:`memhook.tracing.runinfo.header_record`) or an event (a file from a
memhook that wrote no header); anything else is a :class:`TraceError` that
says what the file is not and what is read.  A line that is not an event
in the middle of a file is an error too; a last line cut short (the writer
was killed mid-line) is not: the events before it are used and
:attr:`TraceFile.cut` says what was left out, for the command to report.
Records of other kinds (a later memhook's) are passed over.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from .._values.printable import printable
from .runinfo import HEADER_FORMAT, ClockAnchor

__all__ = ["Event", "TraceError", "TraceFile", "TraceHeader"]

class TraceError(Exception):
    """A file that cannot be read as a trace; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class TraceHeader:
    """What a file says about itself; for a file without a header (an
    older memhook's) all but ``path`` are None."""

    path: str
    version: str | None = None
    host: str | None = None
    rank: int | None = None
    pid: int | None = None
    command_pid: int | None = None
    anchor: ClockAnchor | None = None

    @property
    def label(self) -> str:
        """How the file's process track is named: rank and host where known."""
        rank = f"rank {self.rank}" if self.rank is not None else f"{os.path.basename(self.path)}"
        return f"{rank} @ {self.host}" if self.host else rank


class Event(NamedTuple):
    """One alloc or free record, as read (``caller``: the calling object's
    path, ``""`` unknown; ``site``: see :meth:`TraceFile.events`)."""

    alloc: bool
    function: str
    address: int
    size: int
    mem_type: str
    device: int
    pid: int
    tid: int
    ts_ns: int
    result: int
    caller: str
    caller_short: str
    python: list | None
    line: bytes


def _short(caller: dict) -> str:
    obj = os.path.basename(caller.get("object") or "") or "?"
    symbol = caller.get("symbol") or ""
    offset = caller.get("offset") or 0
    return f"{obj}!{symbol}+{offset:#x}" if symbol else f"{obj}+{offset:#x}"


# An event line as memhook's jsonl writer lays it out, up to its caller.
_EVENT = re.compile(rb'\{"kind":"(alloc|free)","function":"(\w+)","address":(\d+),"size":(\d+),'
                    rb'"mem_type":"(\w+)","device":(-?\d+),"pid":(\d+),"tid":(\d+),'
                    rb'"ts_ns":(\d+),"result":(-?\d+),"caller":')
_TAILS_MAX = 65_536          # distinct (caller, frames) tails kept parsed...
_TAIL_BYTES_MAX = 64 << 20   # ...and the bytes of them


def _tail(tail: bytes, decode: Callable, callers: dict) -> tuple[str, str, list | None] | None:
    """(caller object, caller short, Python frames) of a line's tail - its
    ``caller`` and what follows - or None when it is not what memhook writes
    (the line then takes the general path, which says what is wrong)."""
    try:
        text = '{"caller":' + tail.decode("utf-8")
        r, end = decode(text)
        if text[end:].strip():
            return None
        c = r["caller"]
        key = (c["object"], c["symbol"], c["offset"]) if c else None
        caller = callers.get(key)
        if caller is None:
            caller = (str(c["object"] or ""), _short(c))
            if len(callers) < 100_000:
                callers[key] = caller
        python = r.get("python")
        if python is not None and not isinstance(python, list):
            return None
        return caller[0], caller[1], python
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def _describe(line: bytes) -> str:
    text = line[:60].decode("utf-8", "replace")
    return repr(text + ("..." if len(line) > 60 else ""))


class TraceFile:
    """One jsonl trace, opened and its first line checked (a
    :class:`TraceError` if it is not a trace); :meth:`events` streams the rest.

    ``progress``: called with the bytes read since its last call, now and
    then (a progress bar's feed).  ``on_record``: called with each record
    of another kind than an event or the header (an ``oom`` report, a
    later memhook's kinds), as read, for a reader that wants them."""

    def __init__(self, path: str, progress: Callable[[int], None] | None = None) -> None:
        self.path = path
        self.progress = progress
        self.on_record: Callable[[dict], None] | None = None
        self.cut: str | None = None
        self.events_read = 0
        if os.path.isdir(path):
            raise TraceError(f"{printable(path)} is a directory, not a jsonl trace")
        try:
            self._file = open(path, "rb")  # noqa: SIM115 - closed by close()/events()
        except OSError as exc:
            raise TraceError(f"cannot read {printable(path)}: {exc.strerror or exc}") from None
        try:
            self.size = os.fstat(self._file.fileno()).st_size
            self._lineno = 0
            self._pending: bytes | None = None
            self.header = self._first()
        except BaseException:
            self._file.close()
            raise

    def _not_trace(self, why: str) -> TraceError:
        return TraceError(f"{printable(self.path)} is not a memhook jsonl trace ({why}); "
                          f"diff and merge read what `memhook trace -f jsonl -o FILE` writes")

    def _first(self) -> TraceHeader:
        try:
            line = self._file.readline()
        except OSError as exc:
            raise TraceError(f"cannot read {printable(self.path)}: {exc.strerror or exc}") \
                from None
        self._lineno = 1
        if not line:
            raise self._not_trace("it is empty: even a trace of nothing has a header line")
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            if not line.endswith(b"\n"):
                raise self._not_trace("its only line is cut short or is not JSON") from None
            raise self._not_trace(f"line 1 is not JSON: {_describe(line)}") from None
        if not isinstance(record, dict) or record.get("kind") not in ("header", "alloc", "free"):
            raise self._not_trace(f"line 1 is neither a header nor an event: {_describe(line)}")
        if record["kind"] != "header":
            self._pending = line  # an older memhook's file: no header, events from line 1
            return TraceHeader(self.path)
        return self._header(record)

    def _header(self, record: dict) -> TraceHeader:
        fmt = record.get("format")
        if not isinstance(fmt, int):
            raise self._not_trace("its header has no format number")
        if fmt > HEADER_FORMAT:
            raise TraceError(f"{printable(self.path)} was written by memhook "
                             f"{printable(str(record.get('memhook')))} in jsonl format {fmt}; "
                             f"this memhook reads format {HEADER_FORMAT} and older: use that "
                             f"version's memhook to read it")
        try:
            clock = record.get("clock")
            anchor = None
            if isinstance(clock, dict):
                anchor = ClockAnchor(int(clock["realtime_ns"]), int(clock["monotonic_ns"]),
                                     int(clock.get("uncertainty_ns", 0)))
            rank = record.get("rank")
            pid = record.get("pid")
            command_pid = record.get("command_pid")
            return TraceHeader(self.path, str(record.get("memhook")),
                               None if record.get("host") is None else str(record["host"]),
                               None if rank is None else int(rank),
                               None if pid is None else int(pid),
                               None if command_pid is None else int(command_pid), anchor)
        except (KeyError, TypeError, ValueError):
            raise self._not_trace("its header's fields are not what memhook writes") from None

    def close(self) -> None:
        self._file.close()

    def _lines(self) -> Iterator[bytes]:
        if self._pending is not None:
            yield self._pending
            self._pending = None
        unreported = 0
        for line in self._file:
            self._lineno += 1
            unreported += len(line)
            if unreported >= 1 << 20 and self.progress is not None:
                self.progress(unreported)
                unreported = 0
            yield line
        if self.progress is not None and unreported:
            self.progress(unreported)

    def _cut(self, line: bytes, lineno: int) -> bool:
        """A bad line that is the last and lacks its newline: the writer
        was stopped mid-line.  Said in :attr:`cut`; True."""
        if line.endswith(b"\n"):  # (only the last line can lack one)
            return False
        self.cut = (f"{printable(self.path)}: its last line (line {lineno}, {len(line)} bytes) "
                    f"is cut short and was left out: the trace was not finished")
        return True

    def _bad_line(self, lineno: int, line: bytes, what: str) -> TraceError:
        return TraceError(f"{printable(self.path)}: line {lineno} is {what}: {_describe(line)}")

    def events(self) -> Iterator[Event]:
        """The file's alloc and free records, in file order; the file is
        closed at the end.  A malformed line before the last raises
        :class:`TraceError`; a cut last line ends the events and sets :attr:`cut`."""
        lineno = self._lineno if self._pending is None else 0
        decode = json.JSONDecoder().raw_decode  # (json.loads would sniff each line's encoding)
        callers: dict[tuple | None, tuple[str, str]] = {None: ("", "?")}
        tails: dict[bytes, tuple[str, str, list | None]] = {}
        tail_bytes = 0
        names: dict[bytes, str] = {}
        match = _EVENT.match
        try:
            for line in self._lines():
                lineno += 1
                # The fast path: a line as memhook writes it, whose caller and
                # frames (the same for every call from one place) were seen.
                m = match(line)
                if m is not None:
                    tail = line[m.end():]
                    known = tails.get(tail)
                    if known is None:
                        known = _tail(tail, decode, callers)
                        if known is not None:
                            if len(tails) >= _TAILS_MAX or tail_bytes > _TAIL_BYTES_MAX:
                                tails.clear()
                                tail_bytes = 0
                            tails[tail] = known
                            tail_bytes += len(tail)
                    if known is not None:
                        kind, fn, address, size, mem_type, device, pid, tid, ts, result = \
                            m.groups()
                        fn_name = names.get(fn)
                        if fn_name is None:
                            fn_name = names[fn] = fn.decode()
                        type_name = names.get(mem_type)
                        if type_name is None:
                            type_name = names[mem_type] = mem_type.decode()
                        self.events_read += 1
                        yield Event(kind == b"alloc", fn_name, int(address), int(size), type_name,
                                    int(device), int(pid), int(tid), int(ts), int(result),
                                    known[0], known[1], known[2], line)
                        continue
                if line.isspace():
                    continue
                try:
                    text = line.decode("utf-8")
                    r, end = decode(text)
                    if end < len(text) and text[end:].strip():
                        raise ValueError("more after the object")
                except (ValueError, RecursionError):
                    if self._cut(line, lineno):
                        return
                    raise self._bad_line(lineno, line, "not JSON") from None
                try:
                    kind = r["kind"]
                    if kind != "alloc" and kind != "free":
                        # a header, an oom report, or a later memhook's record kind
                        if self.on_record is not None and kind != "header":
                            self.on_record(r)
                        continue
                    c = r["caller"]
                    key = (c["object"], c["symbol"], c["offset"]) if c else None
                    caller = callers.get(key)
                    if caller is None:
                        if len(callers) > 100_000:
                            callers.clear()
                        caller = callers[key] = (str(c["object"] or ""), _short(c))
                    event = Event(kind == "alloc", str(r["function"]), int(r["address"]),
                                  int(r["size"]), str(r["mem_type"]), int(r["device"]),
                                  int(r["pid"]), int(r["tid"]), int(r["ts_ns"]),
                                  int(r["result"]), caller[0], caller[1], r.get("python"), line)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    if self._cut(line, lineno):
                        return
                    raise self._bad_line(lineno, line, f"not an event ({type(exc).__name__}: "
                                         f"{printable(str(exc))})") from None
                self.events_read += 1
                yield event
        except OSError as exc:
            raise TraceError(f"cannot read {printable(self.path)}: {exc.strerror or exc}") \
                from None
        finally:
            self._file.close()
