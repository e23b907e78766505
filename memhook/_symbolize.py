"""Naming code addresses: object path, symbol and offset.

Used for an event's caller (``memhook.Event.caller``, resolved in this
process from ``/proc/self/maps``) and by ``memhook trace``'s collector (from
the module records a traced process wrote into its trace area, so the
answer stays right after the process exited or unloaded the object).
Symbols come from the object's own ELF file: ``.symtab`` where it has one,
else ``.dynsym``; read once per object and cached.  Never called in a hook.
"""

from __future__ import annotations

import bisect
import functools
import os
import stat
import struct
import threading
from dataclasses import dataclass

import numpy as np

from ._procmaps import ExecutableMapping, executable_mappings

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


def _pread(fd: int, n: int, off: int, size: int) -> bytes:
    if n < 0 or off < 0 or off + n > size:
        raise _Truncated
    data = os.pread(fd, n, off)
    if len(data) != n:
        raise _Truncated
    return data


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
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.starts = np.zeros(0, np.uint64)
        self.ends = np.zeros(0, np.uint64)
        self._name_at = np.zeros(0, np.uint64)
        self._strtab_end = 0
        self.identity: tuple[int, int, int, int] | None = None
        opened = _open_regular(path)
        if opened is None:  # unreadable, gone, not a regular file
            return
        fd, st = opened
        try:
            self.identity = _identity(st)
            self._load(fd, st.st_size)
        except (_Truncated, struct.error, IndexError, ValueError, OverflowError, OSError):
            self.starts = self.ends = self._name_at = np.zeros(0, np.uint64)
        finally:
            os.close(fd)

    def _load(self, fd: int, size: int) -> None:
        ehdr = _pread(fd, _EHDR.size, 0, size)
        if ehdr[:4] != b"\x7fELF" or ehdr[4] != 2 or ehdr[5] != 1:
            return  # only 64-bit little-endian objects (x86-64)
        (_, _, _, _, _, _, shoff, _, _, _, _, shentsize, shnum, _) = _EHDR.unpack(ehdr)
        if shoff == 0 or shentsize < _SHDR.size:
            return
        if shnum == 0:  # more than 0xff00 sections: the count is section 0's size
            shnum = _SHDR.unpack(_pread(fd, _SHDR.size, shoff, size))[5]
        table = _pread(fd, shnum * shentsize, shoff, size)
        sections = [_SHDR.unpack_from(table, i * shentsize) for i in range(shnum)]
        for want in (_SHT_SYMTAB, _SHT_DYNSYM):  # .symtab, else (or if it lies) .dynsym
            found = [s for s in sections if s[1] == want]
            if not found:
                continue
            _, _, _, _, off, length, link, _, _, entsize = found[0]
            if entsize != _SYM_DTYPE.itemsize or link >= shnum or length > _SYMTAB_MAX:
                continue
            stroff, strsize = sections[link][4], sections[link][5]
            if stroff + strsize > size:
                continue
            count = length // _SYM_DTYPE.itemsize
            try:
                raw = _pread(fd, count * _SYM_DTYPE.itemsize, off, size)
            except _Truncated:
                continue
            syms = np.frombuffer(raw, _SYM_DTYPE)
            kind = syms["info"] & 0xF
            keep = ((syms["shndx"] != 0) & (syms["value"] != 0) & (syms["name"] < strsize)
                    & ((kind == _STT_FUNC) | (kind == _STT_GNU_IFUNC)))
            syms = syms[keep]
            if len(syms) == 0:
                continue
            order = np.argsort(syms["value"], kind="stable")
            syms = syms[order]
            self.starts = syms["value"].copy()
            self.ends = self.starts + np.maximum(syms["size"], 1)
            self._name_at = syms["name"].astype(np.uint64) + np.uint64(stroff)
            self._strtab_end = stroff + strsize
            return

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, i: int) -> str:
        """The name of symbol ``i`` (in address order); "" if the file is
        no longer the one its symbols were read from."""
        opened = _open_regular(self.path)
        if opened is None:
            return ""
        fd, st = opened
        try:
            if _identity(st) != self.identity:
                return ""
            at = int(self._name_at[i])
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
