"""Whether a program will run without the core: ``csrc/trace/trace_escape.c``'s
rules, for CMD itself (which ``memhook trace`` starts; every later program
is checked by the traced process that starts it).

A set-user-ID or set-group-ID program whose ids differ from ours (or one
with file capabilities, for a caller that is not root) runs AT_SECURE, and
the loader ignores LD_PRELOAD; a static ELF has no loader; an ELF of
another class or machine cannot load the x86-64 core.  The last two count
only when the file names a CUDA library: one that cannot load the driver
has no call to miss.  A ``#!`` script is its interpreter.
"""

from __future__ import annotations

import os
import stat
import struct
from typing import BinaryIO

from . import protocol

__all__ = ["escape_of"]

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_PHDR = struct.Struct("<IIQQQQQQ")         # Elf64_Phdr
_PT_INTERP, _EM_X86_64, _ELFCLASS64 = 3, 62, 2
_LOADER = "/lib64/ld-linux-x86-64.so.2"
_CUDA_NAME = b"libcuda"
_CHUNK = 1 << 20


def _names_cuda(f: BinaryIO) -> bool:
    f.seek(0)
    tail = b""
    while chunk := f.read(_CHUNK):
        if _CUDA_NAME in tail + chunk:
            return True
        tail = chunk[-(len(_CUDA_NAME) - 1):]
    return False


def _secure(st: os.stat_result, path: str) -> bool:
    setuid = bool(st.st_mode & stat.S_ISUID)
    setgid = st.st_mode & (stat.S_ISGID | stat.S_IXGRP) == (stat.S_ISGID | stat.S_IXGRP)
    if (setuid or setgid) and os.statvfs(path).f_flag & os.ST_NOSUID:
        setuid = setgid = False
    euid = st.st_uid if setuid else os.geteuid()
    egid = st.st_gid if setgid else os.getegid()
    if euid != os.getuid() or egid != os.getgid():
        return True
    if os.getuid() == 0:
        return False
    try:
        return len(os.getxattr(path, "security.capability")) > 0
    except OSError:
        return False


def _elf(f: BinaryIO, st: os.stat_result, head: bytes) -> int:
    (ident, e_type, machine, _, _, phoff, _, _, _, phentsize, phnum, _, _,
     _) = _EHDR.unpack_from(head)
    if ident[4] != _ELFCLASS64 or machine != _EM_X86_64:
        return protocol.ESCAPE_FOREIGN if _names_cuda(f) else 0
    try:
        loader = os.stat(_LOADER)
        if (loader.st_dev, loader.st_ino) == (st.st_dev, st.st_ino):
            return 0  # `ld.so PROG`: the loader honours LD_PRELOAD
    except OSError:
        pass
    if e_type not in (2, 3) or phentsize != _PHDR.size or phnum == 0:
        return 0
    f.seek(phoff)
    table = f.read(phnum * _PHDR.size)
    if len(table) < phnum * _PHDR.size:
        return 0
    if any(_PHDR.unpack_from(table, i * _PHDR.size)[0] == _PT_INTERP for i in range(phnum)):
        return 0
    return protocol.ESCAPE_STATIC if _names_cuda(f) else 0


def escape_of(path: str) -> tuple[int, str] | None:
    """(protocol.ESCAPE_*, the program that escapes) when the program at
    ``path`` will run without the core, else None (also when it cannot be
    read: the exec then fails or runs it through a shell, traced)."""
    for depth in range(5):  # the kernel's limit of interpreter levels
        try:
            # O_NONBLOCK: a FIFO at the path must not hold us (a regular
            # file's reads ignore it).
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            with open(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    return None
                head = f.read(256)
                if head.startswith(b"#!"):
                    words = head[2:].split(b"\n", 1)
                    if len(words) < 2 or not words[0].split():
                        return None
                    path = os.fsdecode(words[0].split()[0])
                    continue
                if _secure(st, path):
                    return protocol.ESCAPE_SECURE, path
                if len(head) >= _EHDR.size and head[:4] == b"\x7fELF":
                    why = _elf(f, st, head)
                    return (why, path) if why else None
                return None
        except OSError:
            return None
    return None
