"""Where a stripped object's function symbols went: the places a
distribution keeps them, for :mod:`memhook._objects.symbolize`.

A shipped library usually has no ``.symtab`` (``strip``), so a return
address inside one of its local functions (libffi's ``ffi_call_unix64``,
a Cython module's ``__pyx_pw_...``) has no name in it.  Two places may
still hold the names, and both are looked at, in this order:

* a **separate debug file** (Debian's ``-dbgsym``, Fedora's ``-debuginfo``,
  a ``.debug`` file beside a self-built library): found by the object's
  build ID, ``DIR/.build-id/xx/rest.debug`` under each of
  :data:`DEBUG_DIRS`, or by its ``.gnu_debuglink`` name, beside the object,
  in a ``.debug`` folder beside it, or under each of :data:`DEBUG_DIRS`
  followed by the object's folder (as gdb looks).  A file found by name
  counts only if its build ID is the object's (when both have one);
* **MiniDebugInfo** (Fedora, RHEL): an xz-compressed ELF holding a
  ``.symtab`` of the functions ``.dynsym`` leaves out, in the object's own
  ``.gnu_debugdata`` section.

Everything here reads the traced program's files, which may lie: sizes
are bounded, a decompression is bounded, and nothing found is trusted
beyond being an ELF file the symbol reader checks again.
"""

from __future__ import annotations

import lzma
import os
import struct

__all__ = ["DEBUG_DIRS", "MINI_MAX", "build_id", "debug_file", "debuglink", "mini_debuginfo"]

DEBUG_DIRS: tuple[str, ...] = ("/usr/lib/debug",)
"""The global debug folders, as gdb's ``debug-file-directory``."""

MINI_MAX = 64 << 20
"""The most bytes a MiniDebugInfo section may decompress to."""

_NOTE = struct.Struct("<III")
_NT_GNU_BUILD_ID = 3
_LINK_MAX = 4096


def build_id(notes: bytes) -> bytes | None:
    """The GNU build ID in the contents of a note section, or None."""
    at = 0
    while at + _NOTE.size <= len(notes):
        namesz, descsz, kind = _NOTE.unpack_from(notes, at)
        at += _NOTE.size
        name_end = at + (namesz + 3) // 4 * 4
        desc_end = name_end + (descsz + 3) // 4 * 4
        if desc_end > len(notes):
            return None
        if kind == _NT_GNU_BUILD_ID and notes[at:at + namesz].rstrip(b"\0") == b"GNU":
            return notes[name_end:name_end + descsz] or None
        at = desc_end
    return None


def debuglink(section: bytes) -> str | None:
    """The file name a ``.gnu_debuglink`` section names (its CRC is not
    checked: a build ID is, where there is one), or None."""
    name = section[:_LINK_MAX].split(b"\0", 1)[0]
    if not name or b"/" in name or name in (b".", b".."):
        return None
    return os.fsdecode(name)


def _regular(path: str) -> bool:
    try:
        return os.path.isfile(path)
    except (OSError, ValueError):
        return False


def debug_file(path: str, bid: bytes | None, link: str | None,
               id_of: object = None) -> str | None:
    """The separate debug file of the object at ``path`` (its build ID
    ``bid``, its debuglink name ``link``), or None.  ``id_of(candidate)``
    gives a candidate's build ID: one found by name must match ``bid``."""
    if bid is not None and len(bid) >= 2:
        hexid = bid.hex()
        for root in DEBUG_DIRS:
            candidate = os.path.join(root, ".build-id", hexid[:2], hexid[2:] + ".debug")
            if _regular(candidate):
                return candidate
    if link is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    candidates = [os.path.join(folder, link), os.path.join(folder, ".debug", link)]
    candidates += [os.path.join(root + folder, link) for root in DEBUG_DIRS]
    for candidate in candidates:
        if os.path.abspath(candidate) == os.path.abspath(path) or not _regular(candidate):
            continue
        if bid is not None and callable(id_of) and id_of(candidate) != bid:
            continue  # (another build's debug file: its addresses would lie)
        return candidate
    return None


def mini_debuginfo(section: bytes) -> bytes | None:
    """The ELF file a ``.gnu_debugdata`` section holds, decompressed (at
    most :data:`MINI_MAX` bytes), or None when it is not xz data."""
    try:
        d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        data = d.decompress(section, max_length=MINI_MAX)
    except (lzma.LZMAError, EOFError, MemoryError):
        return None
    if not d.eof or data[:4] != b"\x7fELF":
        return None  # (cut, or larger than MINI_MAX)
    return data
