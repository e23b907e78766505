"""One pickle written as it is made: what ``-f memviz`` writes its snapshot
with, so that the snapshot never exists whole in the collector's memory.

:func:`pickle.dump` needs the whole object first, and its memo keeps every
container it wrote alive until the end: for a snapshot of 100,000 trace
entries that is a dict each, tens of MiB held at once.  :class:`PickleStream`
writes the same opcodes (protocol 2, which every Python 3 ``pickle.load``
reads) from the caller's own loops instead: a list is opened, its items are
written in batches, and it is closed; nothing written is kept.  Objects that
recur (a call site's frames, the keys every entry repeats) are written once
and named by memo index after that, as pickle's own memo would.

The values it takes are the snapshot's: None, bool, int, str, and lists,
tuples and dicts of them.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable, Iterable
from typing import IO, Any

__all__ = ["PickleStream"]

_BATCH = 1000           # items between APPENDS / SETITEMS, as pickle batches them
_FLUSH_BYTES = 1 << 16  # what is buffered before a write to the file
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")


class PickleStream:
    """Writes one pickle to ``out`` (a binary stream), piece by piece.

    ``begin_list()`` ... items ... ``end_list()`` (and the same for dicts,
    whose items are ``key`` then ``value``) make containers whose items
    come from the caller's loop; :meth:`value` writes a whole value;
    :meth:`shared` writes a value once per ``key`` and names it after that.
    :meth:`close` ends the pickle (exactly one top-level value).
    """

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self._parts: list[bytes] = [b"\x80\x02"]  # PROTO 2
        self._size = 2
        self._memo: dict[Hashable, bytes] = {}   # key -> the GET that names it
        self._next = 0
        # Each open container: [its closing opcode, values in its batch].
        self._open: list[list[Any]] = []

    # ------------------------------------------------------------ output

    def _emit(self, data: bytes) -> None:
        self._parts.append(data)
        self._size += len(data)
        if self._size >= _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self._parts:
            self.out.write(b"".join(self._parts))
            self._parts, self._size = [], 0

    def close(self) -> None:
        if self._open:
            raise ValueError(f"{len(self._open)} containers are still open")
        self._emit(b".")  # STOP
        self.flush()

    # -------------------------------------------------------------- memo

    def _put(self, key: Hashable) -> None:
        """Memoize the value just written (the top of the unpickler's stack)."""
        n = self._next
        self._next += 1
        if n < 256:
            self._emit(b"q" + bytes((n,)))               # BINPUT
            self._memo[key] = b"h" + bytes((n,))         # BINGET
        else:
            self._emit(b"r" + _U32.pack(n))              # LONG_BINPUT
            self._memo[key] = b"j" + _U32.pack(n)        # LONG_BINGET

    def shared(self, key: Hashable, make: Any) -> None:
        """The value ``make()`` returns, written the first time ``key`` is
        seen; later, a reference to that same object (the loaded pickle
        shares it, as ``pickle.dump`` would have)."""
        ref = self._memo.get(key)
        if ref is not None:
            self._item(ref)
            return
        self.value(make())
        self._put(key)

    def text(self, s: str) -> None:
        """A str the stream repeats (a dict key, a name): written once."""
        self.shared(("str", s), lambda: s)

    # ------------------------------------------------------------ values

    def _item(self, data: bytes) -> None:
        """``data`` is one whole value: count it in the open container."""
        self._emit(data)
        self._counted()

    def _counted(self) -> None:
        """One more value in the open container; a list's or dict's batch
        is closed (APPENDS / SETITEMS) and the next one opened every
        :data:`_BATCH` items, as pickle's own writer does, so the loader's
        stack stays short."""
        if not self._open:
            return
        top = self._open[-1]
        top[1] += 1
        end = top[0]
        if end != b"t" and top[1] >= _BATCH * (2 if end == b"u" else 1):
            self._emit(end + b"(")  # this batch in, MARK the next
            top[1] = 0

    def value(self, v: Any) -> None:
        """Any value of the kinds in the module's docstring, whole."""
        if v is None:
            self._item(b"N")
        elif v is True or v is False:
            self._item(b"\x88" if v else b"\x89")       # NEWTRUE / NEWFALSE
        elif isinstance(v, int):
            self._item(_int(v))
        elif isinstance(v, str):
            data = v.encode("utf-8", "surrogatepass")  # as pickle writes a str
            self._item(b"X" + _U32.pack(len(data)) + data)  # BINUNICODE
        elif isinstance(v, list):
            self.begin_list()
            self.items(v)
            self.end_list()
        elif isinstance(v, dict):
            self.begin_dict()
            for key, item in v.items():
                self.value(key)
                self.value(item)
            self.end_dict()
        elif isinstance(v, tuple):
            self._begin(b"(", b"t")                        # MARK ... TUPLE
            self.items(v)
            self._end()
        else:
            raise TypeError(f"PickleStream does not write {type(v).__name__}")

    def items(self, values: Iterable[Any]) -> None:
        """Each of ``values`` into the open container."""
        for v in values:
            self.value(v)

    # -------------------------------------------------------- containers

    def _begin(self, opening: bytes, end: bytes) -> None:
        self._emit(opening)
        self._open.append([end, 0])

    def _end(self) -> None:
        end, _ = self._open.pop()
        self._emit(end)
        self._counted()  # the container is one value of the one around it

    def begin_list(self) -> None:
        self._begin(b"](", b"e")   # EMPTY_LIST, MARK ... APPENDS

    def end_list(self) -> None:
        self._end()

    def begin_dict(self) -> None:
        self._begin(b"}(", b"u")   # EMPTY_DICT, MARK ... SETITEMS (key, value, ...)

    def end_dict(self) -> None:
        self._end()


def _int(v: int) -> bytes:
    if 0 <= v < 256:
        return b"K" + bytes((v,))                        # BININT1
    if 0 <= v < 65536:
        return b"M" + _U16.pack(v)                       # BININT2
    if -(1 << 31) <= v < 1 << 31:
        return b"J" + _I32.pack(v)                       # BININT
    data = v.to_bytes((v.bit_length() >> 3) + 1, "little", signed=True)
    if len(data) < 256:
        return b"\x8a" + bytes((len(data),)) + data      # LONG1
    return b"\x8b" + _I32.pack(len(data)) + data         # LONG4
