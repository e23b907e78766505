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
import mmap
import os
import struct
import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["Caller", "ElfSymbols", "elf_symbols", "executable_mappings", "resolve_local"]


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
_SYM = struct.Struct("<IBBHQQ")
_SHT_SYMTAB, _SHT_DYNSYM = 2, 11
_STT_FUNC, _STT_GNU_IFUNC = 2, 10


_SYM_DTYPE = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                       ("value", "<u8"), ("size", "<u8")])


class ElfSymbols:
    """The function symbols of one ELF file, sorted by address (vaddr, as in
    the file: add the load base to compare with a running address).

    The file is mapped, not read: libtorch_cuda.so is over a gigabyte, and
    only its section headers, symbol table and the names asked for are ever
    touched.  Names are decoded on lookup.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.starts = np.zeros(0, np.uint64)
        self.ends = np.zeros(0, np.uint64)
        self._name_at = np.zeros(0, np.uint64)
        self._map: mmap.mmap | None = None
        try:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        except (OSError, ValueError):  # unreadable, or empty
            return
        try:
            self._load(self._map)
        except (struct.error, IndexError, ValueError):
            self.starts = self.ends = self._name_at = np.zeros(0, np.uint64)

    def _load(self, data: mmap.mmap) -> None:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return  # only 64-bit little-endian objects (x86-64)
        (_, _, _, _, _, _, shoff, _, _, _, _, shentsize, shnum, _) = _EHDR.unpack_from(data)
        sections = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
        for want in (_SHT_SYMTAB, _SHT_DYNSYM):
            table = [s for s in sections if s[1] == want]
            if not table:
                continue
            _, _, _, _, off, size, link, _, _, _ = table[0]
            stroff = sections[link][4]
            syms = np.frombuffer(data, _SYM_DTYPE, size // _SYM_DTYPE.itemsize, off)
            kind = syms["info"] & 0xF
            keep = ((syms["shndx"] != 0) & (syms["value"] != 0)
                    & ((kind == _STT_FUNC) | (kind == _STT_GNU_IFUNC)))
            syms = syms[keep]
            if len(syms) == 0:
                continue
            order = np.argsort(syms["value"], kind="stable")
            syms = syms[order]
            self.starts = syms["value"].copy()
            self.ends = self.starts + np.maximum(syms["size"], 1)
            self._name_at = syms["name"].astype(np.uint64) + np.uint64(stroff)
            return

    def __len__(self) -> int:
        return len(self.starts)

    def name(self, i: int) -> str:
        """The name of symbol ``i`` (in address order)."""
        assert self._map is not None
        at = int(self._name_at[i])
        end = self._map.find(b"\0", at)
        return self._map[at:end].decode("utf-8", "replace")

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(symbol, offset) of the function holding ``vaddr``, or None."""
        if vaddr < 0 or vaddr >= 1 << 64:
            return None
        i = int(np.searchsorted(self.starts, np.uint64(vaddr), side="right")) - 1
        if i < 0 or vaddr >= int(self.ends[i]):
            return None
        return self.name(i), vaddr - int(self.starts[i])


@functools.lru_cache(maxsize=256)
def elf_symbols(path: str) -> ElfSymbols:
    """The symbols of ``path``, read once (an object's file is assumed not to
    change while it is in use)."""
    return ElfSymbols(path)


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


def executable_mappings(pid: int | str = "self") -> list[tuple[int, int, str, int]]:
    """The executable file mappings of a process, from ``/proc/PID/maps``:
    (start, end, path, base) in the kernel's order, where ``base`` is the
    address the file's offset 0 maps at (its first mapping's start minus
    that mapping's offset).  Empty when the file cannot be read (the process
    is gone)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.readlines()
    except OSError:
        return []
    bases: dict[str, int] = {}
    out = []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        path = parts[5].rstrip("\n")
        bases.setdefault(path, lo - int(parts[2], 16))
        if "x" in parts[1]:
            out.append((lo, hi, path, bases[path]))
    return out


class _LocalMaps:
    """This process's file mappings, reread when an address is in none of
    them (an object loaded since)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[int] = []
        self.entries: list[tuple[int, int, str, int]] = []  # start, end, path, base
        self.cache: dict[int, Caller] = {}

    def _reload(self) -> None:
        entries = sorted(executable_mappings())
        self.entries = entries
        self.starts = [e[0] for e in entries]

    def _find(self, address: int) -> tuple[int, int, str, int] | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.entries[i][1]:
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
                      else describe(entry[2], entry[3], address))
            if len(self.cache) > 65536:
                self.cache.clear()
            self.cache[address] = caller
            return caller


_local = _LocalMaps()


def resolve_local(address: int) -> Caller:
    """Name ``address`` of this process (cached by address)."""
    return _local.resolve(address)
