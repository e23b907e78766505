"""The wire format between traced processes and the ``memhook trace`` collector.

Mirrors ``csrc/trace/trace_proto.h`` (a test compares the two): one Unix
``SOCK_SEQPACKET`` connection per traced process image, one message:

* HELLO - who the process is (:class:`Hello`), with its trace area's memfd
  as ``SCM_RIGHTS`` (events travel in the area: :mod:`memhook.tracing.area`);
  believed only as far as the kernel confirms it (:mod:`memhook.tracing.peers`);
* NESTED - a header alone, from a ``memhook trace`` run inside a traced
  program, to the outer collector: its command's events go to it
  (:func:`nested_message`);
* ESCAPE - from a traced process about to exec or spawn a program the core
  cannot follow into: the header's count says why, the path follows
  (:func:`parse_escape`);
* EXPECT - a header alone with a pidfd (``SCM_RIGHTS``) of a process whose
  first traced image is still to come (a posix_spawn child, from its
  parent; a vfork child, from itself before its exec): the collector waits
  for it until one of its images says HELLO or it ends.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from .._events.layout import EVENT_DTYPE

__all__ = [
    "EVENT_DTYPE", "HEADER", "HELLO", "HELLO_FIXED", "HELLO_FORKED", "MAGIC", "MAX_MESSAGE",
    "ESCAPE", "EXPECT", "NESTED", "VERSION", "Escape", "Hello", "ProtocolError", "nested_message",
    "parse_escape", "parse_header", "parse_hello",
]

MAGIC = 0x3154484D          # "MHT1"
VERSION = 5  # 3: events carry caller, module and stack records; 4: Python and code records;
#              5: EXPECT
HELLO, NESTED, ESCAPE, EXPECT = 1, 4, 5, 6  # (2 and 3 were version 1's EVENTS and BYE)
HELLO_FORKED = 0x1
ESCAPE_SECURE, ESCAPE_STATIC, ESCAPE_FOREIGN, ESCAPE_ENV = 1, 2, 3, 4
ESCAPE_SPAWNED = 0x100

HEADER = struct.Struct("<IHHII")            # magic, version, type, count, reserved
HELLO_FIXED = struct.Struct("<iiIiIIQIIII")  # mh_trace_hello (48 bytes)

MAX_MESSAGE = 16384
"""A receive buffer that holds any message whole: a HELLO is at most
3,648 bytes (the header, mh_trace_hello, and csrc/trace/trace.c's EXE_MAX,
CMDLINE_MAX and WHY_MAX bytes of strings; a test adds them up)."""

assert HEADER.size == 16 and HELLO_FIXED.size == 48 and EVENT_DTYPE.itemsize == 64


class ProtocolError(ValueError):
    """A message that does not follow trace_proto.h."""


@dataclass
class Hello:
    """The first message of a connection."""

    pid: int
    ppid: int
    mode: int
    install_rc: int
    core_version: int
    flags: int
    start_ns: int
    exe: str
    argv: list[str]
    why: str

    @property
    def forked(self) -> bool:
        return bool(self.flags & HELLO_FORKED)

    @property
    def command(self) -> str:
        """The command line as one string (argv joined), or the exe."""
        return " ".join(self.argv) if self.argv else self.exe


def parse_header(data: bytes) -> tuple[int, int]:
    """(type, count) of a message; ProtocolError if it is not one."""
    if len(data) < HEADER.size:
        raise ProtocolError(f"message of {len(data)} bytes is shorter than a header")
    magic, version, kind, count, _ = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic:#x}")
    if version != VERSION:
        raise ProtocolError(f"protocol version {version}, expected {VERSION}")
    return kind, count


def parse_hello(data: bytes) -> Hello:
    body = memoryview(data)[HEADER.size:]
    if len(body) < HELLO_FIXED.size:
        raise ProtocolError("HELLO message too short")
    (pid, ppid, mode, install_rc, core_version, flags, start_ns, exe_len, cmd_len, why_len,
     _) = HELLO_FIXED.unpack_from(body)
    rest = bytes(body[HELLO_FIXED.size:])
    if exe_len + cmd_len + why_len > len(rest):
        raise ProtocolError("HELLO message shorter than its strings")
    exe = os.fsdecode(rest[:exe_len])
    cmdline = rest[exe_len:exe_len + cmd_len]
    why = rest[exe_len + cmd_len:exe_len + cmd_len + why_len].decode(errors="replace")
    argv = [os.fsdecode(a) for a in cmdline.split(b"\0")]
    if argv and argv[-1] == "":
        argv.pop()
    return Hello(pid, ppid, mode, install_rc, core_version, flags, start_ns, exe, argv, why)


_ESCAPE_WHY = {
    ESCAPE_SECURE: "a set-user-ID or set-group-ID program (or one with file capabilities): "
                   "the kernel runs it in secure mode, where the loader ignores LD_PRELOAD",
    ESCAPE_STATIC: "a statically linked program that names a CUDA library: no loader runs "
                   "for it, so nothing reads LD_PRELOAD",
    ESCAPE_FOREIGN: "a program for another architecture or word size than the core's "
                    "(x86-64) that names a CUDA library: the core cannot be loaded into it",
    ESCAPE_ENV: "its environment was too large to put memhook's variables back into "
                "(on the stack of the exec)",
}


@dataclass
class Escape:
    """A program a traced process started that runs without the core."""

    path: str
    why: int       # ESCAPE_*
    spawned: bool  # by posix_spawn (a child runs it), else exec'd by the sender

    @property
    def reason(self) -> str:
        return _ESCAPE_WHY.get(self.why, f"reason {self.why} (unknown to this memhook)")


def parse_escape(data: bytes) -> Escape:
    """An ESCAPE message (its header already checked by parse_header)."""
    _, _, _, count, _ = HEADER.unpack_from(data)
    path = os.fsdecode(bytes(data[HEADER.size:]))
    return Escape(path or "?", count & 0xFF, bool(count & ESCAPE_SPAWNED))


def nested_message() -> bytes:
    """A NESTED message (sent by :mod:`memhook.cli.trace`)."""
    return HEADER.pack(MAGIC, VERSION, NESTED, 0, 0)
