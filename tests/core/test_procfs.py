"""csrc/core/procfs.c, the core's one reader of /proc/self/maps (reloc, bistro's
text_poke.c and islands all use it): every line's range, protection and name,
in order, as the kernel wrote them; a walk the callback stops ends there; and
a line longer than the reader's buffer still gives its range and protection
(checked by building the reader with a 96-byte buffer, so that every line
with a path is such a line)."""

from __future__ import annotations

from pathlib import Path

import pytest
from memhook_testing import CSRC, HAVE_CC, run_checked

from memhook._objects.procmaps import parse_maps

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler")

HERE = Path(__file__).resolve().parent


def _walk(native, c_test_dir: Path, stop_after: int = 0, line_max: int | None = None):
    name = f"maps_walk_{line_max or 'default'}"
    exe = c_test_dir / name
    if not exe.exists():
        extra = [f"-I{CSRC / 'core'}"]
        if line_max is not None:
            extra.append(f"-DMH_MAPS_LINE_MAX={line_max}")
        native.compile([HERE / "fixtures" / "maps_walk.c", CSRC / "core" / "procfs.c"], exe,
                       extra=extra)
    out = run_checked([str(exe), str(stop_after)]).stdout
    head, raw = out.split("raw\n", 1)
    lines = head.splitlines()
    assert lines[0] == "rc 0"
    entries = [line.split(" ", 4)[1:] for line in lines[1:]]
    return [(int(a, 16), int(b, 16), p, n[1:-1]) for a, b, p, n in entries], raw


def _expected(raw: str):
    rows = []
    for line in raw.splitlines():
        fields = line.split(maxsplit=5)
        lo, hi = fields[0].split("-")
        rows.append((int(lo, 16), int(hi, 16), fields[1][:3], fields[5] if len(fields) > 5 else ""))
    return rows


def test_walk_matches_the_file(native, c_test_dir: Path) -> None:
    got, raw = _walk(native, c_test_dir)
    want = _expected(raw)
    assert len(want) > 5  # an executable, libc, the loader, stack, vdso...
    assert got == want
    assert any(name == "[stack]" for *_, name in got)
    assert any(name.endswith("maps_walk_default") for *_, name in got)


def test_the_python_reader_agrees_with_the_core(native, c_test_dir: Path) -> None:
    """memhook/_objects/procmaps.py, the Python side's one reader, reads the same
    text into the same ranges, protections and names as the core's."""
    got, raw = _walk(native, c_test_dir)
    assert [(m.start, m.end, m.perms[:3], m.path) for m in parse_maps(raw)] == got


def test_callback_stops_the_walk(native, c_test_dir: Path) -> None:
    got, raw = _walk(native, c_test_dir, stop_after=3)
    assert got == _expected(raw)[:3]


def test_lines_longer_than_the_buffer(native, c_test_dir: Path) -> None:
    got, raw = _walk(native, c_test_dir, line_max=96)
    want = _expected(raw)
    long_lines = [line for line in raw.splitlines() if len(line) >= 95]
    assert long_lines, "expected some mapping with a long path (libc's, at least)"
    # Ranges and protections of every line, long ones included; a long
    # line's name is cut short, never taken from the next line.
    assert [g[:3] for g in got] == [w[:3] for w in want]
    for g, w in zip(got, want):
        assert w[3].startswith(g[3])


def test_resume_pc_of_parked_running_and_gone_threads(native, c_test_dir: Path) -> None:
    """mh_task_resume_pc (bistro's way to locate a thread no signal reaches,
    docs/design/live-patching.md): a thread asleep in read() is located at
    the instruction after its `syscall` (0f 05); a spinning thread is never
    located (EAGAIN: the kernel says "running", preempted or not); a thread
    that has exited is ESRCH."""
    import errno
    exe = c_test_dir / "resume_pc"
    native.compile([HERE / "fixtures" / "resume_pc.c", CSRC / "core" / "procfs.c"], exe,
                   extra=[f"-I{CSRC / 'core'}", "-lpthread"])
    out = dict(line.split(" ", 1) for line in run_checked([str(exe)]).stdout.splitlines())
    assert out["parked"] == "0 0f05", out
    assert out["spinner"] == str(errno.EAGAIN), out
    assert out["gone"] == str(errno.ESRCH), out
