"""Query latency while other threads allocate (issues 15 and 23), each case
beside the same with no hooks installed, in one run.

    python bench/queries/query_latency.py                  # Python 0/1/4/8, 4+4 spinning, native 2/4
    python bench/queries/query_latency.py --mode bistro --seconds 3 --subscriber
    python bench/queries/query_latency.py --cases native:2,native:4

Runs in a child process on the simulated driver (the hooks are installed
there, not in this process).  Producers, per case:

* ``python:N`` - N Python threads making cuMemAlloc_v2 + cuMemFree_v2 pairs
  (64 B) through ctypes, as a Python program's allocator calls would;
* ``pyspin:N`` - the same, plus N Python threads spinning (all of them want
  the GIL: what a query or a cycle waits for there is its turn at it);
* ``native:N`` - N C threads making the same pairs in tight loops, checked
  (tests/hooks/fixtures/churn.c, built here), plus N C threads spinning:
  events ten times faster than Python could apply them one at a time.

With --subscriber a subscriber counts every event.  The main thread asks
``memhook.memory_type()`` of one fresh allocation every 20 ms (each query
drains what is pending first, or, when another thread is applying, answers
without waiting for it) and the bench prints p50, p99 and max of those query
times; then it times five ``uninstall(); install()`` cycles.  The baseline
of each case is the same loop with no hooks installed (every query then asks
the driver), same producers, same run; ``python:0`` is no producers at all.
Also printed: the events per second the producers made, what was still
pending in the core's queue at the end (a drain that keeps up leaves a few
thousand at most), and whether every pair arrived (--subscriber).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import collections, ctypes, json, statistics, sys, threading, time
sys.path.insert(0, sys.argv[1])
from hkchild import alloc_free_v2, load_driver, primary_context
import memhook
from memhook import EventKind
mode, seconds, subscriber = sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
cases = [(c.split(":")[0], int(c.split(":")[1])) for c in sys.argv[5].split(",")]
churn = ctypes.CDLL(sys.argv[6]) if sys.argv[6] else None
if churn is not None:
    churn.hk_churn_calls.restype = ctypes.c_long
    churn.hk_churn_stop.restype = ctypes.c_long
memhook.install(mode)
cu = load_driver()
ctx = primary_context(cu)
alloc, free = alloc_free_v2(cu)
counts = collections.Counter()
lock = threading.Lock()
def count(ev):
    if ev.size == 64:
        with lock:
            counts[ev.kind, ev.tid] += 1
if subscriber:
    memhook.subscribe(count)

def pick(times, q):
    return times[min(len(times) - 1, int(q * len(times)))]

def run_case(kind, n, hooked):
    if hooked:
        memhook.install(mode)
    else:
        memhook.uninstall()
        memhook.flush()
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
    def spin():
        x = 0
        while not stop.is_set():
            x += 1
    ts = [threading.Thread(target=loop) for _ in range(n)] if kind != "native" else []
    ts += [threading.Thread(target=spin) for _ in range(n)] if kind == "pyspin" else []
    for t in ts:
        t.start()
    if kind == "native":
        assert churn.hk_churn_start(n, n, 0, 0) == 0
    calls0 = churn.hk_churn_calls() if kind == "native" else 0
    times = []
    t_begin = time.perf_counter()
    t_end = t_begin + seconds
    while time.perf_counter() < t_end:
        time.sleep(0.02)
        p, _ = alloc(4096)
        t0 = time.perf_counter()
        memhook.memory_type(p)
        times.append(time.perf_counter() - t0)
        free(p)
    elapsed = time.perf_counter() - t_begin
    pending = memhook.status().queue.pending
    cycles = []
    if hooked:
        for _ in range(5):
            t0 = time.perf_counter()
            memhook.uninstall()
            memhook.install(mode)
            cycles.append(time.perf_counter() - t0)
    stop.set()
    for t in ts:
        t.join()
    pairs = 0
    if kind == "native":
        pairs = churn.hk_churn_calls() - calls0
        errors = churn.hk_churn_stop()
        assert errors == 0, errors
    else:
        pairs = sum(made.values())
    memhook.flush()
    ok = None
    if subscriber and hooked and kind != "native":
        ok = all(counts[EventKind.ALLOC, t] == k and counts[EventKind.FREE, t] == k
                 for t, k in made.items())
    times.sort()
    return {"case": f"{kind}:{n}", "hooks": mode if hooked else "none", "queries": len(times),
            "p50_ms": pick(times, 0.5) * 1e3, "p99_ms": pick(times, 0.99) * 1e3,
            "max_ms": times[-1] * 1e3,
            "cycle_max_ms": max(cycles) * 1e3 if cycles else None,
            "events_per_s": 2 * pairs / elapsed, "pending": pending if hooked else None,
            "all_arrived": ok}

out = []
for kind, n in cases:
    out.append(run_case(kind, n, True))
    out.append(run_case(kind, n, False))
memhook.uninstall()
print("QL " + json.dumps(out))
'''


def build_churn(tmp: Path) -> Path:
    """tests/hooks/fixtures/churn.c against the simulator's libcuda."""
    import memhook.sim

    sim = memhook.sim.library_dir()
    out = tmp / "libhk_churn.so"
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC",
                    str(ROOT / "tests" / "hooks" / "fixtures" / "churn.c"), "-o", str(out),
                    f"-L{sim}", "-l:libcuda.so.1", f"-Wl,-rpath,{sim}", "-lpthread"], check=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="bistro,reloc")
    ap.add_argument("--seconds", type=float, default=3.0, help="per case")
    ap.add_argument("--cases",
                    default="python:0,python:1,python:4,python:8,pyspin:4,native:2,native:4",
                    help="comma list of python:N, pyspin:N and native:N")
    ap.add_argument("--threads", help="(older spelling) Python producer counts, e.g. 0,1,4,8")
    ap.add_argument("--subscriber", action="store_true", help="a subscriber counts events")
    args = ap.parse_args()
    cases = args.cases
    if args.threads:
        cases = ",".join(f"python:{n}" for n in args.threads.split(","))
    for c in cases.split(","):
        kind, _, n = c.partition(":")
        if kind not in ("python", "pyspin", "native") or not n.isdigit():
            raise SystemExit(f"bad case {c!r}: python:N, pyspin:N or native:N")
    sys.path.insert(0, str(ROOT / "tests"))
    from memhook_testing import NativeBuild  # noqa: E402

    import memhook.sim
    root = Path(memhook.sim.__file__).resolve().parent.parent.parent
    env = NativeBuild(root, "").env()
    env.pop("MEMHOOK_CUDA_MODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        churn = str(build_churn(Path(tmp))) if "native:" in cases else ""
        proc = subprocess.run([sys.executable, "-c", CHILD,
                               str(ROOT / "tests" / "hooks" / "scripts"), args.mode,
                               str(args.seconds), "1" if args.subscriber else "0", cases, churn],
                              env=env, capture_output=True, text=True, timeout=1800)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("QL ")), None)
    if proc.returncode != 0 or line is None:
        sys.stderr.write(proc.stdout + proc.stderr)
        return 1
    rows = json.loads(line[3:])
    print(f"query latency, mode {args.mode}, subscriber {'yes' if args.subscriber else 'no'}, "
          f"{args.seconds:g} s per row, load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':>10} {'hooks':>13} {'queries':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'cycle max':>9} {'events/s':>9} {'pending':>8}  every event arrived")
    for r in rows:
        arrived = "-" if r["all_arrived"] is None else ("yes" if r["all_arrived"] else "NO")
        cyc = "-" if r["cycle_max_ms"] is None else f"{r['cycle_max_ms']:.1f}"
        pend = "-" if r["pending"] is None else str(r["pending"])
        print(f"{r['case']:>10} {r['hooks']:>13} {r['queries']:>7} {r['p50_ms']:>8.2f} "
              f"{r['p99_ms']:>8.2f} {r['max_ms']:>8.2f} {cyc:>9} {r['events_per_s']:>9.0f} "
              f"{pend:>8}  {arrived}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
