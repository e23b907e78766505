"""A traced program that also sends the collector a HELLO it should not
believe, while a sibling (``event_storm``) is tracing: for
tests/cli/test_trace_hostile.py.

``python forge.py KIND EVENT_STORM N``: starts ``EVENT_STORM N 500`` (it
records half its events, says so, pauses 0.5 s, records the rest), waits
for its first half, sends a forged HELLO of KIND on MEMHOOK_TRACE_SOCKET,
waits for the sibling and exits with its status.  Prints
``pids: me=PID storm=PID``.  KIND:

* ``readonly``   a well-formed area, its memfd reopened read-only;
* ``bad-offset`` an area whose state array lies past its end;
* ``huge``       an area that claims 16M segments, all used (a 256 GiB
                 sparse memfd: as large as it says);
* ``shrink``     a well-formed area holding 256 events, cut to its header
                 0.3 s after the HELLO (not sealed: nothing stops it);
* ``forged-pid`` a well-formed area whose HELLO claims the sibling's pid;
* ``file``       a well-formed area in a regular file (``forge.py file
                 EVENT_STORM N PATH``), holding a finished segment the
                 collector would give back by writing (and punching) it.
"""

from __future__ import annotations

import array
import os
import socket
import struct
import subprocess
import sys
import time

# trace_proto.h's layout, written here as a hostile process would.
AREA = struct.Struct("<IIIIQQQQQQQiIQQQQQQ")
HEADER = struct.Struct("<IHHII")
HELLO = struct.Struct("<iiIiIIQIIII")
AREA_MAGIC, MAGIC, VERSION, SEG_EVENTS, SEG_BYTES = 0x41544D48, 0x3154484D, 3, 256, 256 * 64


def area(nseg: int, state_off_past_end: bool = False,
         path: str | None = None) -> tuple[int, dict[str, int]]:
    off, offs = 4096, {}
    for name, width in (("state", 4), ("tid", 4), ("claim", 8), ("published", 8), ("done", 8),
                        ("first", 8)):
        offs[name] = off
        off = (off + nseg * width + 63) // 64 * 64
    offs["events"] = (off + 4095) // 4096 * 4096
    size = offs["events"] + nseg * SEG_BYTES
    if state_off_past_end:
        offs["state"] = size
    fd = (os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600) if path
          else os.memfd_create("forged-area"))
    os.ftruncate(fd, size)
    os.pwrite(fd, AREA.pack(AREA_MAGIC, VERSION, SEG_EVENTS, nseg, size, offs["state"],
                            offs["tid"], offs["claim"], offs["published"], offs["done"],
                            offs["events"], os.getpid(), 0, 0, 0, 0, 0, 0, offs["first"]), 0)
    return fd, offs


def hello(pid: int, fd: int) -> None:
    cmd = b"forged\0"
    msg = (HEADER.pack(MAGIC, VERSION, 1, 0, 0)
           + HELLO.pack(pid, os.getppid(), 0, 0, 0, 0, time.monotonic_ns(), 0, len(cmd), 0, 0)
           + cmd)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(os.environ["MEMHOOK_TRACE_SOCKET"])
        s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])


def main() -> int:
    kind, storm, n = sys.argv[1], sys.argv[2], sys.argv[3]
    child = subprocess.Popen([storm, n, "500"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline() == "event_storm: half\n"
    print(f"pids: me={os.getpid()} storm={child.pid}", flush=True)
    if kind == "readonly":
        fd, _ = area(8)
        ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        hello(os.getpid(), ro)
    elif kind == "bad-offset":
        fd, _ = area(8, state_off_past_end=True)
        hello(os.getpid(), fd)
    elif kind == "huge":
        fd, _ = area(1 << 24)
        os.pwrite(fd, struct.pack("<Q", 1 << 24), 128)  # fresh: every segment used
        hello(os.getpid(), fd)
    elif kind == "shrink":
        fd, offs = area(8)
        os.pwrite(fd, struct.pack("<I", 2), offs["state"])        # OWNED
        os.pwrite(fd, struct.pack("<Q", 1), offs["claim"])
        for i in range(SEG_EVENTS):  # ALLOCs of 4 KiB, stamps in order
            os.pwrite(fd, struct.pack("<QQQQ", 0, 0x10000 * (i + 1), 4096, time.monotonic_ns())
                      + struct.pack("<hhhh", 1, 0, 1, 0), offs["events"] + 64 * i)
        os.pwrite(fd, struct.pack("<Q", SEG_EVENTS), offs["published"])
        os.pwrite(fd, struct.pack("<Q", 1), 128)                  # fresh
        hello(os.getpid(), fd)
        time.sleep(0.3)
        os.ftruncate(fd, 4096)
    elif kind == "file":
        fd, offs = area(8, path=sys.argv[4])
        os.pwrite(fd, struct.pack("<I", 3), offs["state"])        # CLOSED
        os.pwrite(fd, struct.pack("<Q", 1), offs["claim"])
        os.pwrite(fd, b"\xee" * 64, offs["events"])               # one event
        os.pwrite(fd, struct.pack("<Q", 1), offs["published"])
        os.pwrite(fd, struct.pack("<Q", 1), 128)                  # fresh
        os.fsync(fd)
        hello(os.getpid(), fd)
    elif kind == "forged-pid":
        fd, _ = area(8)
        hello(child.pid, fd)
    else:
        raise SystemExit(f"forge.py: unknown kind {kind!r}")
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
