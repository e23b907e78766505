"""One trace per rank (`memhook trace -o t-%r.jsonl`) and `memhook merge`.

torch is not a dependency of the test environment, so the four ranks are
launched here as a launcher would: four `memhook trace` processes at once,
each with its own RANK (what torchrun sets for each worker).  Then: the
merged Perfetto JSON holds four rank tracks, every event of every file,
in time order per rank; a copy of a trace as another host with its
monotonic clock 10 s ahead comes out aligned with the original; the
jsonl and memviz views hold the same events.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import socket
import time
from pathlib import Path

import pytest
from cli_testing import memhook
from memhook import __version__
from trace_files_testing import finished, records, rewrite, trace_sites

RANKS = 4


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ranks")
    procs = []
    for rank in range(RANKS):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(RANKS))
        procs.append(trace_sites("t-%r.jsonl", *(["leak"] if rank == 2 else []), cwd=tmp,
                                 env=env))
    for proc in procs:
        finished(proc)
    return tmp


def _events(path: Path) -> list[dict]:
    return [r for r in records(path) if r["kind"] in ("alloc", "free")]


def test_each_rank_wrote_its_file_with_a_header(ranks: Path) -> None:
    assert sorted(p.name for p in ranks.glob("t-*.jsonl")) == [f"t-{r}.jsonl"
                                                               for r in range(RANKS)]
    for rank in range(RANKS):
        header = records(ranks / f"t-{rank}.jsonl")[0]
        assert header["kind"] == "header" and header["format"] == 1
        assert (header["rank"], header["rank_from"]) == (rank, "RANK")
        assert header["host"] == socket.gethostname()
        assert header["memhook"] == __version__
        clock = header["clock"]
        # The anchor is one instant on both clocks: now minus then agrees on both.
        since_real = time.clock_gettime_ns(time.CLOCK_REALTIME) - clock["realtime_ns"]
        since_mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - clock["monotonic_ns"]
        assert 0 < since_mono < 600e9 and abs(since_real - since_mono) < 1e9
        assert 0 <= clock["uncertainty_ns"] < 1e8
        events = _events(ranks / f"t-{rank}.jsonl")
        assert len(events) == (14 if rank != 2 else 11)  # 7 allocs (+ 7 or 4 frees)
        assert all(e["ts_ns"] >= clock["monotonic_ns"] for e in events)


def test_merged_chrome_has_a_track_per_rank_and_every_event(ranks: Path, tmp_path: Path) -> None:
    out = tmp_path / "merged.json"
    proc = memhook("merge", *(str(ranks / f"t-{r}.jsonl") for r in range(RANKS)), "-f", "chrome",
                   "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    trace = json.loads(out.read_text())
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    host = socket.gethostname()
    assert sorted(names.values()) == [f"rank {r} @ {host}" for r in range(RANKS)]
    by_track = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "i":
            by_track[names[e["pid"]]].append(e)
    for rank in range(RANKS):
        mine = by_track[f"rank {rank} @ {host}"]
        src = _events(ranks / f"t-{rank}.jsonl")
        # Every event of the file, in its order, none of another's.
        assert [(e["name"], int(e["args"]["address"], 16), e["args"]["size"]) for e in mine] == \
            [(e["function"], e["address"], e["size"]) for e in src]
        stamps = [e["ts"] for e in mine]
        assert stamps == sorted(stamps)
        counters = [e for e in events if e["ph"] == "C" and names.get(e["pid"]) ==
                    f"rank {rank} @ {host}"]
        assert counters and counters[-1]["args"]["bytes"] == (3 * 64 * 1024 if rank == 2 else 0)
    # The summary: each rank's peak per device, and the first to peak.
    summary = trace["memhookMerge"]
    peaks = {t["rank"]: t["peak_bytes"] for t in summary["tracks"]}
    # weights + scratch; rank 2 also holds two of its kept cache buffers then.
    assert peaks == {0: 10 << 20, 1: 10 << 20, 2: (10 << 20) + 2 * 64 * 1024, 3: 10 << 20}
    first = min(summary["tracks"], key=lambda t: t["peak_at_s"])
    assert summary["first_to_peak"] == first["label"]
    assert f"first to peak: {first['label']}" in proc.stderr
    assert "rank 2 @" in proc.stderr and "cuda:0" in proc.stderr


def test_a_second_host_with_another_clock_comes_out_aligned(ranks: Path,
                                                           tmp_path: Path) -> None:
    src = ranks / "t-0.jsonl"
    other = rewrite(src, tmp_path / "hostb-0.jsonl", {"host": "hostb", "rank": 4},
                    shift_ns=10 * 10**9)
    out = tmp_path / "two-hosts.json"
    proc = memhook("merge", str(src), str(other), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "2 traces from 2 hosts" in proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(names.values()) == [f"rank 0 @ {socket.gethostname()}", "rank 4 @ hostb"]
    stamps = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "i":
            stamps[names[e["pid"]]].append(e["ts"])
    # 10 s apart by the monotonic clocks, the same instants by the anchors.
    assert stamps["rank 4 @ hostb"] == stamps[f"rank 0 @ {socket.gethostname()}"]
    assert len(stamps["rank 4 @ hostb"]) == len(_events(src))


def test_merged_jsonl_and_memviz_hold_every_event(ranks: Path, tmp_path: Path) -> None:
    out = tmp_path / "merged.jsonl"
    proc = memhook("merge", str(ranks), "-f", "jsonl", "-o", str(out))  # a directory
    assert proc.returncode == 0, proc.stderr
    lines = records(out)
    header, rest = lines[0], lines[1:]
    assert header["kind"] == "header" and len(header["merged"]) == RANKS
    assert len(rest) == sum(len(_events(ranks / f"t-{r}.jsonl")) for r in range(RANKS))
    assert [e["wall_ns"] for e in rest] == sorted(e["wall_ns"] for e in rest)
    for rank in range(RANKS):
        mine = [{k: v for k, v in e.items() if k not in ("rank", "host", "track", "wall_ns")}
                for e in rest if e["rank"] == rank]
        assert mine == _events(ranks / f"t-{rank}.jsonl")
    pick = tmp_path / "merged.pickle"
    proc = memhook("merge", str(ranks), "-f", "memviz", "-o", str(pick))
    assert proc.returncode == 0, proc.stderr
    snap = pickle.loads(pick.read_bytes())
    assert len(snap["device_traces"]) == RANKS  # (rank, cuda:0) each
    allocs = sum(1 for t in snap["device_traces"] for e in t if e["action"] == "alloc")
    assert allocs == 7 * RANKS
    (leaked,) = {s["frames"][-1]["filename"].split(" (pid")[0] for s in snap["segments"]}
    assert leaked.startswith("rank 2 @") and len(snap["segments"]) == 3
