"""Query latency while other threads allocate (issue 15), beside the same
with no producers, in one run.

    python bench/query_latency.py                 # 1, 4 and 8 producers, reloc
    python bench/query_latency.py --mode bistro --seconds 3 --subscriber

Runs in a child process on the simulated driver (the hooks are installed
there, not in this process).  Producers are Python threads making
cuMemAlloc_v2 + cuMemFree_v2 pairs (64 B) through ctypes, as a Python
program's allocator calls would; with --subscriber a subscriber counts
every event.  The main thread asks ``memhook.memory_type()`` of one fresh
allocation every 20 ms (each query drains what is pending first) and the
bench prints p50, p99 and max of those query times, per producer count,
with 0 producers as the baseline; then the events per second the producers
made and whether every pair arrived (ALLOC and FREE counted per thread).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r'''
import collections, ctypes, json, sys, threading, time
sys.path.insert(0, sys.argv[1])
from hkchild import alloc_free_v2, load_driver, primary_context
import memhook
from memhook import EventKind
mode, seconds, subscriber = sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
threads_list = [int(x) for x in sys.argv[5].split(",")]
memhook.install(mode)
cu = load_driver()
ctx = primary_context(cu)
alloc, free = alloc_free_v2(cu)
cu.cuMemFree_v2
counts = collections.Counter()
lock = threading.Lock()
def count(ev):
    if ev.size == 64:
        with lock:
            counts[ev.kind, ev.tid] += 1
if subscriber:
    memhook.subscribe(count)
out = []
for n in threads_list:
    counts.clear()
    stop = threading.Event()
    made = {}
    def loop():
        cu.cuCtxSetCurrent(ctx)
        tid, k = threading.get_native_id(), 0
        while not stop.is_set():
            p, _ = alloc(64)
            free(p)
            k += 1
        made[tid] = k
    ts = [threading.Thread(target=loop) for _ in range(n)]
    for t in ts:
        t.start()
    times = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        time.sleep(0.02)
        p, _ = alloc(4096)
        t0 = time.perf_counter()
        memhook.memory_type(p)
        times.append(time.perf_counter() - t0)
        free(p)
    stop.set()
    for t in ts:
        t.join()
    memhook.flush()
    ok = all(counts[EventKind.ALLOC, t] == k and counts[EventKind.FREE, t] == k
             for t, k in made.items()) if subscriber else None
    times.sort()
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]
    out.append({"producers": n, "queries": len(times), "p50_ms": pick(0.5) * 1e3,
                "p99_ms": pick(0.99) * 1e3, "max_ms": times[-1] * 1e3,
                "events_per_s": 2 * sum(made.values()) / seconds, "all_arrived": ok})
memhook.uninstall()
print("QL " + json.dumps(out))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="reloc")
    ap.add_argument("--seconds", type=float, default=3.0, help="per producer count")
    ap.add_argument("--threads", default="0,1,4,8")
    ap.add_argument("--subscriber", action="store_true", help="a subscriber counts events")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from memhook_testing import NativeBuild  # noqa: E402

    import memhook.sim
    root = Path(memhook.sim.__file__).resolve().parent.parent.parent
    env = NativeBuild(root, "").env()
    env.pop("MEMHOOK_CUDA_MODE", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "tests" / "hooks" / "scripts"),
                           args.mode, str(args.seconds), "1" if args.subscriber else "0",
                           args.threads], env=env, capture_output=True, text=True, timeout=600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("QL ")), None)
    if proc.returncode != 0 or line is None:
        sys.stderr.write(proc.stdout + proc.stderr)
        return 1
    rows = json.loads(line[3:])
    print(f"query latency, mode {args.mode}, subscriber {'yes' if args.subscriber else 'no'}, "
          f"{args.seconds:g} s per row, load average {os.getloadavg()[0]:.1f}")
    print(f"{'producers':>9} {'queries':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'events/s':>9}  every event arrived")
    for r in rows:
        arrived = "-" if r["all_arrived"] is None else ("yes" if r["all_arrived"] else "NO")
        print(f"{r['producers']:>9} {r['queries']:>7} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
              f"{r['max_ms']:>8.2f} {r['events_per_s']:>9.0f}  {arrived}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
