"""The one reader of ``/proc/PID/maps`` on the Python side (the C core has
its own, csrc/core/procfs.c): a typed record per line and the queries
memhook's modules ask of it.

A line is ``start-end perms offset dev inode [path]``; the path is empty
for an anonymous mapping, ``[heap]``-like for the kernel's own, and may end
in `` (deleted)``.  Lines that do not read as one are skipped, never
guessed at.  tests/test_layering.py fails on a second reader in memhook/.

>>> m = parse_maps("7f00-7f80 r-xp 00001000 fe:00 77  /usr/lib/libfoo.so\\n")[0]
>>> (hex(m.start), m.perms, m.offset, m.path, m.executable, m.is_file)
('0x7f00', 'r-xp', 4096, '/usr/lib/libfoo.so', True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["ExecutableMapping", "Mapping", "executable_mappings", "file_paths", "parse_maps",
           "read_maps", "read_maps_text"]


@dataclass(frozen=True)
class Mapping:
    """One line of ``/proc/PID/maps``."""

    start: int
    end: int
    perms: str    # "r-xp": read, write, execute, private (p) or shared (s)
    offset: int   # of the file, where start maps
    path: str     # "" for anonymous memory

    @property
    def executable(self) -> bool:
        return "x" in self.perms[:3]

    @property
    def is_file(self) -> bool:
        """Backed by a file (a path), not anonymous nor the kernel's
        (``[stack]``, ``[vdso]``, ``[anon:...]``)."""
        return self.path.startswith("/")


class ExecutableMapping(NamedTuple):
    """An executable file mapping and where the file's offset 0 maps."""

    start: int
    end: int
    path: str
    base: int


def parse_maps(text: str) -> list[Mapping]:
    """The mappings of a ``/proc/PID/maps`` text, in its order (lines it
    cannot read are skipped)."""
    out = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        lo, sep, hi = fields[0].partition("-")
        try:
            start, end, offset = int(lo, 16), int(hi, 16), int(fields[2], 16)
        except ValueError:
            continue
        if not sep or end <= start:
            continue
        out.append(Mapping(start, end, fields[1], offset,
                           fields[5].strip() if len(fields) == 6 else ""))
    return out


def read_maps_text(pid: int | str = "self") -> str:
    """The text of ``/proc/PID/maps``; OSError when it cannot be read (the
    process is gone, or not ours to look at)."""
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
        return f.read()


def read_maps(pid: int | str = "self") -> list[Mapping]:
    """The mappings of a process; empty when its maps cannot be read."""
    try:
        return parse_maps(read_maps_text(pid))
    except OSError:
        return []


def executable_mappings(pid: int | str = "self") -> list[ExecutableMapping]:
    """The executable file mappings of a process, in the kernel's order,
    each with the address its file's offset 0 maps at (the file's first
    mapping's start minus that mapping's offset).  Empty when the maps
    cannot be read."""
    bases: dict[str, int] = {}
    out = []
    for m in read_maps(pid):
        if not m.is_file:
            continue
        base = bases.setdefault(m.path, m.start - m.offset)
        if m.executable:
            out.append(ExecutableMapping(m.start, m.end, m.path, base))
    return out


def file_paths(pid: int | str = "self") -> list[str]:
    """Every file mapped into a process, once each, in the kernel's order."""
    return list(dict.fromkeys(m.path for m in read_maps(pid) if m.is_file))
