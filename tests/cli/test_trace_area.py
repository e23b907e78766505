"""The trace area's two halves agree: trace_proto.h's constants and layout
(what csrc/trace/trace_lane.c writes) and memhook/tracing/area.py's reading of
them, checked on an area made by Python as the producer would fill it."""

from __future__ import annotations

import fcntl
import mmap
import os
import re
import struct

import numpy as np
import pytest
from memhook_testing import CSRC

from memhook.tracing import area
from memhook.tracing.protocol import EVENT_DTYPE, VERSION, ProtocolError

PROTO = (CSRC / "trace" / "trace_proto.h").read_text()


def _define(name: str) -> int:
    m = re.search(rf"#define {name} (0x[0-9A-Fa-f]+|\d+)u?", PROTO)
    assert m, name
    return int(m.group(1), 0)


def test_constants_match_trace_proto_h() -> None:
    assert _define("MH_TRACE_AREA_MAGIC") == area.AREA_MAGIC
    assert _define("MH_TRACE_SEG_EVENTS") == area.SEG_EVENTS
    assert (_define("MH_TRACE_SEG_OWNED"), _define("MH_TRACE_SEG_CLOSED")) == (
        area.SEG_OWNED, area.SEG_CLOSED)
    assert area.AREA_HEADER.size == 128  # the fields before the producers' line
    # The bounds the collector holds an area's records to are the traced side's.
    from memhook.tracing import pyframes

    assert _define("MH_TRACE_STACKS_MB") << 20 == area._STACKS_MAX
    assert _define("MH_TRACE_PY_MB") << 20 == area._PY_MAX
    assert _define("MH_TRACE_CODES_MB") << 20 == area._CODES_MAX
    assert _define("MH_TRACE_PY_DEPTH_MAX") == area._PY_DEPTH_MAX
    assert _define("MH_TRACE_PYCODE_NAME_MAX") == pyframes.NAME_MAX
    assert _define("MH_TRACE_PYCODE_LINES_MAX") == pyframes.LINES_MAX


def _make(nseg: int = 8) -> tuple[int, dict[str, int]]:
    """An area laid out as trace_lane.c lays it out; (fd, offsets)."""
    off, offs = 4096, {}
    for name, width in (("state", 4), ("tid", 4), ("claim", 8), ("published", 8), ("done", 8),
                        ("first", 8)):
        offs[name] = off
        off = (off + nseg * width + 63) // 64 * 64
    offs["events"] = (off + 4095) // 4096 * 4096
    size = offs["events"] + nseg * area.SEG_EVENTS * 64
    fd = os.memfd_create("test-area")
    os.ftruncate(fd, size)
    hdr = area.AREA_HEADER.pack(area.AREA_MAGIC, VERSION, area.SEG_EVENTS, nseg, size,
                                offs["state"], offs["tid"], offs["claim"], offs["published"],
                                offs["done"], offs["events"], 1234, 0, 0, 0, 0, 0, 0,
                                offs["first"])
    os.pwrite(fd, hdr, 0)
    return fd, offs


class _Producer:
    """The traced process's side of an area made by :func:`_make`: numpy
    views of its own mapping, written as trace_lane.c writes them."""

    def __init__(self, fd: int, nseg: int = 8) -> None:
        _, offs = _make(nseg)  # (the same layout: its offsets)
        self.mm = mmap.mmap(fd, 0)
        buf = self.mm
        self.state = np.frombuffer(buf, np.uint32, nseg, offs["state"])
        self.claim = np.frombuffer(buf, np.uint64, nseg, offs["claim"])
        self.published = np.frombuffer(buf, np.uint64, nseg, offs["published"])
        self.done = np.frombuffer(buf, np.uint64, nseg, offs["done"])
        self.first = np.frombuffer(buf, np.uint64, nseg, offs["first"])
        self.header = np.frombuffer(buf, np.uint64, 64, 0)
        self.events = np.frombuffer(buf, EVENT_DTYPE, nseg * area.SEG_EVENTS,
                                    offs["events"]).reshape(nseg, area.SEG_EVENTS)

    def close(self) -> None:
        del self.state, self.claim, self.published, self.done, self.first, self.header
        del self.events
        self.mm.close()


def test_reads_in_stamp_order_across_segments_and_gives_back() -> None:
    fd, offs = _make()
    a = area.TraceArea(os.dup(fd))
    p = _Producer(fd)
    # Two threads' segments: 0 holds stamps 10, 30, 50; 1 holds 20, 40.
    ev = p.events
    for seg, stamps in ((0, [10, 30, 50]), (1, [20, 40])):
        for j, t in enumerate(stamps):
            ev[seg, j]["timestamp_ns"] = t
            ev[seg, j]["kind"] = 1 + j % 2
        p.first[seg] = stamps[0]
        p.claim[seg] = seg + 1
        p.published[seg] = len(stamps)
        p.state[seg] = area.SEG_CLOSED if seg == 0 else area.SEG_OWNED
    p.header[128 // 8] = 2  # fresh
    got = a.read(final=True, limit=3)  # a stamp cut, not a segment cut
    assert list(got["timestamp_ns"]) == [10, 20, 30]
    got = a.read(final=True, limit=3)
    assert list(got["timestamp_ns"]) == [40, 50]
    # Segment 0 was closed and is read: given back (done = claim); 1 is not.
    assert int(p.done[0]) == 1 and int(p.done[1]) == 0
    assert int(p.header[192 // 8]) == 1
    assert a.read(final=True).size == 0
    del ev
    p.close()
    a.close()
    os.close(fd)


def test_rejects_what_is_not_an_area() -> None:
    fd = os.memfd_create("not-an-area")
    os.ftruncate(fd, 8192)
    try:
        area.TraceArea(fd)
    except ProtocolError as exc:
        assert "not a version" in str(exc)
    else:
        raise AssertionError("accepted an area without its magic")
    assert EVENT_DTYPE.itemsize == 64


def test_converted_stamps_never_step_back_when_the_rate_moves() -> None:
    """Raw TSC stamps are converted with the anchor known at each read; a
    young area's rate moves (a unit rate at first, the measured one later),
    and a later batch must still not land before an earlier one - the
    time-ordered output would put a FREE before its ALLOC."""
    import struct

    fd, _ = _make()
    a = area.TraceArea(os.dup(fd))
    p = _Producer(fd)
    area.TraceArea.best_ns_per_tick = None
    area.TraceArea._best_baseline = 0
    area.TraceArea.machine_ns_per_tick = None
    ev = p.events
    stamps = [1000, 2000, 3000, 4000]  # raw TSC, one thread
    for j, t in enumerate(stamps):
        ev[0, j]["timestamp_ns"] = t
        ev[0, j]["flags"] = area.RAW_TSC
    p.first[0] = stamps[0]
    p.claim[0] = 1
    p.state[0] = area.SEG_OWNED
    p.header[128 // 8] = 1
    p.published[0] = 2
    first = a.read(final=True)  # no baseline yet: a unit rate from the anchor
    # The process's anchor now says a tick is 0.001 ns, far from 1.0.
    p.mm[96:120] = struct.pack("<QQQ", 2, 100_000_000, 100_000)
    p.published[0] = 4
    second = a.read(final=True)
    got = list(first["timestamp_ns"]) + list(second["timestamp_ns"])
    assert len(got) == 4
    assert got == sorted(got), got
    del ev
    p.close()
    a.close()
    os.close(fd)


def test_a_young_area_is_sized_with_the_machines_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """An area whose process has not refreshed its anchor yet (a starved
    streamer on a loaded box) has no rate of its own: its raw stamps are
    converted with the TSC's rate the collector measured itself - not a
    unit rate, which put such a process's events far ahead of the others'
    (and, stamps never stepping back, every later one of it there too)."""
    fd, _ = _make()
    a = area.TraceArea(os.dup(fd))
    p = _Producer(fd)
    monkeypatch.setattr(area.TraceArea, "best_ns_per_tick", None)
    monkeypatch.setattr(area.TraceArea, "_best_baseline", 0)
    monkeypatch.setattr(area.TraceArea, "machine_ns_per_tick", 0.25)
    stamps = [1000, 2000, 3000, 4000]  # raw TSC after the anchor (0, 0)
    for j, t in enumerate(stamps):
        p.events[0, j]["timestamp_ns"] = t
        p.events[0, j]["flags"] = area.RAW_TSC
    p.first[0] = stamps[0]
    p.claim[0] = 1
    p.state[0] = area.SEG_OWNED
    p.header[128 // 8] = 1
    p.published[0] = 4
    got = a.read(final=True)
    assert list(got["timestamp_ns"]) == [250, 500, 750, 1000]
    p.close()
    a.close()
    os.close(fd)


class _ReclaimedBetweenCopies:
    """Wraps an area's descriptor reads: after the first read of the state
    array (armed), a producer takes segment 0 again (its old claim was
    given back) before the reader reads the claims and the published
    counts."""

    def __init__(self, a: area.TraceArea, p: _Producer) -> None:
        self.real, self.p, self.armed = a._load, p, False

    def __call__(self, name: str, count: int):  # noqa: ANN204 - an ndarray
        got = self.real(name, count)
        if name == "state" and self.armed:
            self.armed = False
            p = self.p
            p.events[0, 0]["timestamp_ns"] = 300
            p.events[0, 0]["kind"] = 1
            p.published[0] = 0
            p.claim[0] = 2
            p.state[0] = area.SEG_OWNED
            p.published[0] = 1
        return got


def test_a_segment_taken_again_during_a_read_is_not_given_back_while_owned() -> None:
    """A read copies states before claims: a segment CLOSED in that copy may
    be OWNED again, under a newer claim, by the time the claims are copied.
    Giving it back then (done = the new claim) let another thread take it
    while its owner still wrote - and the punch zeroed its events (seen as
    599 of 600 pairs and two 0-byte rows in test_trace_loss)."""
    fd, _ = _make()
    a = area.TraceArea(os.dup(fd))
    p = _Producer(fd)
    ev = p.events
    for j, t in enumerate([100, 200]):
        ev[0, j]["timestamp_ns"] = t
        ev[0, j]["kind"] = 1 + j
    p.first[0], p.claim[0], p.published[0] = 100, 1, 2
    p.state[0] = area.SEG_CLOSED
    p.header[128 // 8] = 1
    assert list(a.read(final=True)["timestamp_ns"]) == [100, 200]
    assert int(p.done[0]) == 1  # closed and read: given back
    spy = _ReclaimedBetweenCopies(a, p)
    a._load = spy  # type: ignore[method-assign]
    spy.armed = True
    assert list(a.read(final=True)["timestamp_ns"]) == [300]  # the new claim's first event
    assert int(p.done[0]) == 1, "given back while its new owner still writes"
    # The owner writes one more and closes: now it is finished.
    ev[0, 1]["timestamp_ns"] = 400
    ev[0, 1]["kind"] = 2
    p.published[0] = 2
    p.state[0] = area.SEG_CLOSED
    assert list(a.read(final=True)["timestamp_ns"]) == [400]
    assert int(p.done[0]) == 2
    del ev, spy
    p.close()
    a.close()
    os.close(fd)


# ------------------------------------------------- an area that lies


def _lying(**fields: int) -> int:
    """An area made by _make(8) with header fields replaced (by name)."""
    fd, offs = _make()
    names = ["magic", "version", "seg_events", "nseg", "size", "state_off", "tid_off",
             "claim_off", "published_off", "done_off", "events_off", "pid", "exited", "tsc0",
             "ns0", "anchor_seq", "tsc1", "ns1", "first_off"]
    values = list(area.AREA_HEADER.unpack(os.pread(fd, area.AREA_HEADER.size, 0)))
    for name, value in fields.items():
        if name in names:
            values[names.index(name)] = value
    os.pwrite(fd, area.AREA_HEADER.pack(*values), 0)
    records = {"modules_cap": (264, "<Q"), "stack_depth": (312, "<I"), "py_depth": (316, "<I"),
               "py_off": (320, "<Q"), "py_cap": (328, "<Q"), "codes_off": (352, "<Q"),
               "codes_cap": (360, "<Q")}
    for name, (at, fmt) in records.items():
        if name in fields:
            os.pwrite(fd, struct.pack(fmt, fields[name]), at)
    return fd


@pytest.mark.parametrize("fields, message", [
    ({"nseg": 0}, "claims 0 segments; the traced side makes 1-262144"),
    ({"nseg": 1 << 24}, "claims 16777216 segments"),
    ({"size": 1 << 20}, "trace area says it is 1048576 bytes; its memfd is 139264"),
    ({"state_off": 4097}, "trace area's state (32 bytes at offset 4097) is not inside"),
    ({"first_off": 139264 - 8}, "trace area's first (64 bytes at offset 139256) is not inside"),
    ({"events_off": 0}, "trace area's events (131072 bytes at offset 0) is not inside"),
    ({"done_off": 1 << 62}, "trace area's done (64 bytes at offset 4611686018427387904)"),
    ({"modules_cap": 2 << 20}, "claims 2097152 bytes of module records"),
    ({"stack_depth": 129}, "claims stacks of 129 frames; at most 128"),
    ({"py_depth": 129}, "claims Python stacks of 129 frames; at most 128"),
    ({"py_depth": 32, "py_off": 4096, "py_cap": 128 << 20},
     "claims 134217728 bytes of Python records; the traced side makes 67108864 at most"),
    ({"py_depth": 32, "py_off": 139264 - 8, "py_cap": 4096},
     "trace area's Python records (4096 bytes at offset 139256) is not inside its 139264"),
    ({"py_depth": 1, "py_off": 1 << 63, "py_cap": 8},
     "trace area's Python records (8 bytes at offset 9223372036854775808) is not inside"),
    ({"py_depth": 32, "codes_off": 0, "codes_cap": 4096},
     "trace area's code records (4096 bytes at offset 0) is not inside"),
    ({"py_depth": 32, "codes_off": 4100, "codes_cap": 8},
     "trace area's code records (8 bytes at offset 4100) is not inside"),
    ({"py_depth": 32, "codes_off": 4096, "codes_cap": 1 << 40},
     "claims 1099511627776 bytes of code records; the traced side makes 67108864 at most"),
], ids=["no-segments", "16M-segments", "size", "misaligned", "past-end", "in-header",
        "far-out", "modules", "stacks", "py-depth", "py-cap", "py-past-end", "py-far-out",
        "codes-in-header", "codes-misaligned", "codes-cap"])
def test_a_header_that_lies_is_refused_before_anything_is_read(fields: dict[str, int],
                                                               message: str) -> None:
    """Before: an offset past the end was a ValueError from np.frombuffer
    (the collector died, CMD was killed), a count of 16M segments 1.3 GiB."""
    fd = _lying(**fields)
    with pytest.raises(ProtocolError) as exc:
        area.TraceArea(fd)  # (closes fd)
    assert message in str(exc.value)


def test_a_read_only_area_is_refused() -> None:
    fd, _ = _make()
    ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
    with pytest.raises(ProtocolError, match="not open for reading and writing"):
        area.TraceArea(ro)
    os.close(fd)


def test_an_area_cut_short_after_it_was_taken_is_an_error_not_a_fault() -> None:
    """The process truncates its (unsealed) memfd while the collector reads
    it.  Before: the next read of the mapping was SIGBUS (this test process
    died with it)."""
    fd, _ = _make()
    a = area.TraceArea(os.dup(fd))
    p = _Producer(fd)
    p.events[0, 0]["timestamp_ns"] = 5
    p.first[0], p.claim[0], p.published[0] = 5, 1, 1
    p.state[0] = area.SEG_OWNED
    p.header[128 // 8] = 1
    assert len(a.read(final=True)) == 1
    p.close()
    os.ftruncate(fd, 4096)
    with pytest.raises(area.AreaTruncated, match="shrank from 139264 to 4096 bytes"):
        a.read(final=True)
    a.close()
    os.close(fd)


def test_counts_read_from_the_area_are_clamped() -> None:
    """published past a segment's 256 events, fresh past nseg: read as
    what the arrays hold, not an IndexError."""
    fd, _ = _make()
    a = area.TraceArea(os.dup(fd))
    p = _Producer(fd)
    for j in range(area.SEG_EVENTS):
        p.events[0, j]["timestamp_ns"] = j + 1
    p.first[0], p.claim[0], p.published[0] = 1, 1, 1 << 40
    p.state[0] = area.SEG_CLOSED
    p.header[128 // 8] = 1 << 40
    got = a.read(final=True, limit=10_000)
    assert len(got) == area.SEG_EVENTS
    p.close()
    a.close()
    os.close(fd)


def test_the_traced_side_seals_its_area(programs) -> None:  # noqa: ANN001
    """csrc/trace/trace_lane.c seals the memfd against shrinking and
    growing: the area a real process hands over says so (F_GET_SEALS)."""
    import subprocess

    import memhook
    from memhook.tracing.collector import Collector
    from memhook.tracing.ledger import Ledger

    collector = Collector(Ledger([], []))
    seals: list[int] = []
    real = collector._message

    def message(peer, data: bytes, fds: list[int]) -> None:  # noqa: ANN001
        seals.extend(fcntl.fcntl(fd, fcntl.F_GET_SEALS) for fd in fds)
        real(peer, data, fds)

    collector._message = message  # type: ignore[method-assign]
    env = dict(os.environ, LD_PRELOAD=memhook.library_path(),
               MEMHOOK_TRACE_SOCKET=collector.path)
    try:
        child = subprocess.Popen([str(programs.event_storm), "10"], env=env,
                                 stdout=subprocess.DEVNULL)
        assert collector.run(child) == 0
    finally:
        collector.close()
    assert len(seals) == 1, seals
    want = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
    assert seals[0] & want == want, seals


# ------------------------------------- --python records under the same rules

PY_BYTES, CODES_BYTES = 8192, 8192
LINE_2 = bytes([0x80, 0x00, 0xD8, 0x04, 0x08])  # code unit 0: the first line, 1: the next


def _python_area(events_first: bool = False, codes_bytes: int = CODES_BYTES,
                 depth: int = 32) -> tuple[int, dict[str, int]]:
    """An area of 8 segments with --python sections: after the descriptors
    (as trace_lane.c lays it out) or, ``events_first``, after the events
    (so cutting the memfd there cuts only them)."""
    fd, offs = _make()
    size = os.fstat(fd).st_size
    if events_first:
        offs["py"], offs["codes"] = size, size + PY_BYTES
        size += PY_BYTES + codes_bytes
    else:  # move the events up: the sections go where they were
        old = offs["events"]
        offs["py"], offs["codes"] = old, old + PY_BYTES
        offs["events"] = old + PY_BYTES + codes_bytes
        size += PY_BYTES + codes_bytes
        values = list(area.AREA_HEADER.unpack(os.pread(fd, area.AREA_HEADER.size, 0)))
        values[10] = offs["events"]
        os.pwrite(fd, area.AREA_HEADER.pack(*values), 0)
    os.ftruncate(fd, size)
    os.pwrite(fd, struct.pack("<Q", size), 16)
    os.pwrite(fd, area.RECORDS.pack(0, 0, 0, 0, 0, 0, 0, 0, depth, offs["py"], PY_BYTES, 0, 0,
                                    offs["codes"], codes_bytes, 0, 0, 0x030B0000, 0), 256)
    return fd, offs


def _code(file: str, name: str, first: int = 10, table: bytes = LINE_2, **lies: int) -> bytes:
    from memhook.tracing.pyframes import CODE

    def pad(b: bytes) -> bytes:
        return b + b"\0" * (-len(b) % 8)

    body = pad(file.encode()) + pad(name.encode()) + pad(table)
    f = dict(len=CODE.size + len(body), flen=len(file), qlen=len(name), llen=len(table),
             fkind=1, qkind=1)
    f.update(lies)
    return CODE.pack(f["len"], first, 0x1000, 0, 0, 0, -1, -1, f["flen"], f["qlen"],
                     f["llen"], f["fkind"], f["qkind"], 0, 11) + body


class _Records:
    """Writes code records and Python records into a _python_area."""

    def __init__(self, fd: int, offs: dict[str, int]) -> None:
        self.fd, self.offs = fd, offs
        self.codes_used = self.py_used = 0

    def code(self, record: bytes) -> int:
        os.pwrite(self.fd, record, self.offs["codes"] + self.codes_used)
        self.codes_used += len(record)
        return (self.codes_used - len(record)) // 8 + 1

    def python(self, head: int, frames: list[tuple[int, int]]) -> int:
        words = [head] + [ref << 32 | lasti & 0xFFFFFFFF for ref, lasti in frames]
        os.pwrite(self.fd, struct.pack(f"<{len(words)}Q", *words),
                  self.offs["py"] + self.py_used)
        self.py_used += 8 * len(words)
        return (self.py_used - 8 * len(words)) // 8 + 1


def _allocs(p: _Producer, refs: list[int], seg: int = 0, at: int = 0, close: bool = False,
            claim: int = 1) -> None:
    ev = p.events
    for j, ref in enumerate(refs):
        ev[seg, at + j]["seq"] = ref << 32
        ev[seg, at + j]["timestamp_ns"] = 100 * (at + j + 1)
        ev[seg, at + j]["kind"] = 1
        ev[seg, at + j]["size"] = 4096
    if at == 0:
        p.first[seg] = 100
        p.claim[seg] = claim
    p.published[seg] = at + len(refs)
    p.state[seg] = area.SEG_CLOSED if close else area.SEG_OWNED
    p.header[128 // 8] = max(int(p.header[128 // 8]), seg + 1)
    del ev


class _Producer2(_Producer):
    """_Producer over an area whose events were moved (_python_area)."""

    def __init__(self, fd: int, offs: dict[str, int], nseg: int = 8) -> None:
        self.mm = mmap.mmap(fd, 0)
        buf = self.mm
        self.state = np.frombuffer(buf, np.uint32, nseg, offs["state"])
        self.claim = np.frombuffer(buf, np.uint64, nseg, offs["claim"])
        self.published = np.frombuffer(buf, np.uint64, nseg, offs["published"])
        self.done = np.frombuffer(buf, np.uint64, nseg, offs["done"])
        self.first = np.frombuffer(buf, np.uint64, nseg, offs["first"])
        self.header = np.frombuffer(buf, np.uint64, 64, 0)
        self.events = np.frombuffer(buf, EVENT_DTYPE, nseg * area.SEG_EVENTS,
                                    offs["events"]).reshape(nseg, area.SEG_EVENTS)


def test_python_records_are_read_with_bounded_preads_and_lies_name_question_marks() -> None:
    """Every reference and length in Python and code records is checked
    against its section before it is read: a record of 65535 frames gives
    at most the depth, references past the sections are LOST or ``?``, code
    records that claim a GiB of name, a table past any, a length past the
    section or a bad width name ``?``; what is read stays near what the
    sections hold, whatever the records claim."""
    from memhook.tracing.pyframes import LOST, PyFrame

    fd, offs = _python_area()
    a = area.TraceArea(os.dup(fd))
    p = _Producer2(fd, offs)
    r = _Records(fd, offs)
    true = r.code(_code("/srv/true.py", "truth"))
    lies = [r.code(_code("/srv/a.py", "a", len=1 << 31)),
            r.code(_code("/srv/b.py", "b", flen=10**9, fkind=4)),
            r.code(_code("/srv/c.py", "c", fkind=3)),
            r.code(_code("/srv/d.py", "d", llen=1 << 30)),
            r.code(_code("/srv/e.py", "e", len=0)),
            CODES_BYTES // 8 + 3, 0, 1 << 31]
    refs = [r.python(2, [(true, 1), (true, 0)]),
            r.python(len(lies), [(ref, 0) for ref in lies]),
            r.python(0xFFFF, [(0xDEADBEEF, 7)] * 40),
            PY_BYTES // 8,                       # a head at the last word...
            PY_BYTES // 8 + 1, (1 << 32) - 1]    # ...and past the section: LOST
    os.pwrite(fd, struct.pack("<Q", 50), offs["py"] + PY_BYTES - 8)  # (50 frames, none there)
    _allocs(p, refs)
    read: list[int] = []
    real = a._pread

    def counted(n: int, off: int) -> bytes:
        read.append(n)
        return real(n, off)

    a._pread = counted  # type: ignore[method-assign]
    assert a.python is not None
    a.python._read = counted
    ev = a.read(final=True)
    assert len(ev) == len(refs)
    got = a.last_python
    assert got is not None
    unknown = PyFrame("?", 0, "?")
    assert got[0] is not None and got[0].frames == (PyFrame("/srv/true.py", 11, "truth"),
                                                   PyFrame("/srv/true.py", 10, "truth"))
    assert got[1] is not None and got[1].frames == (unknown,) * len(lies)
    assert got[2] is not None and got[2].frames == (unknown,) * 32  # the depth, not 65535
    assert got[3] is not None and got[3].frames == ()
    assert got[4] is LOST and got[5] is LOST
    assert sum(read) < 16 * 1024, read  # the sections are 16 KiB; the claims GiBs
    p.close()
    a.close()
    os.close(fd)


def test_an_area_cut_under_its_python_records_is_an_error_not_a_fault() -> None:
    """The process cuts its (unsealed) memfd where its Python records are,
    between two reads.  Read from a mapping (as issue 28 first did), the
    next look at a record was SIGBUS: this test process would die.  With
    preads it is AreaTruncated, and the events before it were named."""
    fd, offs = _python_area(events_first=True)
    a = area.TraceArea(os.dup(fd))
    p = _Producer(fd)
    r = _Records(fd, offs)
    code = r.code(_code("/srv/x.py", "x"))
    _allocs(p, [r.python(1, [(code, 0)])])
    first = a.read(final=True)
    assert len(first) == 1 and a.last_python is not None
    assert a.last_python[0] is not None and a.last_python[0].frames[0].file == "/srv/x.py"
    _allocs(p, [r.python(1, [(code, 1)])], at=1)
    p.close()
    os.ftruncate(fd, offs["py"])
    with pytest.raises(area.AreaTruncated, match="shrank from"):
        a.read(final=True)
    a.close()
    os.close(fd)


def test_long_line_tables_are_decoded_a_budget_at_a_time() -> None:
    """Eight code records with the longest line table the traced side
    copies (256 KiB each): decoding them all in one read would take the
    collector seconds (and a hostile area can point a batch at thousands
    of them).  A read decodes at most its budget; a frame past it keeps its
    file and function with line 0 (unknown, never another line), is not
    remembered so, and the next reads name it in full."""
    from memhook.tracing import pyframes

    table = bytes([0x80, 0x00]) * (pyframes.LINES_MAX // 2)  # one unit an entry, all line 7
    fd, offs = _python_area(codes_bytes=4 << 20)
    a = area.TraceArea(os.dup(fd))
    p = _Producer2(fd, offs)
    r = _Records(fd, offs)
    codes = [r.code(_code(f"/srv/big{i}.py", f"big{i}", first=7, table=table)) for i in range(8)]
    refs = [r.python(1, [(c, 100_000)]) for c in codes]
    lines: list[list[int]] = []
    for k in range(4):
        _allocs(p, refs, seg=k, claim=k + 1)
        a.read(final=True)
        assert a.last_python is not None
        for i, s in enumerate(a.last_python):
            assert s is not None and len(s.frames) == 1
            f = s.frames[0]
            assert (f.file, f.function) == (f"/srv/big{i}.py", f"big{i}")
            assert f.line in (7, 0)
        lines.append([s.frames[0].line for s in a.last_python if s is not None])
    per_read = pyframes._INDEX_BUDGET // len(table)
    assert lines[0].count(7) == per_read, lines  # the budget, no more
    assert lines[-1] == [7] * 8, lines           # and the rest later, not lost
    p.close()
    a.close()
    os.close(fd)


@pytest.mark.parametrize("scribble, why", [
    ({}, None),
    ({152: 1000}, None),                                  # a believable loss
    ({152: 15371234808221178904}, "its count of events lost because the collector fell "
                                  "behind is more than one a nanosecond"),
    ({160: 1 << 62}, "its count of events lost because every segment was owned is more"),
    ({16: 4096}, "changed after it was handed over (at byte 17 of the header"),  # size
    ({72: 99}, "changed after it was handed over (at byte 72 of the header"),  # pid
    ({192: 5}, "its count of segments the collector gave back is not the 0"),
])
def test_a_header_written_over_after_hello_is_said_to_be_corrupt(scribble: dict[int, int],
                                                                 why: str | None) -> None:
    """The summary reports the header's loss counters only while the
    header can be believed (memhook/tracing/collector.py: _report)."""
    fd, _ = _make()
    os.pwrite(fd, struct.pack("<Q", 10**9), 88)  # ns0: made 1 s after boot
    a = area.TraceArea(os.dup(fd))
    for at, value in scribble.items():
        os.pwrite(fd, struct.pack("<Q", value), at)
    problem = a.header_problem(now_ns=60 * 10**9)
    assert problem is None if why is None else why in (problem or ""), problem
    a.close()
    os.close(fd)
