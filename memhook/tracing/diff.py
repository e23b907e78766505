"""``memhook diff A B``'s figures: what each of two traces allocated, per
calling library and per call site, and what changed.

A :class:`Profile` reads one trace's events as they stream by and keeps
aggregates only: per library and per site a :class:`Figures`, plus the
live allocations (what a FREE must find).  Its accounting is the trace
summary's (:mod:`memhook.tracing.ledger`): a failed call allocates nothing,
module globals are not allocations, a FREE matches an ALLOC of the same
pid, a context teardown frees what its process held on that device, and
what is live at the end of the trace was never freed.

The call site of an allocation is the program's own code in its Python
frames (:attr:`memhook.tracing.pyframes.PyStack.site`: the two innermost
frames outside the standard library, installed packages and memhook),
where the trace has them (``--python``); else its native caller
(``library!symbol+offset``).
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Iterable

from .ledger import GLOBAL_FUNCTIONS, HOST_KEY, human_size
from .pyframes import PyFrame, PyStack
from .._values.printable import printable
from .tracefile import Event

__all__ = ["CONTEXT_TEARDOWNS", "DiffRow", "Figures", "Profile", "Status", "diff_rows",
           "format_diff", "site_of"]

CONTEXT_TEARDOWNS = ("cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxRelease", "cuCtxDestroy")
"""Functions whose successful FREE record is a context teardown (jsonl keeps
no flags; the hooks record these only when the context goes)."""

_SITE_CACHE_MAX = 100_000


@dataclasses.dataclass
class Figures:
    """One library's or site's figures in one trace."""

    allocations: int = 0
    bytes: int = 0
    peak_bytes: int = 0
    never_freed_bytes: int = 0
    live: int = dataclasses.field(default=0, repr=False)

    def as_dict(self) -> dict[str, int]:
        return {"allocations": self.allocations, "bytes": self.bytes,
                "peak_bytes": self.peak_bytes, "never_freed_bytes": self.never_freed_bytes}


_METRICS = ("allocations", "bytes", "peak_bytes", "never_freed_bytes")


def site_of(event: Event, cache: dict | None = None) -> str:
    """The call site an ALLOC is counted by (see the module's docstring)."""
    python = event.python
    if not python:
        return event.caller_short
    try:
        key = tuple((f["file"], f["line"], f["function"]) for f in python)
    except (KeyError, TypeError):
        return event.caller_short
    site = cache.get(key) if cache is not None else None
    if site is None:
        stack = PyStack(tuple(PyFrame(str(file), int(line or 0), str(fn))
                              for file, line, fn in key))
        site = stack.site
        if cache is not None:
            if len(cache) >= _SITE_CACHE_MAX:
                cache.clear()
            cache[key] = site
    return site


class Profile:
    """One trace's figures, by calling library and by call site."""

    def __init__(self) -> None:
        self.libraries: dict[str, Figures] = {}
        self.sites: dict[str, Figures] = {}
        self.events = 0
        # (pid, address) -> (library's, site's figures, size, device key)
        self._live: dict[tuple[int, int], tuple[Figures, Figures, int, int]] = {}
        self._sites_cache: dict = {}
        self._basenames: dict[str, str] = {}
        self._finished = False

    def add(self, e: Event) -> None:
        self.events += 1
        if e.result:
            return
        if e.alloc:
            if not e.address or e.function in GLOBAL_FUNCTIONS:
                return
            lib_name = self._basenames.get(e.caller)
            if lib_name is None:
                if len(self._basenames) > _SITE_CACHE_MAX:
                    self._basenames.clear()
                lib_name = self._basenames[e.caller] = os.path.basename(e.caller) or "?"
            lib = self.libraries.get(lib_name)
            if lib is None:
                lib = self.libraries[lib_name] = Figures()
            site_name = site_of(e, self._sites_cache)
            site = self.sites.get(site_name)
            if site is None:
                site = self.sites[site_name] = Figures()
            old = self._live.pop((e.pid, e.address), None)
            if old is not None:  # its FREE was not seen (an exec between): never freed
                self._leave(old, freed=False)
            key = HOST_KEY if e.mem_type == "CUDA_HOST" else e.device
            self._live[(e.pid, e.address)] = (lib, site, e.size, key)
            for f in (lib, site):
                f.allocations += 1
                f.bytes += e.size
                f.live += e.size
                if f.live > f.peak_bytes:
                    f.peak_bytes = f.live
        elif e.function.startswith(CONTEXT_TEARDOWNS):
            gone = [k for k, v in self._live.items()
                    if k[0] == e.pid and (e.device < 0 or v[3] in (e.device, -1, HOST_KEY))]
            for k in gone:
                self._leave(self._live.pop(k), freed=True)
        else:
            old = self._live.pop((e.pid, e.address), None)
            if old is not None:
                self._leave(old, freed=True)

    @staticmethod
    def _leave(entry: tuple[Figures, Figures, int, int], freed: bool) -> None:
        lib, site, size, _ = entry
        for f in (lib, site):
            f.live -= size
            if not freed:
                f.never_freed_bytes += size

    def finish(self) -> None:
        """The end of the trace: what is live was never freed."""
        if self._finished:
            return
        self._finished = True
        for entry in self._live.values():
            self._leave(entry, freed=False)
        self._live.clear()


class Status(enum.Enum):
    """How a row changed from A to B."""

    NEW = "new"        # in B only
    GONE = "gone"      # in A only
    GROWN = "grown"    # some figure rose, none fell
    SHRUNK = "shrunk"  # some figure fell, none rose
    MIXED = "mixed"    # some rose, some fell
    SAME = "same"


@dataclasses.dataclass(frozen=True)
class DiffRow:
    name: str
    a: Figures | None
    b: Figures | None

    @property
    def change(self) -> dict[str, int]:
        a, b = self.a or Figures(), self.b or Figures()
        return {m: getattr(b, m) - getattr(a, m) for m in _METRICS}

    @property
    def status(self) -> Status:
        if self.a is None:
            return Status.NEW
        if self.b is None:
            return Status.GONE
        deltas = self.change.values()
        up, down = any(d > 0 for d in deltas), any(d < 0 for d in deltas)
        if up and down:
            return Status.MIXED
        return Status.GROWN if up else Status.SHRUNK if down else Status.SAME

    @property
    def magnitude(self) -> tuple[int, int]:
        """The sort key: the largest change in bytes (total, peak or never
        freed), then in allocations."""
        c = self.change
        return (max(abs(c["bytes"]), abs(c["peak_bytes"]), abs(c["never_freed_bytes"])),
                abs(c["allocations"]))

    def as_dict(self) -> dict:
        zero = Figures().as_dict()
        return {"name": self.name, "status": self.status.value,
                "a": self.a.as_dict() if self.a else zero,
                "b": self.b.as_dict() if self.b else zero, "change": self.change}


def diff_rows(a: dict[str, Figures], b: dict[str, Figures]) -> list[DiffRow]:
    """Every name of either, the largest change first."""
    rows = [DiffRow(name, a.get(name), b.get(name)) for name in a.keys() | b.keys()]
    rows.sort(key=lambda r: (-r.magnitude[0], -r.magnitude[1], r.name))
    return rows


def _signed(n: int, human: bool) -> str:
    if n == 0:
        return "0"
    text = human_size(abs(n)) if human else f"{abs(n):,}"
    return ("+" if n > 0 else "-") + text


def _table(title: str, rows: list[DiffRow], top: int) -> list[str]:
    changed = [r for r in rows if r.status is not Status.SAME]
    shown = changed if top <= 0 else changed[:top]
    heads = ("allocs A", "allocs B", "change", "bytes A", "bytes B", "change",
             "peak A", "peak B", "change", "unfreed A", "unfreed B", "change")
    out = [f"{title}:",
           "  " + f"{'status':<7}" + "".join(f"{h:>11}" for h in heads) + "  name"]
    for r in shown:
        a, b, c = r.a or Figures(), r.b or Figures(), r.change
        cells: list[str] = []
        for m in _METRICS:
            human = m != "allocations"
            fmt = human_size if human else (lambda n: f"{n:,}")
            cells += [fmt(getattr(a, m)), fmt(getattr(b, m)), _signed(c[m], human)]
        out.append("  " + f"{r.status.value:<7}" + "".join(f"{x:>11}" for x in cells)
                   + "  " + printable(r.name))
    if not changed:
        out.append("  (no change)")
    hidden = len(changed) - len(shown)
    same = len(rows) - len(changed)
    notes = []
    if hidden:
        notes.append(f"{hidden} more changed (--top 0 shows all)")
    if same:
        notes.append(f"{same} unchanged")
    if notes:
        out.append(f"  ({'; '.join(notes)}; --json lists every one)")
    return out


def format_diff(names: tuple[str, str], profiles: tuple[Profile, Profile], top: int = 20,
                notes: Iterable[str] = ()) -> str:
    """The text report: both tables, the largest change first."""
    a, b = profiles
    lines = [f"memhook diff: A = {printable(names[0])} ({a.events:,} events), "
             f"B = {printable(names[1])} ({b.events:,} events)",
             "  figures: allocations, bytes allocated, peak live bytes, bytes never freed; "
             "change = B - A", ""]
    lines += _table("by calling library", diff_rows(a.libraries, b.libraries), top)
    lines.append("")
    lines += _table("by call site (the program's own Python frame; else the native caller)",
                    diff_rows(a.sites, b.sites), top)
    lines += [f"warning: {printable(n)}" for n in notes]
    return "\n".join(lines) + "\n"
