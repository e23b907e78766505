"""`memhook report`: what the page holds (its embedded data), read back
without a browser - the OOM marked at the failed call with what was live
then, one lane per rank whether the ranks come as files or as one merged
file, a long trace folded to a bounded series that keeps its peak, and bad
input refused with a clear message and no traceback.
(tests/cli/test_report_browser.py draws the page.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_testing import MiB, memhook
from report_testing import OOM_PROGRAM, page_data, trace_oom, trace_ranks
from trace_files_testing import records, rewrite

from memhook.report.model import Series

DATA_ERROR = 65  # memhook/cli/diff.py: DATA_ERROR
LIVE_AT_OOM = 3 * 6 * MiB + 2 * 4 * MiB  # oom_fill.py: weights() + activations()


@pytest.fixture(scope="module")
def oom_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return trace_oom(tmp_path_factory.mktemp("oom") / "oom.jsonl")


@pytest.fixture(scope="module")
def rank_traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return trace_ranks(tmp_path_factory.mktemp("ranks"))


def _report(*args: str) -> tuple[int, str]:
    proc = memhook("report", *args)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc.returncode, proc.stderr


def _totals(lane: dict) -> list[int]:
    return [sum(p[1:]) for p in lane["points"]]


def _find(tree: dict, name_part: str) -> dict:
    """The first node (depth first) whose name holds ``name_part``."""
    if name_part in tree["n"]:
        return tree
    for child in tree.get("c", []):
        try:
            return _find(child, name_part)
        except LookupError:
            pass
    raise LookupError(name_part)


def test_the_oom_is_marked_with_what_was_live_then(oom_trace: Path, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    status, err = _report(str(oom_trace), "-o", str(page))
    assert status == 0, err
    assert f"wrote {page} (" in err and "1 lane, 1 OOM" in err
    data = page_data(page)
    (lane,) = data["lanes"]
    assert lane["device"] == "cuda:0"
    assert {data["libraries"][i] for i in lane["libs"]} == {
        next(n for n in data["libraries"] if n.startswith("cydriver.")), "libffi.so.8"}
    # The series: 27 MiB at the peak (scratch()'s 1 MiB on top), and the
    # activations (never freed) at the end.
    assert lane["peak"] == LIVE_AT_OOM + MiB == max(_totals(lane))
    assert _totals(lane)[-1] == 2 * 4 * MiB
    # The mark: at the failed call's time, on the clock of the series.
    (oom,) = lane["ooms"]
    rows = records(oom_trace)
    header = rows[0]
    failed = next(r for r in rows if r["kind"] == "alloc" and r["result"])
    # (the page's times count from the earliest event: a file's lines may be
    # a little out of time order, as the trace's reorder window allows)
    first = min(r["ts_ns"] for r in rows if r["kind"] in ("alloc", "free"))
    assert oom["t"] == pytest.approx((failed["ts_ns"] - first) / 1e9, abs=1e-9)
    assert header["clock"]  # (the times went through the anchor: differences are kept)
    assert (oom["function"], oom["size"], oom["error"]) == (
        "cuMemAlloc_v2", 16 * MiB, "CUDA_ERROR_OUT_OF_MEMORY")
    assert oom["live_bytes"] == LIVE_AT_OOM
    # The flame graph of what was live then: weights() and activations(), each
    # down through its native caller to the allocating call.
    view = data["flames"][1 + oom["flame"]]
    assert view["name"].startswith("live at the OOM on ") and view["total"] == LIVE_AT_OOM
    weights = _find(view["tree"], f"weights ({OOM_PROGRAM}:")
    activations = _find(view["tree"], f"activations ({OOM_PROGRAM}:")
    assert (weights["k"], weights["v"], activations["v"]) == ("py", 18 * MiB, 8 * MiB)
    (native,) = weights["c"]
    assert native["k"] == "native" and native["n"].startswith("cydriver.")
    assert native["c"] == [{"n": "cuMemAlloc_v2", "k": "api", "v": 18 * MiB}]
    with pytest.raises(LookupError):
        _find(view["tree"], "scratch (")  # freed before the failure
    names = [f["name"] for f in data["flames"]]
    assert names[0] == "bytes allocated" and names[-1] == "live at the end (never freed)"
    assert data["flames"][0]["total"] == LIVE_AT_OOM + MiB
    assert data["flames"][-1]["total"] == 2 * 4 * MiB


def test_one_lane_per_rank_from_files_or_a_merged_file(rank_traces: list[Path],
                                                       tmp_path: Path) -> None:
    page = tmp_path / "ranks.html"
    status, err = _report(*map(str, reversed(rank_traces)), "-o", str(page))
    assert status == 0, err  # (the lanes come in rank order, whatever the arguments' order)
    data = page_data(page)
    host = records(rank_traces[0])[0]["host"]
    assert [(lane["label"], lane["device"]) for lane in data["lanes"]] == [
        (f"rank 0 @ {host}", "cuda:0"), (f"rank 1 @ {host}", "cuda:0")]
    # The flame graph is split by rank first; only rank 1 leaked (3 x 64 KiB).
    allocated = data["flames"][0]["tree"]
    assert [c["n"] for c in allocated["c"]] == [f"rank 0 @ {host}", f"rank 1 @ {host}"]
    leaked = data["flames"][-1]["tree"]
    assert leaked["v"] == 3 * 64 * 1024 and [c["n"] for c in leaked["c"]] == [
        f"rank 1 @ {host}"]
    # The same ranks as one `memhook merge -f jsonl` file: the same lanes.
    merged = tmp_path / "merged.jsonl"
    proc = memhook("merge", *map(str, rank_traces), "-f", "jsonl", "-o", str(merged))
    assert proc.returncode == 0, proc.stderr
    page2 = tmp_path / "merged.html"
    status, err = _report(str(merged), "-o", str(page2))
    assert status == 0, err
    again = page_data(page2)
    def unnumbered(lanes: list[dict]) -> list[dict]:  # (a track's number is its input's)
        return [{k: v for k, v in lane.items() if k != "track"} for lane in lanes]

    assert unnumbered(again["lanes"]) == unnumbered(data["lanes"])
    assert again["flames"] == data["flames"]


def test_a_trace_laid_out_by_another_writer_reads_the_same(oom_trace: Path,
                                                           tmp_path: Path) -> None:
    """The same records in another JSON layout (json.dumps' spaces: a tool
    that rewrote the file) give the same page, call paths and all."""
    pages = []
    for name, path in (("as-written", oom_trace),
                       ("rewritten", rewrite(oom_trace, tmp_path / "rewritten.jsonl"))):
        page = tmp_path / f"{name}.html"
        status, err = _report(str(path), "-o", str(page))
        assert status == 0, err
        pages.append(page_data(page))
    assert b'"caller": {' in (tmp_path / "rewritten.jsonl").read_bytes()
    for lane in (*pages[0]["lanes"], *pages[1]["lanes"]):
        del lane["label"]  # (the file's name)
    assert pages[1]["lanes"] == pages[0]["lanes"]
    assert json.dumps(pages[1]["flames"]).replace("rewritten.jsonl", "oom.jsonl") == \
        json.dumps(pages[0]["flames"])


def _synthetic(src: Path, dst: Path, n: int) -> tuple[int, int]:
    """``src``'s header, then ``n`` events of one library: a sawtooth of
    64 KiB allocations, one 1 GiB spike freed at once, in the middle.
    (The peak, the bytes live at the end.)"""
    header = records(src)[0]
    t0 = header["clock"]["monotonic_ns"]
    template = ('{"kind":"%s","function":"%s","address":%d,"size":%d,"mem_type":"CUDA",'
                '"device":0,"pid":7,"tid":7,"ts_ns":%d,"result":0,"caller":{"object": '
                '"/opt/lib/libbig.so", "symbol": "grow", "offset": 16, "address": 4096}}\n')
    live, peak, held = 0, 0, []
    with dst.open("w") as out:
        out.write(json.dumps(header) + "\n")
        for i in range(n):
            t = t0 + 1000 * i
            if i == n // 2:
                size = 1 << 30
                out.write(template % ("alloc", "cuMemAlloc_v2", 1 << 40, size, t))
                peak = max(peak, live + size)
                out.write(template % ("free", "cuMemFree_v2", 1 << 40, size, t + 1))
            elif i % 100 < 60:
                address = (1 << 32) + i
                held.append(address)
                live += 64 * 1024
                out.write(template % ("alloc", "cuMemAlloc_v2", address, 64 * 1024, t))
            else:
                live -= 64 * 1024
                out.write(template % ("free", "cuMemFree_v2", held.pop(), 64 * 1024, t))
            peak = max(peak, live)
    return peak, live


def test_a_long_trace_is_folded_and_keeps_its_peak(rank_traces: list[Path],
                                                   tmp_path: Path) -> None:
    trace = tmp_path / "long.jsonl"
    peak, end = _synthetic(rank_traces[0], trace, 60_000)
    page = tmp_path / "long.html"
    status, err = _report(str(trace), "-o", str(page), "--points", "50")
    assert status == 0, err
    (lane,) = page_data(page)["lanes"]
    totals = _totals(lane)
    assert len(totals) <= 6 * 50  # 2 x points buckets, each its peak, low and end
    assert max(totals) == lane["peak"] == peak
    assert totals[-1] == end
    assert [p[0] for p in lane["points"]] == sorted(p[0] for p in lane["points"])
    assert page.stat().st_size < 2 * MiB


def test_series_fold_to_a_bound_and_keep_peaks_and_ends() -> None:
    s = Series(points=8)
    shares = [0]
    states = []
    for i in range(5000):
        delta = 7 if (i // 250) % 2 == 0 else -5
        shares[0] += delta
        s.add(i * 997, shares[0], shares, 0, delta)
        states.append(shares[0])
    assert len(s.buckets) <= 16
    samples = s.samples(shares)
    assert max(v[0] for _, v in samples) == max(states)
    assert samples[-1][1] == (states[-1],)
    assert min(v[0] for _, v in samples) <= min(states[250:])  # the valleys show too


def test_series_states_of_one_time_keep_their_order() -> None:
    """Events of one time stamp (a late event is counted at the latest time
    seen): peak, low and end come out in the order they were reached."""
    for order in ([30, 5, 20], [5, 30, 20], [20, 30, 5], [30, 20, 5]):
        s = Series(points=4)
        s.add(0, 10, [10], 0, 10)
        shares = [10]
        for total in order:
            delta = total - shares[0]
            shares[0] = total
            s.add(50, total, shares, 0, delta)
        samples = s.samples(shares)
        assert samples[-1] == (50, (order[-1],)), (order, samples)
        totals = [v[0] for _, v in samples]
        assert [t for t in totals if t in (30, 5)] == [t for t in order if t in (30, 5)], \
            (order, samples)


def test_a_cut_trace_is_drawn_and_said(oom_trace: Path, tmp_path: Path) -> None:
    data = oom_trace.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[:-25])
    page = tmp_path / "cut.html"
    status, err = _report(str(cut), "-o", str(page))
    assert status == DATA_ERROR
    assert "cut short" in err and f"wrote {page}" in err
    assert any("cut short" in n for n in page_data(page)["notes"])


@pytest.mark.parametrize("what", ["empty", "text", "json list"])
def test_a_file_that_is_not_a_trace(oom_trace: Path, tmp_path: Path, what: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text({"empty": "", "text": "hello\n", "json list": "[1, 2]\n"}[what])
    page = tmp_path / "r.html"
    status, err = _report(str(oom_trace), str(bad), "-o", str(page))
    assert status == DATA_ERROR and f"{bad} is not a memhook jsonl trace (" in err
    assert not page.exists() and not Path(f"{page}.partial").exists()


def test_versions_directories_anchors_and_outputs(oom_trace: Path, rank_traces: list[Path],
                                                  tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    old = rewrite(rank_traces[0], tmp_path / "old.jsonl", {"memhook": "0.0.9"})
    status, err = _report(str(rank_traces[1]), str(old), "-o", str(page))
    assert status == DATA_ERROR and "different memhook versions" in err
    assert "--mixed-versions" in err and not page.exists()
    status, err = _report(str(rank_traces[1]), str(old), "-o", str(page), "--mixed-versions")
    assert status == 0 and len(page_data(page)["lanes"]) == 2, err
    empty = tmp_path / "empty"
    empty.mkdir()
    status, err = _report(str(empty), "-o", str(page))
    assert status == 2 and f"{empty} holds no .jsonl files" in err
    status, err = _report(str(rank_traces[0].parent), "-o", str(page))  # a directory of ranks
    assert status == 0 and len(page_data(page)["lanes"]) == 2, err
    lines = oom_trace.read_text().splitlines()
    headless = tmp_path / "headless.jsonl"
    headless.write_text("\n".join(lines[1:]) + "\n")  # an older memhook's: no header
    status, err = _report(str(headless), str(rank_traces[0]), "-o", str(page),
                          "--mixed-versions")  # (a headerless file counts as another version)
    assert status == DATA_ERROR and "has no clock anchor" in err
    status, err = _report(str(headless), "-o", str(page))  # alone, its own clock will do
    assert status == 0 and page_data(page)["lanes"][0]["ooms"], err
    status, err = _report(str(oom_trace), "-o", str(tmp_path / "no" / "such" / "r.html"))
    assert status == 2 and "cannot write" in err
    proc = memhook("report", str(oom_trace), "-o", "-")
    assert proc.returncode == 0 and proc.stdout.startswith("<!DOCTYPE html>"), proc.stderr
    assert "wrote the page to stdout" in proc.stderr
    status, err = _report(str(oom_trace), "--points", "1")
    assert status == 2 and "--points 1" in err
    assert not os.path.exists("memhook-report.html.partial")


def test_flame_views_of_ooms_are_bounded(oom_trace: Path, tmp_path: Path) -> None:
    """A flame view for the first OOM of each lane, up to OOM_VIEWS_MAX; every
    OOM is still marked."""
    from memhook.report.model import OOM_VIEWS_MAX

    rows = records(oom_trace)
    failed = next(r for r in rows if r["kind"] == "alloc" and r["result"])
    oom = next(r for r in rows if r["kind"] == "oom")
    lines = [json.dumps(rows[0])]
    devices = OOM_VIEWS_MAX + 4
    for device in range(devices):
        for attempt in range(2):  # each device fails twice
            ok = dict(failed, result=0, device=device, address=4096 * (device * 2 + attempt + 1),
                      size=MiB)
            lines += [json.dumps(ok), json.dumps(dict(failed, device=device)),
                      json.dumps(dict(oom, device=device))]
    trace = tmp_path / "many.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    page = tmp_path / "many.html"
    status, err = _report(str(trace), "-o", str(page))
    assert status == 0, err
    data = page_data(page)
    assert [len(lane["ooms"]) for lane in data["lanes"]] == [2] * devices
    assert len(data["flames"]) == 2 + OOM_VIEWS_MAX
    assert [lane["ooms"][0]["flame"] for lane in data["lanes"]] == \
        list(range(OOM_VIEWS_MAX)) + [None] * 4
    assert all(lane["ooms"][1]["flame"] is None for lane in data["lanes"])
    assert data["flames"][1]["total"] == MiB  # device 0's first allocation, live at its first OOM
    assert any("4 more lanes ran out of memory" in n for n in data["notes"])


def test_an_interrupt_writes_nothing(rank_traces: list[Path], tmp_path: Path) -> None:
    """^C while the traces are read: status 130, a line saying so, no page."""
    import signal
    import subprocess
    import sys
    import time

    trace = tmp_path / "long.jsonl"
    _synthetic(rank_traces[0], trace, 100_000)
    page = tmp_path / "r.html"
    proc = subprocess.Popen([sys.executable, "-m", "memhook", "report", str(trace), "-o",
                             str(page)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fds = Path(f"/proc/{proc.pid}/fd")
    deadline = time.monotonic() + 120

    def reading() -> bool:
        try:
            return any(os.readlink(fd) == str(trace) for fd in fds.iterdir())
        except OSError:  # (a descriptor closed while listed)
            return False

    while not reading() and proc.poll() is None:
        assert time.monotonic() < deadline, "the report did not open its input in 120 s"
        time.sleep(0.005)
    assert proc.poll() is None, "the report ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted; nothing was written" in err, err
    assert "Traceback" not in err
    assert not page.exists() and not Path(f"{page}.partial").exists()
