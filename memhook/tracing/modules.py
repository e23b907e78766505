"""Which object a traced process had loaded where: the collector's copy of
the module records the process wrote into its trace area
(``trace_proto.h``: ``mh_trace_module``), and the naming of caller and
stack addresses with them (:mod:`memhook._objects.symbolize`).

The records are the process's own, written before dlopen returns and
before dlclose unmaps, so they stay right after the process exited or
unloaded an object; a load record is never forgotten.  Where an address
range was reused (an object unloaded, another loaded at the same place),
an event is named after the object loaded last before it (an event of a
constructor, which runs before its object's record is written, after the
earliest one).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from .._objects.procmaps import executable_mappings
from .._objects.symbolize import Caller, describe

__all__ = ["MODULE", "MODULE_LOAD", "MODULE_UNLOAD", "Module", "ModuleMap", "parse_modules"]

MODULE = struct.Struct("<IIQQQQ")
"""``mh_trace_module``: len, kind, ts_ns, base, lo, hi (then the path)."""
MODULE_LOAD, MODULE_UNLOAD = 1, 2


@dataclass(frozen=True)
class Module:
    path: str
    base: int
    lo: int
    hi: int
    ts_ns: int


def parse_modules(data: bytes | memoryview) -> tuple[list[tuple[int, Module]], int]:
    """Complete records of ``data``: ([(kind, Module)], bytes consumed)."""
    out = []
    at = 0
    while at + MODULE.size <= len(data):
        length, kind, ts, base, lo, hi = MODULE.unpack_from(data, at)
        if length < MODULE.size or at + length > len(data):
            break
        raw = bytes(data[at + MODULE.size:at + length])
        path = os.fsdecode(raw.split(b"\0", 1)[0])
        out.append((kind, Module(path, base, lo, hi, ts)))
        at += length
    return out, at


@dataclass
class ModuleMap:
    """One process image's objects, and names for its addresses."""

    modules: list[Module] = field(default_factory=list)
    _los: list[int] = field(default_factory=list)
    _cache: dict[int, Caller] = field(default_factory=dict)
    _known: set[tuple[str, int, int, int]] = field(default_factory=set)
    pid: int = 0
    """While the process lives: where to look (``/proc/PID/maps``) for an
    object no record names yet (bistro alone learns of objects on a poll,
    and its events may be read first)."""
    batch: int = 0   # bumped by the collector at every read of the area
    _maps_batch: int = -1
    alive: Callable[[], bool] | None = None
    """Whether the process :attr:`pid` names is still the one (its pidfd
    has not fired): asked after reading its maps, so a pid reused by
    another process is never read as this one's."""

    def add(self, records: list[tuple[int, Module]]) -> None:
        for kind, m in records:
            if kind != MODULE_LOAD or (m.path, m.base, m.lo, m.hi) in self._known:
                continue  # (the same object at the same place names the same)
            self._known.add((m.path, m.base, m.lo, m.hi))
            i = bisect.bisect_right(self._los, m.lo)
            self._los.insert(i, m.lo)
            self.modules.insert(i, m)
            self._cache.clear()  # (a range may now be ambiguous)

    def inherit(self, parent: ModuleMap) -> None:
        """Start from ``parent``'s objects (a fork child's mappings are its
        parent's, as they were at the fork)."""
        self.add([(MODULE_LOAD, m) for m in parent.modules])

    def _from_proc_maps(self) -> None:
        bases: dict[str, int] = {}
        found: dict[str, list[int]] = {}
        for lo, hi, path, base in executable_mappings(self.pid):
            bases[path] = base
            span = found.setdefault(path, [lo, hi])
            span[0], span[1] = min(span[0], lo), max(span[1], hi)
        if self.alive is not None and not self.alive():
            return
        known = {(m.path, m.base) for m in self.modules}
        self.add([(MODULE_LOAD, Module(p, bases[p], lo, hi, 0)) for p, (lo, hi) in found.items()
                  if (p, bases[p]) not in known])

    def _candidates(self, address: int) -> list[Module]:
        i = bisect.bisect_right(self._los, address)
        return [m for m in self.modules[:i] if m.lo <= address < m.hi]

    def resolve(self, address: int, ts_ns: int = 0) -> Caller | None:
        """The object, symbol and offset of ``address``; None for 0."""
        if not address:
            return None
        hit = self._cache.get(address)
        if hit is not None:
            return hit
        found = self._candidates(address)
        if not found and self.pid and self._maps_batch != self.batch:
            self._maps_batch = self.batch  # once a read at most
            self._from_proc_maps()
            found = self._candidates(address)
        if not found:
            return Caller("", "", address, address)
        if len(found) == 1:
            m = found[0]
        else:
            before = [c for c in found if c.ts_ns <= ts_ns]
            m = (max(before, key=lambda c: c.ts_ns) if before
                 else min(found, key=lambda c: c.ts_ns))
        caller = describe(m.path, m.base, address)
        if len(found) == 1:
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[address] = caller
        return caller
