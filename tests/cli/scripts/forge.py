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
* ``py-offset``  a --python area whose code records lie past its end;
* ``py-records`` a well-formed --python area holding 256 ALLOCs whose
                 Python and code records lie: a frame count of 65535,
                 references past their sections, code records claiming
                 a GiB of name, a bad character width, a length past the
                 section, an unfinished record; one record is true;
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
AREA_MAGIC, MAGIC, VERSION, SEG_EVENTS, SEG_BYTES = 0x41544D48, 0x3154484D, 5, 256, 256 * 64


RECORDS = struct.Struct("<QQQQQQQIIQQQQQQQQII")  # mh_trace_area from modules_off (256)
CODE = struct.Struct("<IIQQQQqqIIIBBBB")            # mh_trace_pycode
PY_BYTES = CODES_BYTES = 8192


def area(nseg: int, state_off_past_end: bool = False, path: str | None = None,
         py_depth: int = 0) -> tuple[int, dict[str, int]]:
    off, offs = 4096, {}
    for name, width in (("state", 4), ("tid", 4), ("claim", 8), ("published", 8), ("done", 8),
                        ("first", 8)):
        offs[name] = off
        off = (off + nseg * width + 63) // 64 * 64
    off = (off + 4095) // 4096 * 4096
    if py_depth:  # Python records, then code records, before the events
        offs["py"], offs["codes"] = off, off + PY_BYTES
        off += PY_BYTES + CODES_BYTES
    offs["events"] = off
    size = offs["events"] + nseg * SEG_BYTES
    if state_off_past_end:
        offs["state"] = size
    fd = (os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600) if path
          else os.memfd_create("forged-area"))
    os.ftruncate(fd, size)
    os.pwrite(fd, AREA.pack(AREA_MAGIC, VERSION, SEG_EVENTS, nseg, size, offs["state"],
                            offs["tid"], offs["claim"], offs["published"], offs["done"],
                            offs["events"], os.getpid(), 0, 0, 0, 0, 0, 0, offs["first"]), 0)
    if py_depth:
        os.pwrite(fd, RECORDS.pack(0, 0, 0, 0, 0, 0, 0, 0, py_depth, offs["py"], PY_BYTES, 0, 0,
                                   offs["codes"], CODES_BYTES, 0, 0, 0x030B0000, 0), 256)
    return fd, offs


def code_record(file: bytes, name: bytes, **lies: int) -> bytes:
    """A code record (first line 10, one line-table entry), fields replaced by ``lies``."""
    table = bytes([0x80, 0x00])
    pad = lambda b: b + b"\0" * (-len(b) % 8)  # noqa: E731
    body = pad(file) + pad(name) + pad(table)
    fields = dict(len=CODE.size + len(body), first=10, flen=len(file), qlen=len(name),
                  llen=len(table), fkind=1, qkind=1)
    fields.update(lies)
    return CODE.pack(fields["len"], fields["first"], 0x1000, 0, 0, 0, -1, -1, fields["flen"],
                     fields["qlen"], fields["llen"], fields["fkind"], fields["qkind"], 0,
                     11) + body


def lying_python(fd: int, offs: dict[str, int]) -> None:
    """A segment of 256 ALLOCs whose Python and code records lie (see the top)."""
    codes = [code_record(b"/srv/true.py", b"truth"),
             code_record(b"/srv/a.py", b"a", len=1 << 31),       # past the section
             code_record(b"/srv/b.py", b"b", flen=10**9, fkind=4),  # a GiB of name
             code_record(b"/srv/c.py", b"c", fkind=3),           # no such width
             code_record(b"/srv/d.py", b"d", llen=1 << 30),      # a table past any
             code_record(b"/srv/e.py", b"e", len=0)]             # not finished
    refs, at = [], 0
    for rec in codes:
        os.pwrite(fd, rec, offs["codes"] + at)
        refs.append(at // 8 + 1)
        at += len(rec)
    bad = refs[1:] + [CODES_BYTES // 8 + 9, 0]
    words = [1, refs[0] << 32 | 0,                                   # the true one
             len(bad)] + [r << 32 | 5 for r in bad] + [              # every lie
             0xFFFF] + [0xDEADBEEF_00000001] * 40                     # 65535 frames
    os.pwrite(fd, struct.pack(f"<{len(words)}Q", *words), offs["py"])
    os.pwrite(fd, struct.pack("<Q", 50), offs["py"] + PY_BYTES - 8)    # frames past the end
    py_refs = [1, 3, 4 + len(bad), PY_BYTES // 8, PY_BYTES // 8 + 100, 1 << 31]
    os.pwrite(fd, struct.pack("<I", 2), offs["state"])        # OWNED
    os.pwrite(fd, struct.pack("<Q", 1), offs["claim"])
    for i in range(SEG_EVENTS):
        os.pwrite(fd, struct.pack("<QQQQQhhhh", py_refs[i % len(py_refs)] << 32,
                                  0x10000 * (i + 1), 4096, time.monotonic_ns(), 0,
                                  1, 0, 1, 0),  # caller; ALLOC, function, mem_type, device
                  offs["events"] + 64 * i)
    os.pwrite(fd, struct.pack("<Q", SEG_EVENTS), offs["published"])
    os.pwrite(fd, struct.pack("<Q", 1), 128)                  # fresh


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
    elif kind == "py-offset":
        fd, offs = area(8, py_depth=32)
        size = os.fstat(fd).st_size
        os.pwrite(fd, struct.pack("<QQ", size, CODES_BYTES), 352)  # codes_off, codes_cap
        hello(os.getpid(), fd)
    elif kind == "py-records":
        fd, offs = area(8, py_depth=32)
        lying_python(fd, offs)
        hello(os.getpid(), fd)
    elif kind == "forged-pid":
        fd, _ = area(8)
        hello(child.pid, fd)
    else:
        raise SystemExit(f"forge.py: unknown kind {kind!r}")
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
