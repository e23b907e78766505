"""The wire format between traced processes and the ``memhook trace`` collector.

Mirrors ``csrc/trace/trace_proto.h`` (a test compares the two): one Unix
``SOCK_SEQPACKET`` connection per traced process image, one message:

* HELLO - who the process is (:class:`Hello`), with its trace area's memfd
  as ``SCM_RIGHTS`` (events travel in the area: :mod:`memhook.cli.area`);
  believed only as far as the kernel confirms it (:mod:`memhook.cli.peers`);
* NESTED - a header alone, from a ``memhook trace`` run inside a traced
  program, to the outer collector: its command's events go to it
  (:func:`nested_message`).

EVENTS and BYE are version 1's and no longer sent.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from .._event_layout import EVENT_DTYPE

__all__ = [
    "BATCH", "BYE", "EVENT", "EVENTS", "EVENT_DTYPE", "HEADER", "HELLO", "HELLO_FIXED",
    "HELLO_FORKED", "MAGIC", "MAX_MESSAGE", "NESTED", "VERSION", "Hello", "ProtocolError",
    "events", "nested_message", "parse_bye", "parse_header", "parse_hello",
]

MAGIC = 0x3154484D          # "MHT1"
VERSION = 4  # 3: events carry caller, module and stack records; 4: Python and code records
HELLO, EVENTS, BYE, NESTED = 1, 2, 3, 4
BATCH = 1024                # most events in one EVENTS message
HELLO_FORKED = 0x1

HEADER = struct.Struct("<IHHII")            # magic, version, type, count, reserved
HELLO_FIXED = struct.Struct("<iiIiIIQIIII")  # mh_trace_hello (48 bytes)
_BYE = struct.Struct("<Q")

EVENT = struct.Struct("<QQQQQhhhhiiiI")
"""``memhook_event`` as a struct, in memory order (caller 5th)."""


MAX_MESSAGE = HEADER.size + BATCH * EVENT_DTYPE.itemsize + 8192
"""A receive buffer that holds any message whole (HELLO is at most ~3.6 KiB)."""

assert HEADER.size == 16 and HELLO_FIXED.size == 48 and EVENT_DTYPE.itemsize == 64 == EVENT.size


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
    if kind == EVENTS and len(data) != HEADER.size + count * EVENT_DTYPE.itemsize:
        raise ProtocolError(f"EVENTS message of {len(data)} bytes does not hold {count} events")
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


def parse_bye(data: bytes) -> int | None:
    """events_sent of a BYE message (None if it carries none)."""
    if len(data) < HEADER.size + _BYE.size:
        return None
    return int(_BYE.unpack_from(data, HEADER.size)[0])


def events(data: bytes) -> list[tuple]:
    """The events of an EVENTS message, as tuples in EVENT_DTYPE's field
    order (seq, address, size, timestamp_ns, kind, function, mem_type,
    device, pid, tid, result, flags, caller)."""
    return [r[:4] + r[5:] + r[4:5] for r in EVENT.iter_unpack(memoryview(data)[HEADER.size:])]
