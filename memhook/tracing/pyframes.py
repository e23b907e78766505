"""``memhook trace --python``: naming the Python frames a traced process
recorded with each ALLOC (``csrc/trace/pyframes.c``).

The process writes, per ALLOC, a Python record of raw frames - (code
record, instruction offset) pairs, innermost first - and, once per code
object, a code record holding the code object's filename, qualified name,
first line and line table (``trace_proto.h``: ``mh_trace_pycode``).  Here
both become :class:`PyFrame` (file, line, function): the line is computed
from the line table as the traced interpreter would (its version is in the
record; it need not be this Python's), so names stay right after the code
object died, and a frame whose code record is missing is named ``?``,
never after another function.

>>> line_for(11, bytes([0x80, 0x00, 0xd8, 0x04, 0x08]), 10, 1)   # 3.11+ location table
11
>>> PyStack((PyFrame("/srv/train.py", 42, "step"),)).site
'/srv/train.py:42 (step)'
>>> PyStack((PyFrame("/srv/mem.py", 7, "alloc"), PyFrame("/srv/train.py", 80, "load"))).site
'/srv/train.py:80 (load) > /srv/mem.py:7 (alloc)'
"""

from __future__ import annotations

import array
import bisect
import functools
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["CODE", "LINES_MAX", "LOST", "NAME_MAX", "NO_PYTHON", "NO_THREAD", "SITE_FRAMES",
           "LineIndex", "PyFrame", "PyRecords", "PyStack", "Reader", "SiteLedger", "is_own",
           "line_for", "why_text"]

CODE = struct.Struct("<IIQQQQqqIIIBBBB")
"""``mh_trace_pycode``: len, firstlineno, code, filename_obj, qualname_obj,
linetable_obj, filename_hash, qualname_hash, filename_len, qualname_len,
linetable_len, filename_kind, qualname_kind, flags, py_minor (72 bytes;
then the three texts, each padded to 8)."""
_NO_LINES = 0x1

# Python record head: frames | state << 16 | MORE (trace_proto.h MH_TRACE_PY_*).
FRAMES, NO_THREAD, NO_PYTHON, UNSUPPORTED, BROKEN = 0, 1, 2, 3, 4
_MORE = 0x1000000

_WHY = {
    NO_THREAD: "no Python on this thread",
    NO_PYTHON: "no Python interpreter running in this process",
    UNSUPPORTED: "an interpreter memhook cannot read (it reads CPython 3.9-3.13)",
    BROKEN: "the thread's frame chain failed a check here",
}


def why_text(state: int, version: int = 0) -> str:
    """What a Python record's state says, for the outputs."""
    text = _WHY.get(state, f"state {state}")
    if state == UNSUPPORTED and version:
        text = f"Python {version >> 24}.{(version >> 16) & 0xFF}: {text}"
    return text


@dataclass(frozen=True)
class PyFrame:
    """One Python frame: ``line`` 0 when unknown, ``file``/``function``
    ``?`` when the code object could not be recorded."""

    file: str
    line: int
    function: str

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line or '?'}"


# Where a frame is not the program's own code: the standard library,
# installed packages, frozen modules, code made from a string (the traced
# process's sys.prefix is not known here, so the paths tell), and memhook.
_LIBRARY = re.compile(r"^<frozen |/(site|dist)-packages/|/lib(64)?/python\d\.\d+/|^<")
_MEMHOOK = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

SITE_FRAMES = 2
"""How many of the program's own frames name a call site: the frame that
allocated (or called the library that did) and the one that called it, so
that one helper ``alloc()`` called from two places is two sites."""


def is_own(frame: PyFrame) -> bool:
    """Whether ``frame`` is the program's own code: not the standard
    library's, an installed package's, memhook's, or unknown."""
    return (frame.file != "?" and not _LIBRARY.search(frame.file)
            and not frame.file.startswith(_MEMHOOK))


def _is_user(frame: PyFrame) -> bool:
    return is_own(frame)


@dataclass(frozen=True)
class PyStack:
    """An ALLOC's Python frames, innermost first.  ``why``: why there are
    none (or why they end early); ``more``: frames above these were not
    recorded (``--python=DEPTH``)."""

    frames: tuple[PyFrame, ...]
    why: str = ""
    more: bool = False

    @property
    def user_frame(self) -> PyFrame | None:
        """The innermost frame of the user's own code (not the standard
        library's, nor an installed package's), else the innermost one."""
        for f in self.frames:
            if _is_user(f):
                return f
        return self.frames[0] if self.frames else None

    @functools.cached_property
    def site_frames(self) -> tuple[PyFrame, ...]:
        """The frames that name the call site, innermost first: the
        innermost :data:`SITE_FRAMES` of the program's own code, else (no
        own frame: a library's thread, memhook's demo) the innermost
        :data:`SITE_FRAMES` frames; () without frames."""
        own = tuple(f for f in self.frames if _is_user(f))[:SITE_FRAMES]
        return own or self.frames[:SITE_FRAMES]

    @functools.cached_property
    def site(self) -> str:
        """The program call site the summary, ``diff`` and the OOM report
        count by: :attr:`site_frames` outermost first, each ``file:line
        (function)``, joined by `` > `` (a file named again is left out:
        ``/srv/train.py:80 (train) > :42 (step)``)."""
        frames = self.site_frames
        if not frames:
            return f"(no Python frames: {self.why or 'none'})"
        parts = []
        last = None
        for f in reversed(frames):
            where = f.location if f.file != last else f":{f.line or '?'}"
            parts.append(f"{where} ({f.function})")
            last = f.file
        return " > ".join(parts)

    @functools.cached_property
    def path_down(self) -> tuple[PyFrame, ...]:
        """The frames below the site's outermost frame, down to the
        allocation, outermost first (the way from the site to the native
        caller: the site's own frames and any library frames between)."""
        frames = self.site_frames
        if not frames:
            return ()
        top = self.frames.index(frames[-1])
        return tuple(reversed(self.frames[:top]))


# ----------------------------------------------------------- line tables

def _varint(table: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = table[at]
        at += 1
        value |= (b & 63) << shift
        shift += 6
        if not b & 64:
            return value, at


def _index_locations(table: bytes, first: int, starts: array.array, lines: array.array) -> None:
    """3.11+: the location table (ranges of code units, in bytes here)."""
    line = first
    end = 0
    at = 0
    n = len(table)
    while at < n:
        b = table[at]
        code = (b >> 3) & 15
        start, end = end, end + ((b & 7) + 1) * 2
        at += 1
        if code == 15:    # no location
            here = -1
        elif code in (13, 14):  # no columns / long form: a signed varint line delta
            try:
                raw, at = _varint(table, at)
            except IndexError:  # a table cut short: no line from here on
                starts.append(start)
                lines.append(0)
                return
            line += -(raw >> 1) if raw & 1 else raw >> 1
            here = line
        elif code >= 10:  # one line form: the delta is in the code
            line += code - 10
            here = line
        else:             # short form: same line
            here = line
        while at < n and not table[at] & 128:  # the entry's other bytes
            at += 1
        starts.append(start)
        lines.append(here)
    starts.append(end)
    lines.append(-1)


def _index_pep626(table: bytes, first: int, starts: array.array, lines: array.array) -> None:
    """3.10: (byte delta, line delta) pairs; -128: no line."""
    line = first
    end = 0
    for i in range(0, len(table) - 1, 2):
        start, end = end, end + table[i]
        delta = table[i + 1] - 256 if table[i + 1] > 127 else table[i + 1]
        if delta == -128:
            here = -1
        else:
            line += delta
            here = line
        starts.append(start)
        lines.append(here)
    starts.append(end)
    lines.append(-1)


def _index_lnotab(table: bytes, first: int, starts: array.array, lines: array.array) -> None:
    """3.9: co_lnotab, (byte increment, line increment) pairs: a line holds
    from its offset on."""
    line = first
    at = 0
    starts.append(0)
    lines.append(first)
    for i in range(0, len(table) - 1, 2):
        at += table[i]
        delta = table[i + 1]
        line += delta - 256 if delta > 127 else delta
        starts.append(at)
        lines.append(line)


class LineIndex:
    """A line table decoded once (its cost is the table's length); each
    instruction's line is then a bisection, whatever the table holds."""

    __slots__ = ("_first", "_lines", "_scale", "_starts")

    def __init__(self, minor: int, table: bytes, first: int) -> None:
        self._first = first
        self._starts, self._lines = array.array("q"), array.array("q")
        if minor >= 11:
            _index_locations(table, first, self._starts, self._lines)
        elif minor == 10:
            _index_pep626(table, first, self._starts, self._lines)
        else:
            _index_lnotab(table, first, self._starts, self._lines)
        self._scale = 2 if minor >= 10 else 1  # code units, or bytes (3.9)

    @property
    def nbytes(self) -> int:
        return 16 * len(self._starts)

    def line(self, lasti: int) -> int:
        """The line of instruction ``lasti`` (as the frame keeps it); 0 when
        there is none."""
        if lasti < 0:
            return self._first
        i = bisect.bisect_right(self._starts, lasti * self._scale) - 1
        line = self._lines[i] if i >= 0 else 0
        return line if line > 0 else 0


def line_for(minor: int, table: bytes, first: int, lasti: int) -> int:
    """The line of instruction ``lasti`` (as the frame keeps it: bytes in
    3.9, code units after) in a code object of CPython 3.``minor``; 0 when
    there is none."""
    return LineIndex(minor, table, first).line(lasti)


# ------------------------------------------------------------- the area

NAME_MAX = 4096
"""The most characters of a name a code record holds (pycode.c:
MH_TRACE_PYCODE_NAME_MAX); a longer one is recorded as unknown."""
LINES_MAX = 256 * 1024
"""The longest line table a code record holds (MH_TRACE_PYCODE_LINES_MAX)."""
_CODE_MAX = CODE.size + 2 * NAME_MAX * 4 + LINES_MAX
"""The largest code record the traced side writes."""
_SPAN = 1 << 20          # the most bytes of Python records one pread takes
_READ_BUDGET = 16 << 20  # bytes of code records one call reads at most...
_INDEX_BUDGET = 1 << 20  # ...and of line tables it decodes (what is left is named later)
_CACHE_BYTES = 64 << 20  # what the caches of names hold at most (texts, tables, indexes)
_STACK_WORDS = 1 << 20   # frames the cache of stacks holds at most


@dataclass(frozen=True)
class _Code:
    file: str
    function: str
    first: int
    minor: int
    table: bytes | None  # None: the lines are unknown


_UNKNOWN_CODE = _Code("?", "?", 0, 0, None)
_ENCODINGS = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}


def _text(data: bytes, at: int, length: int, kind: int) -> tuple[str, int]:
    """A string of a code record (kind 0: the process could not read it)."""
    if kind == 0 and length == 0:
        return "?", at
    if kind not in _ENCODINGS:
        raise ValueError(f"a string of {kind} bytes a character")
    nbytes = length * kind
    raw = data[at:at + nbytes]
    if len(raw) != nbytes:
        raise ValueError("text past the record")
    return raw.decode(_ENCODINGS[kind], "replace"), at + (nbytes + 7) // 8 * 8


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


Reader = Callable[[int, int], bytes]
"""``read(n, offset)``: exactly ``n`` bytes of the area at ``offset``
(:meth:`memhook.tracing.area.TraceArea._pread`: a ``pread`` of its memfd, which
raises :class:`~memhook.tracing.area.AreaTruncated` if the area was cut)."""


class PyRecords:
    """A traced area's Python records and code records, named.

    ``read`` reads the area (:data:`Reader`); the offsets and sizes are the
    area header's, which :class:`~memhook.tracing.area.TraceArea` checked
    against the memfd's real size.  Nothing the records say is trusted:
    every reference and length is checked against its section and against
    what the traced side writes before anything is read, each read is a
    bounded ``pread`` (never a load from a mapping: a memfd cut short is
    an :class:`~memhook.tracing.area.AreaTruncated`, not a SIGBUS), anything
    malformed names ``?``, the work one call does is bounded (bytes read,
    line tables decoded: what is past that is named in a later call), and
    so is what the caches hold, whatever the records claim."""

    def __init__(self, read: Reader, py_off: int, py_cap: int, py_depth: int, codes_off: int,
                 codes_cap: int, version_at: int) -> None:
        self._read = read
        self.py_off, self.py_words, self.depth = py_off, py_cap // 8, py_depth
        self.codes_off, self.codes_cap = codes_off, codes_cap
        self._version_at = version_at
        self._codes: dict[int, _Code] = {}
        self._indexes: dict[int, LineIndex] = {}
        self._frames: dict[int, PyFrame] = {}
        self._stacks: dict[tuple[int, ...], PyStack] = {}
        self._cached_bytes = 0
        self._stack_words = 0
        self._read_left = self._index_left = 0
        self._partial = False  # a name in the making was left for later (a budget ran out)

    @property
    def version(self) -> int:
        """The traced interpreter's PY_VERSION_HEX (0: none found)."""
        return int(struct.unpack("<I", self._read(4, self._version_at))[0])

    def _forget_names(self) -> None:
        """Every cache at once: frames and stacks hold the codes' texts."""
        self._codes.clear()
        self._indexes.clear()
        self._frames.clear()
        self._stacks.clear()
        self._cached_bytes = self._stack_words = 0

    def _load_code(self, ref: int) -> _Code | None:
        """The code record ``ref`` names, read and checked; None when this
        call may read no more."""
        off = (ref - 1) * 8
        if ref <= 0 or off + CODE.size > self.codes_cap:
            return _UNKNOWN_CODE
        if self._read_left < CODE.size:
            return None
        head = self._read(CODE.size, self.codes_off + off)
        self._read_left -= CODE.size
        (length, first, _, _, _, _, _, _, flen, qlen, llen, fkind, qkind, flags,
         minor) = CODE.unpack(head)
        if (flen > NAME_MAX or qlen > NAME_MAX or llen > LINES_MAX
                or fkind not in (0, 1, 2, 4) or qkind not in (0, 1, 2, 4)):
            return _UNKNOWN_CODE
        lines = 0 if flags & _NO_LINES else llen
        size = CODE.size + _pad8(flen * fkind) + _pad8(qlen * qkind) + _pad8(lines)
        if not size <= length <= _CODE_MAX or off + length > self.codes_cap:
            return _UNKNOWN_CODE  # (len is written last: 0 while the record is being written)
        if self._read_left < size - CODE.size:
            return None
        body = self._read(size - CODE.size, self.codes_off + off + CODE.size)
        self._read_left -= size - CODE.size
        try:
            fname, pos = _text(body, 0, flen, fkind)
            qname, pos = _text(body, pos, qlen, qkind)
        except ValueError:
            return _UNKNOWN_CODE
        table = None if flags & _NO_LINES else body[pos:pos + llen]
        return _Code(fname, qname, first, minor, table)

    def _keep(self, nbytes: int) -> None:
        """Room for ``nbytes`` more in the caches of names (else all of them go)."""
        if self._cached_bytes + nbytes > _CACHE_BYTES or len(self._codes) >= 200_000:
            self._forget_names()
        self._cached_bytes += nbytes

    def _code(self, ref: int) -> _Code:
        code = self._codes.get(ref)
        if code is not None:
            return code
        loaded = self._load_code(ref)
        if loaded is None:
            self._partial = True
            return _UNKNOWN_CODE
        self._keep(CODE.size + 4 * (len(loaded.file) + len(loaded.function))
                   + len(loaded.table or b""))
        self._codes[ref] = loaded
        return loaded

    def _line(self, ref: int, code: _Code, lasti: int) -> int:
        if code.table is None:
            return 0
        index = self._indexes.get(ref)
        if index is None:
            if len(code.table) > self._index_left:
                self._partial = True
                return 0
            self._index_left -= len(code.table)
            index = LineIndex(code.minor, code.table, code.first)
            self._keep(index.nbytes)
            self._indexes[ref] = index
        return index.line(lasti)

    def _frame(self, word: int) -> PyFrame:
        frame = self._frames.get(word)
        if frame is None:
            before, self._partial = self._partial, False
            ref = word >> 32
            code = self._code(ref)
            lasti = word & 0xFFFFFFFF
            lasti = lasti - (1 << 32) if lasti >= 1 << 31 else lasti
            frame = PyFrame(code.file, self._line(ref, code, lasti), code.function)
            if not self._partial:  # (one named in part is named again later)
                if len(self._frames) > 200_000:
                    self._frames.clear()
                self._frames[word] = frame
            self._partial = self._partial or before
        return frame

    def _records(self, refs: list[int]) -> dict[int, tuple[int, ...]]:
        """The Python records ``refs`` name (each 1 + its word offset, within
        the section): head and frames, at most ``depth`` of them and none
        past the section's end."""
        words, depth = self.py_words, self.depth
        wanted = sorted(set(refs))
        got: dict[int, tuple[int, ...]] = {}
        start = 0
        while start < len(wanted):
            # Records are claimed in order: a batch's lie near each other,
            # so a few reads of spans of them (at most _SPAN bytes each).
            lo = wanted[start]
            end = start
            while end + 1 < len(wanted) and (wanted[end + 1] - lo + 1 + depth) * 8 <= _SPAN:
                end += 1
            stop = min(wanted[end] + depth, words)  # one past the last word read
            span = np.frombuffer(self._read((stop - lo + 1) * 8, self.py_off + (lo - 1) * 8),
                                 "<u8").tolist()
            for ref in wanted[start:end + 1]:
                at = ref - lo
                n = min(span[at] & 0xFFFF, depth, words - ref)
                got[ref] = tuple(span[at:at + 1 + n])
            start = end + 1
        return got

    def stacks(self, refs: np.ndarray, allocs: np.ndarray | None = None) -> list[PyStack | None]:
        """Each event's frames, by the reference it carries (1 + its
        record's word offset; 0: none): None for a FREE (``allocs`` False),
        a :data:`LOST` stack for an ALLOC whose record found no room."""
        self._read_left, self._index_left = _READ_BUDGET, _INDEX_BUDGET
        words = self.py_words
        ref_list = refs.tolist()
        is_alloc = allocs.tolist() if allocs is not None else [True] * len(ref_list)
        records = self._records([r for r, a in zip(ref_list, is_alloc) if a and 0 < r <= words])
        out: list[PyStack | None] = []
        for ref, alloc in zip(ref_list, is_alloc):
            if not alloc:
                out.append(None)
                continue
            key = records.get(ref)
            if key is None:
                out.append(LOST)
                continue
            stack = self._stacks.get(key)
            if stack is None:
                stack = self._stack(key)
            out.append(stack)
        return out

    def _stack(self, key: tuple[int, ...]) -> PyStack:
        head = key[0]
        n = len(key) - 1
        state = (head >> 16) & 0xFF
        why = "" if state == FRAMES and n else why_text(state, self.version)
        if state == FRAMES and not n:
            why = "a Python thread outside any Python code"
        self._partial = False
        stack = PyStack(tuple(self._frame(w) for w in key[1:]), why, bool(head & _MORE))
        if not self._partial:
            if self._stack_words + len(key) > _STACK_WORDS or len(self._stacks) >= 100_000:
                self._stacks.clear()
                self._stack_words = 0
            self._stack_words += len(key)
            self._stacks[key] = stack
        self._partial = False
        return stack


LOST = PyStack((), "not recorded: the trace area's Python records (64 MiB) were used up")
"""An ALLOC's frames when its Python record found no room."""


# ------------------------------------------------------------ the summary

_WAYS_MAX = 8  # distinct ways down kept per leaking site (the rest are counted)


class SiteLedger:
    """Live, peak and never-freed bytes by the program's call site
    (:attr:`PyStack.site`), kept by the ledger beside its by-library
    figures; for what was never freed, also the ways down from each site
    (:func:`memhook.tracing.sites.way_down`), the largest shown."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.at_peak: dict[str, int] = {}  # live by site when all sites' total peaked
        self.never_freed: dict[str, list[int]] = {}  # site -> [count, bytes]
        self.ways: dict[str, dict[tuple[str, ...], list[int]]] = {}  # site -> way -> [n, bytes]

    def alloc(self, site: str, size: int) -> None:
        live = self.live.get(site, 0) + size
        self.live[site] = live
        if live > self.peak.get(site, 0):
            self.peak[site] = live

    def free(self, site: str, size: int) -> None:
        self.live[site] = self.live.get(site, 0) - size

    def total_peaked(self) -> None:
        self.at_peak = {k: v for k, v in self.live.items() if v > 0}

    def leaked(self, site: str, size: int, way: tuple[str, ...] = ()) -> None:
        entry = self.never_freed.setdefault(site, [0, 0])
        entry[0] += 1
        entry[1] += size
        self.free(site, size)
        if way:
            ways = self.ways.setdefault(site, {})
            held = ways.get(way)
            if held is None:
                held = ways.setdefault(way if len(ways) < _WAYS_MAX else ("(other ways)",),
                                       [0, 0])
            held[0] += 1
            held[1] += size

    def summary(self) -> dict[str, list[dict]]:
        def way(site: str) -> dict:
            ways = self.ways.get(site)
            if not ways:
                return {}
            top = max(ways.items(), key=lambda kv: (kv[1][1], kv[1][0]))
            return {"way_down": list(top[0]), "other_ways": len(ways) - 1}

        return {
            "peak_by_python_site": [
                {"site": s, "at_peak": self.at_peak.get(s, 0), "own_peak": p}
                for s, p in sorted(self.peak.items(),
                                   key=lambda kv: (-self.at_peak.get(kv[0], 0), -kv[1], kv[0]))
            ],
            "never_freed_by_python_site": [
                {"site": s, "count": n, "bytes": b, **way(s)}
                for s, (n, b) in sorted(self.never_freed.items(),
                                        key=lambda kv: (-kv[1][1], kv[0]))
            ],
        }
