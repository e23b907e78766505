"""The collector's side of --python on its own (memhook/tracing/pyframes.py):
Python and code records as a process writes them (trace_proto.h) become
frames; records that are cut short, point outside the area or hold
nonsense name ``?`` and never raise; the user frame skips the library's;
a fork child's module table starts from its parent's."""

from __future__ import annotations

import mmap
import struct
import subprocess

import numpy as np
import pytest
from memhook_testing import CSRC, HAVE_CC
from pyframes_testing import HERE

from memhook.tracing.area import AreaTruncated
from memhook.tracing.modules import MODULE_LOAD, Module, ModuleMap
from memhook.tracing.pyframes import CODE, LOST, PyFrame, PyRecords, PyStack, SiteLedger

PY_OFF, PY_CAP, CODES_OFF, CODES_CAP, VERSION_AT = 4096, 4096, 8192, 4096, 64
LOCATIONS_LINE_2 = bytes([0x80, 0x00, 0xD8, 0x04, 0x08])  # unit 0: first line, unit 1: +1


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 8)


def _code_record(file: str, qualname: str, first: int, table: bytes, minor: int = 11,
                 kind: int = 1) -> bytes:
    fdata = file.encode("latin-1") if kind == 1 else file.encode("utf-32-le")
    body = _pad(fdata) + _pad(qualname.encode()) + _pad(table)
    return CODE.pack(CODE.size + len(body), first, 0x1000, 0, 0, 0, -1, -1, len(file),
                     len(qualname), len(table), kind, 1, 0, minor) + body


class _Area:
    """An area-shaped buffer: Python records at PY_OFF, code records at CODES_OFF."""

    def __init__(self) -> None:
        self.mm = mmap.mmap(-1, CODES_OFF + CODES_CAP)
        struct.pack_into("<I", self.mm, VERSION_AT, 0x030B0700)
        self.py_used = 0
        self.codes_used = 0
        self.reads: list[tuple[int, int]] = []

    def code(self, record: bytes) -> int:
        at = self.codes_used
        self.mm[CODES_OFF + at:CODES_OFF + at + len(record)] = record
        self.codes_used += len(record)
        return at // 8 + 1

    def python(self, head: int, frames: list[tuple[int, int]]) -> int:
        words = [head] + [ref << 32 | (lasti & 0xFFFFFFFF) for ref, lasti in frames]
        at = self.py_used
        struct.pack_into(f"<{len(words)}Q", self.mm, PY_OFF + at, *words)
        self.py_used += 8 * len(words)
        return at // 8 + 1

    def read(self, n: int, off: int) -> bytes:
        """As TraceArea._pread reads the memfd: exactly n bytes, or AreaTruncated."""
        self.reads.append((off, n))
        data = self.mm[off:off + n]
        if len(data) != n:
            raise AreaTruncated(f"{n} bytes at {off}")
        return data

    def records(self, depth: int = 32) -> PyRecords:
        return PyRecords(self.read, PY_OFF, PY_CAP, depth, CODES_OFF, CODES_CAP, VERSION_AT)


def test_frames_are_named_from_the_records() -> None:
    area = _Area()
    inner = area.code(_code_record("/srv/app/train.py", "Model.step", 10, LOCATIONS_LINE_2))
    outer = area.code(_code_record("/usr/lib/python3.11/threading.py", "Thread.run", 5,
                                   LOCATIONS_LINE_2))
    ref = area.python(2, [(inner, 1), (outer, 0)])
    empty = area.python(1 << 16, [])  # MH_TRACE_PY_NO_THREAD
    [stack, none, lost, free] = area.records().stacks(np.array([ref, empty, 0, 0], np.uint64),
                                                     np.array([True, True, True, False]))
    assert stack == PyStack((PyFrame("/srv/app/train.py", 11, "Model.step"),
                             PyFrame("/usr/lib/python3.11/threading.py", 5, "Thread.run")))
    assert stack.site == "/srv/app/train.py:11 (Model.step)"
    assert none is not None and none.frames == () and none.why == "no Python on this thread"
    assert none.site == "(no Python frames: no Python on this thread)"
    assert lost is LOST and "were used up" in lost.why  # an ALLOC whose record found no room
    assert free is None  # a FREE has no frames


def test_the_user_frame_skips_the_library() -> None:
    lib = PyFrame("/x/lib/python3.12/site-packages/torch/nn/modules/linear.py", 125, "forward")
    user = PyFrame("/home/me/model.py", 40, "forward")
    assert PyStack((lib, user)).user_frame == user
    assert PyStack((lib,)).user_frame == lib  # only library frames: the innermost
    assert PyStack(()).user_frame is None


def test_wide_strings_and_every_state_are_read() -> None:
    area = _Area()
    ref = area.code(_code_record("/tmp/ŝtraße/✓.py", "f", 3, LOCATIONS_LINE_2, kind=4))
    more = area.python(1 | 1 << 24, [(ref, 0)])  # MH_TRACE_PY_MORE
    unsupported = area.python(3 << 16, [])
    [s, u] = area.records().stacks(np.array([more, unsupported], np.uint64))
    assert s.frames == (PyFrame("/tmp/ŝtraße/✓.py", 3, "f"),) and s.more
    assert u.why == "Python 3.11: an interpreter memhook cannot read (it reads CPython 3.9-3.13)"


@pytest.mark.parametrize("damage", ["ref past the area", "ref of no record", "cut record",
                                    "bad kind", "long lengths", "head past the area"])
def test_damaged_records_name_question_marks_and_never_raise(damage: str) -> None:
    area = _Area()
    good = _code_record("/a.py", "f", 1, LOCATIONS_LINE_2)
    ref = area.code(good)
    if damage == "ref past the area":
        ref = CODES_CAP // 8 + 5
    elif damage == "ref of no record":
        ref = area.codes_used // 8 + 3
    elif damage == "cut record":
        struct.pack_into("<I", area.mm, CODES_OFF, CODES_CAP * 2)
    elif damage == "bad kind":
        area.mm[CODES_OFF + 68] = 3  # filename_kind
    elif damage == "long lengths":
        struct.pack_into("<III", area.mm, CODES_OFF + 56, 10**9, 10**9, 10**9)
    rid = area.python(1, [(ref, 0)])
    if damage == "head past the area":
        rid = PY_CAP // 8  # the last word: a head whose frames would be outside
        struct.pack_into("<Q", area.mm, PY_OFF + PY_CAP - 8, 50)
    [stack] = area.records().stacks(np.array([rid], np.uint64))
    assert stack is not None
    if damage == "head past the area":
        assert stack.frames == ()
    else:
        assert stack.frames == (PyFrame("?", 0, "?"),), stack


def test_sites_ledger_peaks_and_leaks() -> None:
    sites = SiteLedger()
    sites.alloc("a.py:1 (f)", 100)
    sites.alloc("b.py:2 (g)", 50)
    sites.total_peaked()
    sites.free("a.py:1 (f)", 100)
    sites.alloc("b.py:2 (g)", 70)
    sites.leaked("b.py:2 (g)", 120)
    summary = sites.summary()
    assert summary["peak_by_python_site"] == [
        {"site": "a.py:1 (f)", "at_peak": 100, "own_peak": 100},
        {"site": "b.py:2 (g)", "at_peak": 50, "own_peak": 120}]
    assert summary["never_freed_by_python_site"] == [{"site": "b.py:2 (g)", "count": 1,
                                                      "bytes": 120}]
    assert sites.live["b.py:2 (g)"] == 0


def test_a_fork_child_starts_from_its_parents_modules() -> None:
    parent = ModuleMap()
    ffi = Module("/lib/x86_64-linux-gnu/libffi.so.8", 0x7F0000000000, 0x7F0000001000,
                 0x7F0000009000, 1)
    parent.add([(MODULE_LOAD, ffi)])
    child = ModuleMap()
    child.inherit(parent)
    # The child's own record of the same object at the same place adds nothing.
    child.add([(MODULE_LOAD, Module(ffi.path, ffi.base, ffi.lo, ffi.hi, 99))])
    assert len(child.modules) == 1
    caller = child.resolve(0x7F0000002000)
    assert caller is not None and caller.object == ffi.path
    assert 0x7F0000002000 in child._cache  # one candidate: cached


def test_a_fork_childs_parent_is_found_by_kernel_pid() -> None:
    """Images are known by kernel pid; a fork child's HELLO names its parent
    as its own PID namespace numbers it.  Two containers each run a
    program that is pid 1 there and forks: each child inherits from its own
    parent (the kernel's PPid), never from the other pid 1; a child whose
    parent is outside its namespace (ppid 0: ``unshare -fp``) too; a reaper
    that took a child over is not its parent."""
    from memhook.tracing.collector import Collector, _Image
    from memhook.tracing.ledger import Ledger, Process
    from memhook.tracing.peers import Peer
    from memhook.tracing.protocol import Hello

    def hello(pid: int, ppid: int, forked: bool = False) -> Hello:
        return Hello(pid, ppid, 0, 0, 0, 1 if forked else 0, 0, "/bin/x", ["x"], "")

    collector = Collector(Ledger([], []))
    try:
        def image(kernel_pid: int, own_pid: int, ppid: int = 1) -> _Image:
            got = _Image(Process(conn_id=kernel_pid, hello=hello(own_pid, ppid),
                                 kernel_pid=kernel_pid), None, None)  # type: ignore[arg-type]
            collector.images.append(got)
            return got

        plain, reaper = image(100, 100), image(7000, 7000)
        box_a, box_b = image(5000, 1, 0), image(6000, 1, 0)
        find = collector._parent
        # This namespace: the HELLO's ppid is the kernel's number.
        assert find(Peer(101, 0, None, (101,), 100), hello(101, 100, True)) is plain
        # The parent ended before the accept and the child was reparented:
        # its own ppid still names the parent (here still being read).
        assert find(Peer(102, 0, None, (102,), 7000), hello(102, 100, True)) is plain
        # In a container: the kernel's PPid, checked against the HELLO's 1.
        assert find(Peer(6001, 0, None, (6001, 2), 6000), hello(2, 1, True)) is box_b
        assert find(Peer(5001, 0, None, (5001, 2), 5000), hello(2, 1, True)) is box_a
        # Reparented inside a container: the reaper is nobody's parent here.
        assert find(Peer(6002, 0, None, (6002, 3), 7000), hello(3, 1, True)) is None
        # The parent outside the child's namespace (it unshared, then forked).
        assert find(Peer(5002, 0, None, (5002, 1), 100), hello(1, 0, True)) is plain
        assert reaper is not None
    finally:
        collector.images.clear()
        collector.close()


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
def test_the_readers_match_trace_proto_h(tmp_path) -> None:
    """area.py's RECORDS and pyframes.py's CODE are trace_proto.h's
    layouts, field for field (offset and size)."""
    from memhook.tracing import area

    exe = tmp_path / "proto_probe"
    subprocess.run(["cc", "-std=c11", f"-I{CSRC / 'trace'}",
                    str(HERE / "fixtures" / "proto_probe.c"),
                    "-o", str(exe)], check=True)
    rows = [line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                     check=True).stdout.splitlines()]
    offsets = {name: (int(off), int(size)) for name, off, size in rows}

    def layout(fmt: str, names: list[str], base: int) -> dict[str, tuple[int, int]]:
        out, at = {}, 0
        for name, code in zip(names, fmt.lstrip("<")):
            size = struct.calcsize("<" + code)
            out[name] = (base + at, size)
            at += size
        return out

    area_names = ["modules_off", "modules_cap", "modules_used", "modules_lost", "stacks_off",
                  "stacks_cap", "stacks_next", "stack_depth", "py_depth", "py_off", "py_cap",
                  "py_used", "py_lost", "codes_off", "codes_cap", "codes_used", "codes_lost",
                  "py_version", "reserved2"]
    ours = layout(area.RECORDS.format, area_names, 256)
    assert {f"area.{k}": v for k, v in ours.items()} == {k: v for k, v in offsets.items()
                                                        if k.startswith("area.")}
    assert offsets["area.py_lost"][0] == area._PY_LOST
    assert offsets["area.codes_lost"][0] == area._CODES_LOST
    assert offsets["area.py_version"][0] == area._PY_VERSION
    code_names = ["len", "firstlineno", "code", "filename_obj", "qualname_obj", "linetable_obj",
                  "filename_hash", "qualname_hash", "filename_len", "qualname_len",
                  "linetable_len", "filename_kind", "qualname_kind", "flags", "py_minor"]
    ours = layout(CODE.format, code_names, 0)
    assert {f"code.{k}": v for k, v in ours.items()} == {k: v for k, v in offsets.items()
                                                        if k.startswith("code.") and k != "code.size"}
    assert offsets["code.size"][0] == CODE.size
