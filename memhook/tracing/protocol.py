"""The wire format between traced processes and the ``memhook trace`` collector.

Mirrors ``csrc/trace/trace_proto.h`` (a test compares the two): one Unix
``SOCK_SEQPACKET`` connection per traced process image, one message:

* HELLO - who the process is (:class:`Hello`), with its trace area's memfd
  as ``SCM_RIGHTS`` (events travel in the area: :mod:`memhook.tracing.area`);
  believed only as far as the kernel confirms it (:mod:`memhook.tracing.peers`);
* NESTED - a header alone, from a ``memhook trace`` run inside a traced
  program, to the outer collector: its command's events go to it
  (:func:`nested_message`).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from .._event_layout import EVENT_DTYPE

__all__ = [
    "EVENT_DTYPE", "HEADER", "HELLO", "HELLO_FIXED", "HELLO_FORKED", "MAGIC", "MAX_MESSAGE",
    "NESTED", "VERSION", "Hello", "ProtocolError", "nested_message", "parse_header",
    "parse_hello",
]

MAGIC = 0x3154484D          # "MHT1"
VERSION = 4  # 3: events carry caller, module and stack records; 4: Python and code records
HELLO, NESTED = 1, 4          # (2 and 3 were version 1's EVENTS and BYE)
HELLO_FORKED = 0x1

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


def nested_message() -> bytes:
    """A NESTED message (sent by :mod:`memhook.cli.trace`)."""
    return HEADER.pack(MAGIC, VERSION, NESTED, 0, 0)
