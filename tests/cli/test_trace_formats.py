"""Each output format of `memhook trace`, written for one program and parsed back."""

from __future__ import annotations

import importlib.util
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_testing import MiB, memhook, read_jsonl, summary_section

PEAK_CUDA = 256 * MiB + 1 * MiB + 64  # the three device buffers of static_app at once


def _trace(programs, tmp_path: Path, fmt: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / f"trace.{fmt}"
    proc = memhook("trace", "--sim", "-f", fmt, "-o", str(out), "--", str(programs.static_app))
    assert proc.returncode == 0, proc.stderr
    return proc, out


def test_text(programs, tmp_path: Path) -> None:
    _, out = _trace(programs, tmp_path, "text")
    text = out.read_text()
    events = [ln for ln in text.splitlines() if re.search(r"\] (alloc|free ) ", ln)]
    assert len(events) == 12, text
    line = re.compile(r"^ +\d+\.\d{6} \[(\d+)/(\d+)\] (alloc|free ) (\w+) +(0x[0-9a-f]+) +"
                      r"([\d.]+ (?:B|KiB|MiB|GiB|TiB|PiB)) +(CUDA\w*) +dev +(-?\d+)  (.+)  from (\S+)$")
    parsed = [line.match(ln) for ln in events]
    assert all(parsed), events
    assert {m.group(9) for m in parsed} == {"ok", "CUDA_ERROR_OUT_OF_MEMORY (2)"}
    assert {m.group(10) for m in parsed} == {"cli_static_app"}  # the caller's object
    assert any(m.group(6) == "256 MiB" for m in parsed)
    # pid/tid: static_app allocates on its main thread, whose tid is the pid.
    assert {(m.group(1), m.group(2)) for m in parsed} == {(parsed[0].group(1),) * 2}
    assert "process started" in text and "process exited (12 events)" in text
    # The summary follows the events in the same output.
    functions = summary_section(text, "calls and bytes per function:")  # (less its headings)
    heading = text.splitlines()[text.splitlines().index("calls and bytes per function:") + 1]
    assert heading.split() == ["function", "calls", "failed", "bytes"]
    assert any(f.startswith("cuMemAlloc_v2") and f.split()[1:3] == ["5", "1"] for f in functions)
    peaks = summary_section(text, "peak live bytes per device:")
    assert peaks[0].startswith("cuda:0") and f"({PEAK_CUDA} bytes)" in peaks[0]


def test_jsonl(programs, tmp_path: Path) -> None:
    proc, out = _trace(programs, tmp_path, "jsonl")
    events = read_jsonl(out)
    assert len(events) == 12
    keys = {"kind", "function", "address", "size", "mem_type", "device", "pid", "tid",
            "ts_ns", "result", "caller"}
    for e in events:
        assert set(e) == keys
        assert set(e["caller"]) == {"object", "symbol", "offset", "address"}
        # static_app links the runtime statically: its calls are named
        # after the executable (README, "Who allocated it").
        assert e["caller"]["object"] == str(programs.static_app)
        assert e["kind"] in ("alloc", "free")
        assert e["mem_type"] in ("CUDA", "CUDA_MANAGED", "CUDA_HOST", "UNKNOWN", "HOST")
        assert isinstance(e["address"], int) and isinstance(e["ts_ns"], int)
    assert [e["ts_ns"] for e in events] == sorted(e["ts_ns"] for e in events)
    assert len({e["pid"] for e in events}) == 1
    assert "memhook trace summary: 12 events" in proc.stderr  # summary on stderr


def test_jsonl_to_stdout_keeps_the_program_output_apart(programs) -> None:
    proc = memhook("trace", "--sim", "-f", "jsonl", "--", str(programs.static_app))
    assert proc.returncode == 0
    header, *lines = proc.stdout.splitlines()
    assert json.loads(header)["kind"] == "header"
    records = [json.loads(ln) for ln in lines]
    assert all(r["function"] for r in records)
    # The 12 events, and the OOM report of its failed allocation.
    assert [r["kind"] for r in records].count("oom") == 1 and len(records) == 13
    assert "static_app: done" in proc.stderr


def test_chrome(programs, tmp_path: Path) -> None:
    proc, out = _trace(programs, tmp_path, "chrome")
    assert f"wrote the chrome trace to {out}" in proc.stderr
    trace = json.loads(out.read_text())
    events = trace["traceEvents"]
    calls = [e for e in events if e["ph"] == "i"]
    assert len(calls) == 12
    for e in calls:
        assert e["s"] == "t" and e["ts"] >= 0 and e["name"].startswith("cu")
        assert {"address", "size", "mem_type", "device", "result"} <= set(e["args"])
    failed = [e for e in calls if e["args"]["result"]]
    assert [(e["cat"], e["args"]["error"]) for e in failed] == [
        ("alloc,failed", "CUDA_ERROR_OUT_OF_MEMORY")]
    counters: dict[str, list[int]] = {}
    for e in events:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).append(e["args"]["bytes"])
    assert max(counters["live bytes cuda:0"]) == PEAK_CUDA
    assert counters["live bytes cuda:0"][-1] == 0  # the leak is released at exit
    assert max(counters["live bytes host (pinned)"]) == 4 * MiB
    names = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert any("static_app" in e["args"]["name"] for e in names)


def _memviz(programs, tmp_path: Path) -> tuple[dict, Path]:
    _, out = _trace(programs, tmp_path, "memviz")
    with out.open("rb") as fh:
        return pickle.load(fh), out


def test_memviz_snapshot_shape(programs, tmp_path: Path) -> None:
    snap, _ = _memviz(programs, tmp_path)
    assert set(snap) == {"segments", "device_traces"}
    (segment,) = snap["segments"]  # what was never freed: the 8 MiB leak
    assert segment["total_size"] == 8 * MiB and segment["device"] == 0
    (block,) = segment["blocks"]
    assert block["state"] == "active_allocated" and block["address"] == segment["address"]
    trace = snap["device_traces"][0]
    actions = [e["action"] for e in trace]
    assert actions.count("segment_alloc") == actions.count("alloc") == 5  # no pinned host
    assert actions.count("free_completed") == actions.count("segment_free") == 4
    assert actions.count("oom") == 1
    for e in trace:
        assert {"action", "addr", "size", "stream", "frames", "time_us"} <= set(e)
        assert e["frames"][0]["name"].startswith("cu")


def test_memviz_renders_with_pytorch(programs, tmp_path: Path) -> None:
    """torch.cuda._memory_viz (the CPU wheel is enough) reads the pickle and
    renders the trace and segment views.  Skipped where torch is not
    installed (it is not a test dependency: the CPU wheel is ~200 MB)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed here")
    _, out = _memviz(programs, tmp_path)
    code = (
        "import base64, json, pickle, re, sys\n"
        "from torch.cuda import _memory_viz as mv\n"
        "snap = pickle.load(open(sys.argv[1], 'rb'))\n"
        "text = mv.trace(snap)\n"
        "assert 'raise OutOfMemoryError' in text and 'TOTAL MEM: 8.0MiB' in text, text\n"
        "assert 'total_allocated: 8.0MiB' in mv.segsum(snap)\n"
        "for html in (mv.trace_plot(snap), mv.segment_plot(snap)):\n"
        "    files = json.loads(re.search(r'const local_files = (.*)', html).group(1))\n"
        "    again = pickle.loads(base64.b64decode(files[0]['base64']).rstrip(b'\\0'))\n"
        "    assert again == snap\n"
        "print('rendered')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], check=False, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "rendered" in proc.stdout, proc.stderr
