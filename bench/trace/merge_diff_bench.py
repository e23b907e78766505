"""What `memhook diff` and `memhook merge` cost on large traces: seconds,
MiB/s and peak RSS, for two sizes of the same synthetic trace (so a flat
RSS shows that nothing grows with the file), beside the floor of reading
the same bytes with one ``json.loads`` a line in a bare Python loop.

The traces are jsonl as `memhook trace -f jsonl --python` writes it: a
header, then alloc/free pairs from SITES Python call sites, one in a
hundred never freed, with LIVE allocations held at any time.

    python bench/trace/merge_diff_bench.py [--events N] [--ranks R]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SITES = 500
LIVE = 1000


def write_trace(path: Path, events: int, rank: int, seed: int) -> None:
    rng = random.Random(seed)
    anchor_mono = 1_000_000_000
    header = {"kind": "header", "format": 1, "memhook": "bench", "host": f"host{rank % 2}",
              "rank": rank, "rank_from": "RANK", "pid": 100 + rank, "command_pid": 200 + rank,
              "clock": {"realtime_ns": 1_700_000_000_000_000_000 + rank * 1000,
                        "monotonic_ns": anchor_mono, "uncertainty_ns": 100}}
    frames = [json.dumps([{"file": f"/work/train/model_{s % 37}.py", "line": 10 + s,
                           "function": f"layer_{s}"},
                          {"file": "/work/train/main.py", "line": 99, "function": "<module>"}])
              for s in range(SITES)]
    caller = ('{"object": "/usr/lib/python3/site-packages/torch/lib/libc10_cuda.so", '
              '"symbol": "alloc", "offset": 64, "address": 140000000000064}')
    live: list[tuple[int, int]] = []
    ts = anchor_mono + 1000
    address = 0x7F0000000000
    written = 0
    with path.open("w") as out:
        out.write(json.dumps(header) + "\n")
        while written < events:
            ts += rng.randrange(100, 10_000)
            if len(live) < LIVE or rng.random() < 0.5:
                site = rng.randrange(SITES)
                size = 512 << (site % 12)
                address += 1 << 21
                out.write(f'{{"kind":"alloc","function":"cuMemAlloc_v2","address":{address},'
                          f'"size":{size},"mem_type":"CUDA","device":{rank % 8},"pid":{100 + rank},'
                          f'"tid":{100 + rank},"ts_ns":{ts},"result":0,"caller":{caller},'
                          f'"python":{frames[site]}}}\n')
                if rng.random() >= 0.01:
                    live.append((address, size))
            else:
                a, size = live.pop(rng.randrange(len(live)))
                out.write(f'{{"kind":"free","function":"cuMemFree_v2","address":{a},"size":{size},'
                          f'"mem_type":"CUDA","device":{rank % 8},"pid":{100 + rank},'
                          f'"tid":{100 + rank},"ts_ns":{ts},"result":0,"caller":{caller}}}\n')
            written += 1


def timed(cmd: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    return elapsed, usage.ru_maxrss / 1024


FLOOR = "import json,sys\nfor p in sys.argv[1:]:\n    for line in open(p,'rb'): json.loads(line)\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=400_000, help="events per trace (large size)")
    ap.add_argument("--ranks", type=int, default=4, help="traces merged")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        for label, n in (("small", args.events // 4), ("large", args.events)):
            paths = [Path(tmp) / f"{label}-{r}.jsonl" for r in range(args.ranks)]
            for r, p in enumerate(paths):
                write_trace(p, n, r, seed=r)
            mib = sum(p.stat().st_size for p in paths) / (1 << 20)
            two = [str(paths[0]), str(paths[1])]
            two_mib = sum(Path(p).stat().st_size for p in two) / (1 << 20)
            floor_s, floor_rss = timed([py, "-c", FLOOR, *two])
            diff_s, diff_rss = timed([py, "-m", "memhook", "diff", *two])
            out = str(Path(tmp) / "merged.json")
            floor_m, _ = timed([py, "-c", FLOOR, *map(str, paths)])
            merge_s, merge_rss = timed([py, "-m", "memhook", "merge", *map(str, paths), "-o", out])
            merge_j, merge_j_rss = timed([py, "-m", "memhook", "merge", *map(str, paths),
                                          "-f", "jsonl", "-o", out])
            print(f"{label}: {n:,} events a trace")
            print(f"  diff of 2 ({two_mib:,.0f} MiB): {diff_s:.2f} s, {two_mib / diff_s:,.1f} MiB/s, "
                  f"peak RSS {diff_rss:.0f} MiB  | floor json.loads: {floor_s:.2f} s, "
                  f"RSS {floor_rss:.0f} MiB")
            print(f"  merge of {args.ranks} ({mib:,.0f} MiB) -f chrome: {merge_s:.2f} s, "
                  f"{mib / merge_s:,.1f} MiB/s, peak RSS {merge_rss:.0f} MiB; -f jsonl: "
                  f"{merge_j:.2f} s, RSS {merge_j_rss:.0f} MiB  | floor: {floor_m:.2f} s")
            for p in paths:
                p.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
