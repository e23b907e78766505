"""Naming code addresses: object path, symbol and offset.

Used for an event's caller (``memhook.Event.caller``, resolved in this
process from ``/proc/self/maps``) and by ``memhook trace``'s collector (from
the module records a traced process wrote into its trace area, so the
answer stays right after the process exited or unloaded the object).
Symbols come from the object's own ELF file: ``.symtab`` where it has one,
else its separate debug file's (by build ID or debuglink), else ``.dynsym``
with its MiniDebugInfo (:mod:`memhook._objects.debuginfo`); read once per object
and cached.  Never called in a hook.
"""

from __future__ import annotations

import bisect
import functools
import os
import stat
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import debuginfo as _debuginfo
from .procmaps import ExecutableMapping, executable_mappings

__all__ = ["Caller", "ElfSymbols", "elf_symbols", "resolve_local"]


@dataclass(frozen=True)
class Caller:
    """Where a call came from: ``object`` (the file's path, "" if unknown),
    ``symbol`` (the function holding ``address``, "" if unknown), ``offset``
    (bytes past the symbol's start, or past the object's base when there is
    no symbol) and the raw ``address``.

    >>> Caller("/usr/lib/libfoo.so", "foo_alloc", 0x1c, 0x7f0000001c1c).short
    'libfoo.so!foo_alloc+0x1c'
    """

    object: str
    symbol: str
    offset: int
    address: int

    @property
    def library(self) -> str:
        """The object's file name (``libtorch_cuda.so``), or ``?``."""
        return os.path.basename(self.object) or "?"

    @property
    def short(self) -> str:
        if self.symbol:
            return f"{self.library}!{self.symbol}+{self.offset:#x}"
        return f"{self.library}+{self.offset:#x}"


_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_SYMTAB_MAX = 512 << 20   # bytes of one symbol table read (~22M symbols)
_NAME_MAX = 64 << 10      # bytes of one symbol name (long C++ names fit)


_SYM_DTYPE = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                       ("value", "<u8"), ("size", "<u8")])


def _open_regular(path: str) -> tuple[int, os.stat_result] | None:
    """A descriptor of ``path`` if it is a regular file, else None.  Never
    blocks on what the path turned into (a FIFO left where a library was:
    O_NONBLOCK), never opens a device (checked before and after open)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class _Truncated(Exception):
    """A read past the file's end: its headers lie, or it was cut."""


_Read = Callable[[int, int], bytes]
"""``read(n, offset)``: exactly ``n`` bytes of a file or buffer at ``offset``."""


def _pread(fd: int, n: int, off: int, size: int) -> bytes:
    if n < 0 or off < 0 or off + n > size:
        raise _Truncated
    data = os.pread(fd, n, off)
    if len(data) != n:
        raise _Truncated
    return data


_SHT_NOTE = 7
_SHT_NOBITS = 8
_SECTION_MAX = 64 << 20  # bytes of a debuglink, note or MiniDebugInfo section read


def _file_reader(fd: int, size: int) -> _Read:
    return lambda n, off: _pread(fd, n, off, size)


def _bytes_reader(data: bytes) -> _Read:
    def read(n: int, off: int) -> bytes:
        if n < 0 or off < 0 or off + n > len(data):
            raise _Truncated
        return data[off:off + n]
    return read


_BAD_ELF = (_Truncated, struct.error, IndexError, ValueError, OverflowError, OSError)
"""What reading a file that lies (or was cut, or changed) may raise."""


class _Elf:
    """An ELF file's section headers (and names), read through ``read``."""

    def __init__(self, read: _Read, size: int) -> None:
        self.read, self.size = read, size
        self.sections: list[tuple] = []
        self.names: list[bytes] = []
        ehdr = read(_EHDR.size, 0)
        if ehdr[:4] != b"\x7fELF" or ehdr[4] != 2 or ehdr[5] != 1:
            return  # only 64-bit little-endian objects (x86-64)
        (_, _, _, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx) = _EHDR.unpack(ehdr)
        if shoff == 0 or shentsize < _SHDR.size:
            return
        if shnum == 0:  # more than 0xff00 sections: the count is section 0's size
            shnum = _SHDR.unpack(read(_SHDR.size, shoff))[5]
        table = read(shnum * shentsize, shoff)
        self.sections = [_SHDR.unpack_from(table, i * shentsize) for i in range(shnum)]
        self.names = [b""] * shnum
        if shstrndx < shnum:
            _, _, _, _, off, length, _, _, _, _ = self.sections[shstrndx]
            if off + length <= size and length <= _SECTION_MAX:
                strings = read(length, off)
                self.names = [strings[s[0]:strings.find(b"\0", s[0])] if s[0] < length else b""
                              for s in self.sections]

    def contents(self, name: bytes) -> bytes | None:
        """The bytes of the section called ``name`` (None: none, or too big)."""
        for s, n in zip(self.sections, self.names):
            if n == name and s[1] != _SHT_NOBITS and s[5] <= _SECTION_MAX:
                try:
                    return self.read(s[5], s[4])
                except _Truncated:
                    return None
        return None

    def build_id(self) -> bytes | None:
        for s in self.sections:
            if s[1] == _SHT_NOTE and s[5] <= _SECTION_MAX:
                try:
                    found = _debuginfo.build_id(self.read(s[5], s[4]))
                except _Truncated:
                    continue
                if found is not None:
                    return found
        return None

    def functions(self, want: int) -> tuple[np.ndarray, int, int] | None:
        """The function symbols of the symbol table of type ``want``
        (SHT_SYMTAB or SHT_DYNSYM), with the offset and end of their
        string table; None when there is none (or it lies)."""
        sections = self.sections
        for section in (s for s in sections if s[1] == want):
            _, _, _, _, off, length, link, _, _, entsize = section
            if entsize != _SYM_DTYPE.itemsize or link >= len(sections) or length > _SYMTAB_MAX:
                continue
            stroff, strsize = sections[link][4], sections[link][5]
            if stroff + strsize > self.size:
                continue
            count = length // _SYM_DTYPE.itemsize
            try:
                raw = self.read(count * _SYM_DTYPE.itemsize, off)
            except _Truncated:
                continue
            syms = np.frombuffer(raw, _SYM_DTYPE)
            kind = syms["info"] & 0xF
            keep = ((syms["shndx"] != 0) & (syms["value"] != 0) & (syms["name"] < strsize)
                    & ((kind == _STT_FUNC) | (kind == _STT_GNU_IFUNC)))
            syms = syms[keep]
            if len(syms) == 0:
                continue
            return syms, stroff, stroff + strsize
        return None


def _elf_build_id(path: str) -> bytes | None:
    """The build ID of the ELF file at ``path``, or None."""
    opened = _open_regular(path)
    if opened is None:
        return None
    fd, st = opened
    try:
        return _Elf(_file_reader(fd, st.st_size), st.st_size).build_id()
    except _BAD_ELF:
        return None
    finally:
        os.close(fd)


class ElfSymbols:
    """The function symbols of one ELF file, sorted by address (vaddr, as in
    the file: add the load base to compare with a running address).

    The file is the traced program's, not ours: it may be truncated,
    replaced or turned into a FIFO at any time, and its section headers may
    lie.  So it is read, never mapped (a mapping of a file cut short faults
    with SIGBUS), with every offset and size checked against its real size
    first; only its section headers and symbol table are read at load (not
    the whole file: libtorch_cuda.so is over a gigabyte), names one at a
    time on lookup, from the same file (same device, inode, size and
    mtime) or not at all.

    Where it has no ``.symtab`` (a stripped library), the symbols are
    those of its separate debug file, else its ``.dynsym`` and its
    MiniDebugInfo's ``.symtab`` together (:mod:`memhook._objects.debuginfo`), so
    that a local function is named wherever the system can name it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.starts = np.zeros(0, np.uint64)
        self.ends = np.zeros(0, np.uint64)
        self._name_at = np.zeros(0, np.uint64)
        self._strtab_end = 0
        self._name_path = path  # the file names are read from (a debug file's, where used)
        self._blob = b""        # MiniDebugInfo's string table, for symbols marked in _in_blob
        self._in_blob = np.zeros(0, np.bool_)
        self.identity: tuple[int, int, int, int] | None = None
        self._name_identity: tuple[int, int, int, int] | None = None
        self.source = ""
        """Where the symbols came from: "symtab", "debug file", "dynsym",
        "dynsym+minidebuginfo", "minidebuginfo" ("": none)."""
        opened = _open_regular(path)
        if opened is None:  # unreadable, gone, not a regular file
            return
        fd, st = opened
        try:
            self.identity = self._name_identity = _identity(st)
            self._load(_Elf(_file_reader(fd, st.st_size), st.st_size))
        except _BAD_ELF:
            self.starts = self.ends = self._name_at = np.zeros(0, np.uint64)
            self._in_blob = np.zeros(0, np.bool_)
            self.source = ""
        finally:
            os.close(fd)

    def _keep(self, values: np.ndarray, sizes: np.ndarray, names: np.ndarray,
              in_blob: np.ndarray | None = None) -> None:
        """Keep these symbols, sorted by address (``names``: where each
        name starts, in the file or, where ``in_blob``, in the blob)."""
        order = np.argsort(values, kind="stable")
        self.starts = values[order].astype(np.uint64)
        self.ends = self.starts + np.maximum(sizes[order], 1).astype(np.uint64)
        self._name_at = names[order].astype(np.uint64)
        self._in_blob = (in_blob[order] if in_blob is not None
                         else np.zeros(len(order), np.bool_))

    @staticmethod
    def _parts(found: tuple[np.ndarray, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        syms, stroff, _ = found
        return syms["value"], syms["size"], syms["name"].astype(np.uint64) + np.uint64(stroff)

    def _load(self, elf: _Elf) -> None:
        found = elf.functions(_SHT_SYMTAB)
        if found is not None:
            self.source = "symtab"
            self._strtab_end = found[2]
            self._keep(*self._parts(found))
            return
        if self._from_debug_file(elf):
            return
        dynsym = elf.functions(_SHT_DYNSYM)
        mini = self._mini(elf)
        if mini is None:
            if dynsym is not None:
                self.source = "dynsym"
                self._strtab_end = dynsym[2]
                self._keep(*self._parts(dynsym))
            return
        parts = [self._parts(mini)]
        flags = [np.ones(len(mini[0]), np.bool_)]
        if dynsym is not None:
            parts.insert(0, self._parts(dynsym))
            flags.insert(0, np.zeros(len(dynsym[0]), np.bool_))
            self._strtab_end = dynsym[2]
        values, sizes, names = (np.concatenate([p[k] for p in parts]) for k in range(3))
        self._keep(values, sizes, names, np.concatenate(flags))
        self.source = "dynsym+minidebuginfo" if dynsym is not None else "minidebuginfo"

    def _from_debug_file(self, elf: _Elf) -> bool:
        """Take the symbols of the object's separate debug file, if there is one."""
        link = elf.contents(b".gnu_debuglink")
        found = _debuginfo.debug_file(self.path, elf.build_id(),
                                      _debuginfo.debuglink(link) if link else None,
                                      _elf_build_id)
        if found is None:
            return False
        opened = _open_regular(found)
        if opened is None:
            return False
        fd, st = opened
        try:
            symtab = _Elf(_file_reader(fd, st.st_size), st.st_size).functions(_SHT_SYMTAB)
        except _BAD_ELF:
            symtab = None
        finally:
            os.close(fd)
        if symtab is None:
            return False
        self._strtab_end = symtab[2]
        self._keep(*self._parts(symtab))
        self._name_path, self._name_identity = found, _identity(st)
        self.source = "debug file"
        return True

    def _mini(self, elf: _Elf) -> tuple[np.ndarray, int, int] | None:
        """MiniDebugInfo's function symbols (their names then kept in
        memory: the table is small, and the file holds it compressed)."""
        packed = elf.contents(b".gnu_debugdata")
        data = _debuginfo.mini_debuginfo(packed) if packed else None
        if data is None:
            return None
        try:
            found = _Elf(_bytes_reader(data), len(data)).functions(_SHT_SYMTAB)
        except _BAD_ELF:
            return None
        if found is None:
            return None
        self._blob = data[:found[2]]
        return found

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, i: int) -> str:
        """The name of symbol ``i`` (in address order); "" if the file it
        is read from is no longer the one its symbols were read from."""
        at = int(self._name_at[i])
        if self._in_blob[i]:
            end = self._blob.find(b"\0", at, at + _NAME_MAX)
            return self._blob[at:end if end >= 0 else at + _NAME_MAX].decode("utf-8", "replace")
        opened = _open_regular(self._name_path)
        if opened is None:
            return ""
        fd, st = opened
        try:
            if _identity(st) != self._name_identity:
                return ""
            end = min(self._strtab_end, at + _NAME_MAX, st.st_size)
            raw = b""
            while at + len(raw) < end and b"\0" not in raw:
                raw += os.pread(fd, min(4096, end - at - len(raw)), at + len(raw)) or b"\0"
            return raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        except OSError:
            return ""
        finally:
            os.close(fd)

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(symbol, offset) of the function holding ``vaddr``, or None."""
        if vaddr < 0 or vaddr >= 1 << 64:
            return None
        i = int(np.searchsorted(self.starts, np.uint64(vaddr), side="right")) - 1
        if i < 0 or vaddr >= int(self.ends[i]):
            return None
        return self.name(i), vaddr - int(self.starts[i])


@functools.lru_cache(maxsize=256)
def _symbols(path: str, identity: tuple[int, int, int, int] | None) -> ElfSymbols:
    return ElfSymbols(path)


def elf_symbols(path: str) -> ElfSymbols:
    """The symbols of ``path``, read once per version of the file (its
    device, inode, size and mtime): a library rebuilt in place is read
    again, not named from what the old one held."""
    try:
        st = os.stat(path)
        identity: tuple[int, int, int, int] | None = _identity(st)
    except OSError:
        identity = None
    return _symbols(path, identity)


def describe(path: str, base: int, address: int) -> Caller:
    """``address`` in the object ``path`` loaded at ``base``."""
    vaddr = address - base
    # A return address points past the call: look up the byte before it,
    # so a call that is a function's last instruction is not named after
    # the next function.
    hit = elf_symbols(path).lookup(vaddr - 1)
    if hit is None:
        return Caller(path, "", vaddr, address)
    return Caller(path, hit[0], hit[1] + 1, address)


class _LocalMaps:
    """This process's file mappings, reread when an address is in none of
    them (an object loaded since)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[int] = []
        self.entries: list[ExecutableMapping] = []
        self.cache: dict[int, Caller] = {}

    def _reload(self) -> None:
        entries = sorted(executable_mappings())
        self.entries = entries
        self.starts = [e.start for e in entries]

    def _find(self, address: int) -> ExecutableMapping | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.entries[i].end:
            return self.entries[i]
        return None

    def resolve(self, address: int) -> Caller:
        with self.lock:
            hit = self.cache.get(address)
            if hit is not None:
                return hit
            entry = self._find(address)
            if entry is None:
                self._reload()
                entry = self._find(address)
            caller = (Caller("", "", address, address) if entry is None
                      else describe(entry.path, entry.base, address))
            if len(self.cache) > 65536:
                self.cache.clear()
            self.cache[address] = caller
            return caller


_local = _LocalMaps()


def resolve_local(address: int) -> Caller:
    """Name ``address`` of this process (cached by address)."""
    return _local.resolve(address)
