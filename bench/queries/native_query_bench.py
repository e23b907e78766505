#!/usr/bin/env python3
"""memhook_query from C, beside the driver, on the bundled simulator.

    python bench/queries/native_query_bench.py [REGIONS [BACKLOG]]   # after `pip install -e .`
    python bench/queries/native_query_bench.py --baseline DIR [--repeats 3] [--parts query,batch]

Builds bench/queries/native_query_bench.c against the tree's header and
libmemhook.so and runs it with the core in LD_PRELOAD and the simulator as
the driver (memhook.sim.environ()): no Python in the measured process.  It
prints memhook_query on a hooked device pointer and on malloc'd memory, the
simulator's cuPointerGetAttribute(MEMORY_TYPE) on the same pointers, the
batch (memhook_query_types) ns per pointer over REGIONS (10,000) live
allocations, and how long the first query takes to absorb a backlog of
BACKLOG (1,000,000) events, and a loop of cuMemAlloc, memhook_query of the
new pointer and cuMemFree with REGIONS others live (``churn``: a drain and a
publish a query).  On a GPU host, put the real driver first in
LD_LIBRARY_PATH instead (MEMHOOK_BENCH_REAL_DRIVER=1).

Then, as the baseline of the backlog, Python's path in a child process:
``install()``, the feeder held off while BACKLOG/2 cuMemAlloc/cuMemFree
pairs are made through ctypes, then one ``memhook.flush()`` (Python's drain
applying them to its cache, and the core feeding its own on the way).

``--baseline DIR`` runs the same binary against another core as well (a
build of main: ``python csrc/build_native.py DIR`` puts it in
``DIR/memhook/``; pass that folder), the two in turn for ``--repeats``
rounds, and prints both cores' figures side by side (given twice or more,
each baseline is named by DIR's parent folder); ``--parts`` picks the
parts to run (the Python baseline only without ``--baseline``).

``--callgrind`` counts instructions instead (valgrind's callgrind: a
figure the box's load does not move), for this core and the baseline's if
given: native_query_bench_search.c's loops - the batch's search
(``mh_cache_types``) and a single search over REGIONS regions of a private
cache, and ``memhook_query`` answered from the thread's memo - each per
pointer, the harness's own loop included - and one publish of that map
(``nqs_publish``: what each drain's commit costs under 2,048 regions);
``--loops nqs_publish`` counts only the ones named.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import memhook
import memhook.sim

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


PYTHON_BASELINE = r"""
import ctypes, sys, time
import memhook, memhook._events.feeder as feeder
backlog = int(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
memhook.install()
held = feeder._feed
feeder._feed = lambda drain: None          # no background drain meanwhile
ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
memhook.flush()
alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
for i in range(backlog // 2):
    alloc(ctypes.byref(ptr), ctypes.c_size_t(4096 * (1 + i % 8)))
    free(ptr)
t0 = time.thread_time()
n = memhook.flush()
print(f"python_flush_events {n} python_flush_ms {(time.thread_time() - t0) * 1e3:.2f}")
feeder._feed = held
"""


def run_core(exe: Path, lib: Path, argv: list[str], parts: str | None) -> tuple[int, str]:
    """One run of the bench binary with `lib` preloaded; its output, echoed."""
    env = dict(os.environ) if os.environ.get("MEMHOOK_BENCH_REAL_DRIVER") else \
        memhook.sim.environ()
    env["LD_PRELOAD"] = str(lib)
    if parts:
        env["MEMHOOK_BENCH_PARTS"] = parts
    proc = subprocess.run([str(exe), *argv], env=env, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode, proc.stdout


def figures(text: str) -> dict[str, float]:
    """The `name value` pairs of the bench's output."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        words = line.replace(":", " ").split()
        for name, value in zip(words, words[1:]):
            try:
                out.setdefault(name, float(value))
            except ValueError:
                pass
    return out


KEYS = ("query_device_ns", "query_host_ns", "query_mixed_ns", "query_random_ns", "batch_ns_per_ptr",
        "batch_sorted_ns_per_ptr", "batch_device_ns_per_ptr", "batch_regions_ns_per_ptr", "backlog_absorb_ms",
        "cache_apply_ms", "churn_regions", "churn_ns", "churn_query_ns", "p50_ns", "p99_ns")


def compare(exe: Path, cores: dict[str, Path], argv: list[str], parts: str | None,
            repeats: int) -> int:
    """Each core in turn, `repeats` rounds (A B A B ...), then a table."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in cores}
    for r in range(repeats):
        for name, lib in cores.items():
            print(f"== {name} (round {r + 1}, load average {os.getloadavg()[0]:.2f})", flush=True)
            rc, text = run_core(exe, lib, argv, parts)
            if rc != 0:
                return rc
            runs[name].append(figures(text))
    print(f"\nA/B ({repeats} rounds, interleaved; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}):")
    for key in KEYS:
        if not any(key in f for fs in runs.values() for f in fs):
            continue
        cells = []
        for name, fs in runs.items():
            vals = [f"{f[key]:.2f}" for f in fs if key in f]
            cells.append(f"{name} {' / '.join(vals)}")
        print(f"  {key:24s} " + " | ".join(cells))
    return 0


CALLGRIND_LOOPS = ("nqs_types", "nqs_lookup", "nqs_query", "nqs_publish")


def callgrind(cores: dict[str, Path], regions: str,
              loops: tuple[str, ...] = CALLGRIND_LOOPS) -> int:
    """Instructions a pointer of each of native_query_bench_search.c's
    loops, under callgrind, for each core."""
    if shutil.which("valgrind") is None:
        print("--callgrind needs valgrind", file=sys.stderr)
        return 2
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, lib in cores.items():
            exe = Path(tmp) / f"search_{name}"
            subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra",
                            "-Werror", f"-I{ROOT / 'csrc' / 'include'}",
                            str(HERE / "native_query_bench_search.c"), "-o", str(exe),
                            f"-L{lib.parent}", "-lmemhook", "-ldl", "-lpthread"], check=True)
            env = memhook.sim.environ()
            env.update(LD_PRELOAD=str(lib), MEMHOOK_SIM_DEVICE_MEMORY="256M")
            rows[name] = {}
            for loop in loops:
                out = Path(tmp) / f"cg.{name}.{loop}"
                proc = subprocess.run(["valgrind", "--tool=callgrind",
                                       f"--callgrind-out-file={out}",
                                       f"--toggle-collect={loop}*", str(exe), regions],
                                      env=env, capture_output=True, text=True)
                if proc.returncode != 0:
                    sys.stderr.write(proc.stderr[-2000:])
                    return proc.returncode
                # ("nqs_types pointers 65536 ns_per_ptr 3.54": the divisor;
                # nqs_publish's is its publishes)
                pointers = next(float(line.split()[2]) for line in proc.stdout.splitlines()
                                if line.startswith(loop + " "))
                count = next(float(line.split()[1]) for line in out.read_text().splitlines()
                             if line.startswith(("summary:", "totals:")))
                rows[name][loop] = count / pointers
    print(f"instructions a pointer, nqs_publish's a publish (callgrind; {regions} regions):")
    for loop in loops:
        print(f"  {loop:12s} " + " | ".join(f"{n} {r[loop]:.1f}" for n, r in rows.items()))
    return 0


def baselines(dirs: list[Path]) -> dict[str, Path]:
    """The baseline cores by name: "baseline" alone, else each folder's
    parent's name (csrc/build_native.py OUT puts the library in OUT/memhook)."""
    if len(dirs) == 1:
        return {"baseline": dirs[0].resolve() / "libmemhook.so"}
    names = [d.resolve().parent.name for d in dirs]
    if len(set(names)) != len(names) or "this" in names:
        raise SystemExit(f"--baseline: the folders' parents must be named apart, and not "
                         f"'this': {', '.join(names)}")
    return {name: d.resolve() / "libmemhook.so" for name, d in zip(names, dirs)}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("regions", nargs="?", default="10000")
    ap.add_argument("backlog", nargs="?", default="1000000")
    ap.add_argument("--core", type=Path, help="folder with the libmemhook.so to measure "
                    "(default: the package's)")
    ap.add_argument("--baseline", type=Path, action="append", help="folder with another "
                    "libmemhook.so (a "
                    "build of main: csrc/build_native.py OUT puts it in OUT/memhook/): "
                    "both cores run in turn, --repeats rounds, then a table of both; given "
                    "twice or more, each is named by its folder's parent")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", help="comma-separated, of query,batch,backlog,churn,contention,"
                    "python (default: all)")
    ap.add_argument("--callgrind", action="store_true", help="count instructions of the "
                    "lookups under callgrind instead of timing (this core and --baseline's)")
    ap.add_argument("--loops", default=",".join(CALLGRIND_LOOPS),
                    help="with --callgrind: comma-separated, of " + ", ".join(CALLGRIND_LOOPS))
    args = ap.parse_args(argv)
    lib = args.core.resolve() / "libmemhook.so" if args.core else Path(memhook.library_path())
    if args.callgrind:
        cores = {"this": lib}
        if args.baseline:
            cores = {**baselines(args.baseline), "this": lib}
        loops = tuple(args.loops.split(","))
        unknown = sorted(set(loops) - set(CALLGRIND_LOOPS))
        if unknown:
            ap.error(f"--loops: no loop {', '.join(unknown)}; valid: {', '.join(CALLGRIND_LOOPS)}")
        return callgrind(cores, args.regions, loops)
    bench_argv = [args.regions, args.backlog]
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "native_query_bench"
        subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        f"-I{ROOT / 'csrc' / 'include'}", str(HERE / "native_query_bench.c"),
                        "-o", str(exe), f"-L{lib.parent}", "-lmemhook", "-ldl", "-lpthread"],
                       check=True)
        if args.baseline:
            cores = {**baselines(args.baseline), "this": lib}
            return compare(exe, cores, bench_argv, args.parts, args.repeats)
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        rc, _ = run_core(exe, lib, bench_argv, args.parts)
        if rc != 0 or (args.parts and "python" not in args.parts.split(",")):
            return rc
        env = dict(os.environ) if os.environ.get("MEMHOOK_BENCH_REAL_DRIVER") else \
            memhook.sim.environ()
        sys.stdout.flush()
        return subprocess.run([sys.executable, "-c", PYTHON_BASELINE, args.backlog],
                              env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
