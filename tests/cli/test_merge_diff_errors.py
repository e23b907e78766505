"""Bad input to `memhook diff` and `memhook merge`: a clear message and a
nonzero exit, never a traceback - a jsonl cut short, traces of different
memhook versions, files that are not traces, an empty directory, no files."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from cli_testing import memhook
from trace_files_testing import finished, records, rewrite, trace_sites

DATA_ERROR = 65  # memhook/cli/diff.py: DATA_ERROR (sysexits' EX_DATAERR)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("good")
    a = trace_sites("a.jsonl", cwd=tmp, env=None)
    b = trace_sites("b.jsonl", "leak", cwd=tmp)
    finished(a)
    finished(b)
    return tmp / "a.jsonl", tmp / "b.jsonl"


def _both(a: Path, b: Path, out: Path, *extra: str) -> list:
    return [memhook("diff", str(a), str(b), *extra),
            memhook("merge", str(a), str(b), "-o", str(out), *extra)]


def _no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr


def test_a_cut_last_line_is_said_and_the_rest_is_used(good, tmp_path: Path) -> None:
    data = good[1].read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[:-40])  # the last line loses its end
    out = tmp_path / "m.json"
    diff, merge = _both(good[0], cut, out)
    for proc in (diff, merge):
        _no_traceback(proc)
        assert proc.returncode == DATA_ERROR, proc.stderr
        n = len(data.splitlines())
        assert f"its last line (line {n}, " in proc.stderr and "cut short" in proc.stderr
    # What was whole is in the outputs: the diff's tables, the merged view.
    assert "by call site" in diff.stdout
    events = json.loads(out.read_text())["traceEvents"]
    instants = sum(1 for e in events if e["ph"] == "i")
    whole = sum(1 for r in records(good[0]) + records(good[1]) if r["kind"] != "header")
    assert instants == whole - 1


def test_a_broken_line_in_the_middle_is_an_error(good, tmp_path: Path) -> None:
    lines = good[1].read_text().splitlines()
    lines[3] = lines[3][:20]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "m.json"
    for proc in _both(good[0], bad, out):
        _no_traceback(proc)
        assert proc.returncode == DATA_ERROR
        assert f"{bad}: line 4 is not JSON" in proc.stderr, proc.stderr
    assert not out.exists() and not list(tmp_path.glob("*.partial"))  # no half a view
    lines = good[1].read_text().splitlines()
    lines[2] = json.dumps({"kind": "alloc", "function": "cuMemAlloc_v2"})
    bad.write_text("\n".join(lines) + "\n")
    proc = memhook("diff", str(good[0]), str(bad))
    assert proc.returncode == DATA_ERROR and "line 3 is not an event (KeyError" in proc.stderr


def test_traces_of_different_versions(good, tmp_path: Path) -> None:
    old = rewrite(good[1], tmp_path / "old.jsonl", {"memhook": "0.0.9"})
    out = tmp_path / "m.json"
    for proc in _both(good[0], old, out):
        _no_traceback(proc)
        assert proc.returncode == DATA_ERROR
        version = records(good[0])[0]["memhook"]
        assert "different memhook versions" in proc.stderr
        assert f"memhook {version}: 1 file ({good[0]})" in proc.stderr
        assert f"memhook 0.0.9: 1 file ({old})" in proc.stderr
        assert "--mixed-versions" in proc.stderr
    assert not out.exists()
    for proc in _both(good[0], old, out, "--mixed-versions"):
        assert proc.returncode == 0, proc.stderr
    newer = rewrite(good[1], tmp_path / "newer.jsonl", {"memhook": "9.0", "format": 2})
    for proc in _both(good[0], newer, out):
        _no_traceback(proc)
        assert proc.returncode == DATA_ERROR
        assert "in jsonl format 2; this memhook reads format 1" in proc.stderr


@pytest.mark.parametrize("what", ["empty", "text", "chrome", "pickle", "json list"])
def test_a_file_that_is_not_a_trace(good, tmp_path: Path, what: str) -> None:
    bad = tmp_path / "bad.jsonl"
    if what == "empty":
        bad.write_bytes(b"")
    elif what == "text":
        bad.write_text("hello\nworld\n")
    elif what == "chrome":
        bad.write_text('{"displayTimeUnit":"ns","traceEvents":[\n{"ph":"i"}\n]}\n')
    elif what == "pickle":
        bad.write_bytes(pickle.dumps({"segments": [], "device_traces": []}))
    else:
        bad.write_text('[1, 2, 3]\n')
    out = tmp_path / "m.json"
    for proc in _both(good[0], bad, out):
        _no_traceback(proc)
        assert proc.returncode == DATA_ERROR, proc.stderr
        assert f"{bad} is not a memhook jsonl trace (" in proc.stderr
        assert "`memhook trace -f jsonl -o FILE`" in proc.stderr
    assert not out.exists()


def test_no_files_an_empty_directory_a_missing_file(good, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a trace\n")
    proc = memhook("merge", str(empty), "-o", str(tmp_path / "m.json"))
    _no_traceback(proc)
    assert proc.returncode == 2 and f"{empty} holds no .jsonl files" in proc.stderr
    proc = memhook("merge", "-o", str(tmp_path / "m.json"))
    _no_traceback(proc)
    assert proc.returncode == 2 and "required: FILE" in proc.stderr
    proc = memhook("merge", str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2 and "nope.jsonl: no such file" in proc.stderr
    proc = memhook("diff", str(good[0]), str(tmp_path / "nope.jsonl"))
    _no_traceback(proc)
    assert proc.returncode == DATA_ERROR and "No such file" in proc.stderr
    proc = memhook("diff", str(good[0]), str(empty))
    assert proc.returncode == DATA_ERROR and "is a directory" in proc.stderr
    assert not (tmp_path / "m.json").exists()


def test_a_trace_without_a_header_diffs_but_does_not_merge(good, tmp_path: Path) -> None:
    """A trace of a memhook that wrote no header (events from line 1): its
    figures compare, but its clock has no anchor to align."""
    old = tmp_path / "old.jsonl"
    old.write_text("".join(line + "\n" for line in good[1].read_text().splitlines()[1:]))
    proc = memhook("diff", str(good[0]), str(old), "--mixed-versions", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["status"] for r in json.loads(proc.stdout)["sites"]].count("grown") == 1
    proc = memhook("merge", str(good[0]), str(old), "-o", str(tmp_path / "m.json"),
                   "--mixed-versions")
    _no_traceback(proc)
    assert proc.returncode == DATA_ERROR and f"{old} has no clock anchor" in proc.stderr


def _long_trace(src: Path, dst: Path, copies: int) -> Path:
    """``src``'s events again and again, later each time, at fresh addresses."""
    header, *events = records(src)
    span = events[-1]["ts_ns"] - events[0]["ts_ns"] + 1
    with dst.open("w") as out:
        out.write(json.dumps(header) + "\n")
        for n in range(copies):
            for e in events:
                e = dict(e, ts_ns=e["ts_ns"] + n * span, address=e["address"] + (n << 32))
                out.write(json.dumps(e) + "\n")
    return dst


def test_an_interrupt_leaves_no_half_written_view(good, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    big = _long_trace(good[1], tmp_path / "big.jsonl", 20_000)
    out = tmp_path / "m.json"
    proc = subprocess.Popen([sys.executable, "-m", "memhook", "merge", str(good[0]), str(big),
                             "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    partial = tmp_path / "m.json.partial"
    deadline = time.monotonic() + 120
    while not (partial.exists() and partial.stat().st_size > 0) and proc.poll() is None:
        assert time.monotonic() < deadline, "the merge wrote nothing in 120 s"
        time.sleep(0.01)
    assert proc.poll() is None, "the merge ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)  # ^C, mid-merge
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted; nothing was written" in err, err
    assert "Traceback" not in err
    assert not out.exists() and not partial.exists()
