"""The hook path's read-mostly variables (MH_HOT, csrc/core/mh_visibility.h)
sit on one cache line of the built core: every hooked call reads them, and
after the real driver's call has pushed memhook's lines out of L1 each line
they spread over is one more miss.  A variable added with MH_HOT that does
not fit moves the section onto a second line; this says so at build time
rather than in a GPU run's figures.  The same holds for the path's
thread-locals (csrc/core/mh_hook_thread.h): one line-aligned block."""

from __future__ import annotations

import struct
from pathlib import Path

import memhook

LINE = 64
CORE = Path(memhook.__file__).resolve().parent / "libmemhook.so"


def elf_headers(path: Path) -> tuple[bytes, list[tuple[int, ...]], bytes]:
    """(the file, its section headers, the section-name table) of an ELF64
    little-endian file."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not an ELF64 little-endian file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link,
    # sh_info, sh_addralign, sh_entsize
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
               for i in range(shnum)]
    strtab = headers[shstrndx]
    return data, headers, data[strtab[4]:strtab[4] + strtab[5]]


def tls_symbol(path: Path, name: str) -> tuple[int, int, int]:
    """(offset in the TLS block, size, the block's alignment) of the TLS
    symbol `name` in .symtab; KeyError when there is none."""
    data, headers, _ = elf_headers(path)
    tls_align = max((h[8] for h in headers if h[2] & 0x400), default=0)  # SHF_TLS
    for h in headers:
        if h[1] != 2:  # SHT_SYMTAB
            continue
        names = headers[h[6]]
        for off in range(h[4], h[4] + h[5], 24):
            st_name, st_info, _, _, st_value, st_size = struct.unpack_from("<IBBHQQ", data, off)
            if st_info & 0xF != 6:  # STT_TLS
                continue
            start = names[4] + st_name
            if data[start:data.index(b"\0", start)].decode() == name:
                return st_value, st_size, tls_align
    raise KeyError(f"{path}: no TLS symbol {name}")


def elf_section(path: Path, name: str) -> tuple[int, int, int]:
    """(address, size, alignment) of section `name` of an ELF64
    little-endian file; KeyError when it has none."""
    _, headers, names = elf_headers(path)
    for h in headers:
        if names[h[0]:names.index(b"\0", h[0])].decode() == name:
            return h[3], h[5], h[8]
    raise KeyError(f"{path}: no section {name}")


def test_the_hook_paths_switches_share_one_cache_line() -> None:
    addr, size, align = elf_section(CORE, "memhook_hot")
    assert align >= LINE and addr % LINE == 0, (
        f"memhook_hot starts at {addr:#x}, alignment {align}: csrc/core/hot.c's anchor "
        f"should start it on a line")
    assert size <= LINE, (
        f"memhook_hot is {size} bytes, {-(-size // LINE)} cache lines: keep MH_HOT for the "
        f"variables every hooked call reads (nm -n {CORE} lists what is in it)")


def test_the_hook_paths_thread_locals_share_one_cache_line() -> None:
    offset, size, align = tls_symbol(CORE, "mh_hook_tl")
    assert align >= LINE and offset % LINE == 0 and size <= LINE, (
        f"mh_hook_tl is {size} bytes at offset {offset:#x} of a TLS block aligned to {align}: "
        f"the hook path's thread-locals should fill one line (csrc/core/mh_hook_thread.h)")


def test_reads_a_section_as_readelf_does(tmp_path: Path) -> None:
    """The reader itself, on a file it must refuse and on the core's .text."""
    bad = tmp_path / "not_elf"
    bad.write_bytes(b"#!/bin/sh\n")
    try:
        elf_section(bad, ".text")
    except ValueError as e:
        assert "not an ELF64" in str(e)
    else:
        raise AssertionError("read a shell script as ELF")
    addr, size, _ = elf_section(CORE, ".text")
    assert addr > 0 and size > 4096
