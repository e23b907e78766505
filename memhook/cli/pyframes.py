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
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CODE", "LOST", "NO_PYTHON", "NO_THREAD", "PyFrame", "PyRecords", "PyStack",
           "SiteLedger", "line_for", "why_text"]

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


# Where a frame is not the user's own code: the standard library, installed
# packages, frozen modules (the traced process's paths are not known here).
_LIBRARY = re.compile(r"^<frozen |/(site|dist)-packages/|/lib(64)?/python\d\.\d+/|^<")


def _is_user(frame: PyFrame) -> bool:
    return frame.file != "?" and not _LIBRARY.search(frame.file)


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

    @property
    def site(self) -> str:
        """The call site the summary counts by: ``file:line (function)``."""
        f = self.user_frame
        if f is None:
            return f"(no Python frames: {self.why or 'none'})"
        return f"{f.location} ({f.function})"


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


def _lines_locations(table: bytes, first: int, addr: int) -> int:
    """3.11+: the location table (code units; addr in bytes)."""
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
            raw, at = _varint(table, at)
            line += -(raw >> 1) if raw & 1 else raw >> 1
            here = line
        elif code >= 10:  # one line form: the delta is in the code
            line += code - 10
            here = line
        else:             # short form: same line
            here = line
        while at < n and not table[at] & 128:  # the entry's other bytes
            at += 1
        if start <= addr < end:
            return here
    return -1


def _lines_pep626(table: bytes, first: int, addr: int) -> int:
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
        if start <= addr < end:
            return here
    return -1


def _lines_lnotab(table: bytes, first: int, addr: int) -> int:
    """3.9: co_lnotab, (byte increment, line increment) pairs."""
    line = first
    at = 0
    for i in range(0, len(table) - 1, 2):
        at += table[i]
        if at > addr:
            break
        delta = table[i + 1]
        line += delta - 256 if delta > 127 else delta
    return line


def line_for(minor: int, table: bytes, first: int, lasti: int) -> int:
    """The line of instruction ``lasti`` (as the frame keeps it: bytes in
    3.9, code units after) in a code object of CPython 3.``minor``; 0 when
    there is none."""
    if lasti < 0:
        return first
    try:
        if minor >= 11:
            line = _lines_locations(table, first, lasti * 2)
        elif minor == 10:
            line = _lines_pep626(table, first, lasti * 2)
        else:
            line = _lines_lnotab(table, first, lasti)
    except IndexError:  # a table cut short
        return 0
    return line if line > 0 else 0


# ------------------------------------------------------------- the area

@dataclass(frozen=True)
class _Code:
    file: str
    function: str
    first: int
    minor: int
    table: bytes | None  # None: the lines are unknown


_UNKNOWN_CODE = _Code("?", "?", 0, 0, None)
_ENCODINGS = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}


def _text(data: Any, at: int, length: int, kind: int) -> tuple[str, int]:
    """A string of a code record (kind 0: the process could not read it)."""
    if kind == 0 and length == 0:
        return "?", at
    if kind not in _ENCODINGS:
        raise ValueError(f"a string of {kind} bytes a character")
    nbytes = length * kind
    raw = bytes(data[at:at + nbytes])
    if len(raw) != nbytes:
        raise ValueError("text past the record")
    return raw.decode(_ENCODINGS[kind], "replace"), at + (nbytes + 7) // 8 * 8


class PyRecords:
    """A traced area's Python records and code records, named.

    ``mm`` is the area's mapping; offsets are the area header's.  Anything
    out of bounds or malformed (the process may be hostile or broken)
    names ``?``, never raises."""

    def __init__(self, mm: Any, py_off: int, py_cap: int, py_depth: int, codes_off: int,
                 codes_cap: int, version_at: int) -> None:
        self.mm = mm
        self.py_off, self.py_words, self.depth = py_off, py_cap // 8, py_depth
        self.codes_off, self.codes_cap = codes_off, codes_cap
        self._version_at = version_at
        self._codes: dict[int, _Code] = {}
        self._frames: dict[int, PyFrame] = {}
        self._stacks: dict[tuple[int, ...], PyStack] = {}

    @property
    def version(self) -> int:
        """The traced interpreter's PY_VERSION_HEX (0: none found)."""
        return int(struct.unpack_from("<I", self.mm, self._version_at)[0])

    def _code(self, ref: int) -> _Code:
        code = self._codes.get(ref)
        if code is not None:
            return code
        code = _UNKNOWN_CODE
        off = (ref - 1) * 8
        if ref and off + CODE.size <= self.codes_cap:
            at = self.codes_off + off
            try:
                (length, first, _, _, _, _, _, _, flen, qlen, llen, fkind, qkind, flags,
                 minor) = CODE.unpack_from(self.mm, at)
                if length and off + length <= self.codes_cap:
                    end = at + length
                    body = self.mm[at + CODE.size:end]
                    fname, pos = _text(body, 0, flen, fkind)
                    qname, pos = _text(body, pos, qlen, qkind)
                    table = None if flags & _NO_LINES else bytes(body[pos:pos + llen])
                    if table is not None and len(table) != llen:
                        raise ValueError("line table past the record")
                    code = _Code(fname, qname, first, minor, table)
            except (ValueError, struct.error):
                code = _UNKNOWN_CODE
        if len(self._codes) > 200_000:
            self._codes.clear()
        self._codes[ref] = code
        return code

    def _frame(self, word: int) -> PyFrame:
        frame = self._frames.get(word)
        if frame is None:
            code = self._code(word >> 32)
            lasti = word & 0xFFFFFFFF
            lasti = lasti - (1 << 32) if lasti >= 1 << 31 else lasti
            line = (line_for(code.minor, code.table, code.first, lasti)
                    if code.table is not None else 0)
            frame = PyFrame(code.file, line, code.function)
            if len(self._frames) > 200_000:
                self._frames.clear()
            self._frames[word] = frame
        return frame

    def stacks(self, refs: np.ndarray, allocs: np.ndarray | None = None) -> list[PyStack | None]:
        """Each event's frames, by the reference it carries (1 + its
        record's word offset; 0: none): None for a FREE (``allocs`` False),
        a :data:`LOST` stack for an ALLOC whose record found no room."""
        out: list[PyStack | None] = []
        words = self.py_words
        view = np.frombuffer(self.mm, np.uint64, words, self.py_off)
        is_alloc = allocs.tolist() if allocs is not None else [True] * len(refs)
        for ref, alloc in zip(refs.tolist(), is_alloc):
            if ref == 0 or ref > words:
                out.append(LOST if alloc else None)
                continue
            head = int(view[ref - 1])
            n = min(head & 0xFFFF, self.depth, words - ref)
            key = tuple(view[ref - 1:ref + n].tolist())
            stack = self._stacks.get(key)
            if stack is None:
                state = (head >> 16) & 0xFF
                why = "" if state == FRAMES and n else why_text(state, self.version)
                if state == FRAMES and not n:
                    why = "a Python thread outside any Python code"
                stack = PyStack(tuple(self._frame(w) for w in key[1:]), why,
                                bool(head & _MORE))
                if len(self._stacks) > 100_000:
                    self._stacks.clear()
                self._stacks[key] = stack
            out.append(stack)
        return out


LOST = PyStack((), "not recorded: the trace area's Python records (64 MiB) were used up")
"""An ALLOC's frames when its Python record found no room."""


# ------------------------------------------------------------ the summary

class SiteLedger:
    """Live, peak and never-freed bytes by Python call site (the innermost
    user frame, :attr:`PyStack.site`), kept by the ledger beside its
    by-library figures."""

    def __init__(self) -> None:
        self.live: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.at_peak: dict[str, int] = {}  # live by site when all sites' total peaked
        self.never_freed: dict[str, list[int]] = {}  # site -> [count, bytes]

    def alloc(self, site: str, size: int) -> None:
        live = self.live.get(site, 0) + size
        self.live[site] = live
        if live > self.peak.get(site, 0):
            self.peak[site] = live

    def free(self, site: str, size: int) -> None:
        self.live[site] = self.live.get(site, 0) - size

    def total_peaked(self) -> None:
        self.at_peak = {k: v for k, v in self.live.items() if v > 0}

    def leaked(self, site: str, size: int) -> None:
        entry = self.never_freed.setdefault(site, [0, 0])
        entry[0] += 1
        entry[1] += size
        self.free(site, size)

    def summary(self) -> dict[str, list[dict]]:
        return {
            "peak_by_python_site": [
                {"site": s, "at_peak": self.at_peak.get(s, 0), "own_peak": p}
                for s, p in sorted(self.peak.items(),
                                   key=lambda kv: (-self.at_peak.get(kv[0], 0), -kv[1], kv[0]))
            ],
            "never_freed_by_python_site": [
                {"site": s, "count": n, "bytes": b}
                for s, (n, b) in sorted(self.never_freed.items(),
                                        key=lambda kv: (-kv[1][1], kv[0]))
            ],
        }
