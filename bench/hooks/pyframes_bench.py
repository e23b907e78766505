#!/usr/bin/env python3
"""What ``memhook trace --python`` adds to an allocation (issue 28's goal:
<= 3 us with --python; nothing measurable without it), beside the same
trace without --python, in one run, through the path a user takes:
``memhook trace --sim [--python=D] -- python bench/hooks/pyframes_loop.py N DEPTH``
(ctypes allocations on the simulator, DEPTH Python frames deep, the
program timing its own loop in its thread's CPU time), the two alternated
ROUNDS times; the figure is the median of the rounds' differences.

    python bench/hooks/pyframes_bench.py                 # depth 10 and 40, 5 rounds
    python bench/hooks/pyframes_bench.py --quick
    python bench/hooks/pyframes_bench.py --python /usr/bin/python3.12

--walk times the capture alone instead (bench/hooks/pyframes_walk_bench.c: the
capture's C sources built into a library the traced interpreter loads and
calls through ctypes, DEPTH frames deep, beside an empty call's loop): the
per-frame cost without the trace's page faults and collector.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "csrc"
WALK_SOURCES = ["trace/pyframes.c", "trace/pycode.c", "trace/pyframes_abi.c", "core/log.c",
                "core/mh_options.c", "core/mh_objects.c"]

# Run in the traced interpreter: the capture DEPTH frames deep, GIL held
# (PyDLL) and released (CDLL), beside the empty loop.
WALK_DRIVER = r"""
import ctypes, sys
lib_path, depths, n = sys.argv[1], [int(d) for d in sys.argv[2].split(",")], int(sys.argv[3])
libs = {"held": ctypes.PyDLL(lib_path), "released": ctypes.CDLL(lib_path)}
for lib in libs.values():
    lib.pyframes_walk_bench.restype = ctypes.c_double
    lib.pyframes_walk_bench.argtypes = [ctypes.c_uint, ctypes.c_long, ctypes.POINTER(ctypes.c_uint)]
    lib.pyframes_empty_bench.restype = ctypes.c_double
    lib.pyframes_empty_bench.argtypes = [ctypes.c_long]
def nest(depth, call):  # DEPTH distinct code objects above the call
    space, callee = {"call": call}, "call"
    for level in range(depth - 1):
        exec(compile(f"def level_{level}():\n    return {callee}()\n", f"<level {level}>",
                     "exec"), space)
        callee = f"level_{level}"
    return space[callee]
frames = ctypes.c_uint()
for depth in depths:
    for gil, lib in libs.items():
        run = nest(depth, lambda: lib.pyframes_walk_bench(128, n, ctypes.byref(frames)))
        best = min(run() for _ in range(5))
        empty = min(lib.pyframes_empty_bench(n) for _ in range(5))
        print(f"{depth} {gil} {frames.value} {best:.1f} {empty:.1f}", flush=True)
"""


def walk(python: str, depths: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "pyframes_walk_bench.so"
        subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        "-fPIC", "-shared", "-fvisibility=hidden",
                        *[f"-I{CSRC / d}" for d in ("include", "core", "trace")],
                        str(HERE / "pyframes_walk_bench.c"),
                        *[str(CSRC / s) for s in WALK_SOURCES], "-o", str(lib), "-ldl",
                        "-lpthread"], check=True)
        out = subprocess.run([python, "-c", WALK_DRIVER, str(lib), depths, str(n)],
                             capture_output=True, text=True, check=True).stdout
    print(f"the capture alone, {n} calls a round (best of 5); ns per call")
    print(f"{'depth':>6} {'GIL':>9} {'frames':>7} {'capture':>9} {'empty':>7} {'per frame':>10}")
    for line in out.splitlines():
        depth, gil, frames, ns, empty = line.split()
        per = (float(ns) - float(empty)) / max(int(frames), 1)
        print(f"{depth:>6} {gil:>9} {frames:>7} {float(ns):>9.0f} {float(empty):>7.1f} {per:>10.1f}")


def run(python: str, n: int, depth: int, frames: int | None) -> float:
    opt = [f"--python={frames}"] if frames else []
    cmd = [sys.executable, "-m", "memhook", "trace", "--sim", *opt, "-f", "jsonl", "-o",
           "/dev/null", "--", python, str(HERE / "pyframes_loop.py"), str(n), str(depth)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
    return float(re.search(r"ns_per_alloc ([\d.]+)", proc.stdout + proc.stderr).group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--python", default=sys.executable, help="the traced interpreter")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depths", default="10,40", help="Python frames of the loop")
    ap.add_argument("--frames", type=int, default=32, help="--python=N (default 32)")
    ap.add_argument("--walk", action="store_true", help="time the capture alone")
    args = ap.parse_args()
    if args.walk:
        walk(args.python, args.depths, 20000 if args.quick else 200000)
        return 0
    n = 2000 if args.quick else 20000
    rounds = 2 if args.quick else args.rounds
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    print(f"memhook trace --sim, {n} ctypes allocations a round, Python {version}, "
          f"--python={args.frames}; ns of the allocating thread's CPU per allocation")
    print(f"{'depth':>6} {'without':>10} {'with':>10} {'added':>10}   (median of {rounds} rounds)")
    for depth in (int(d) for d in args.depths.split(",")):
        base, with_py, added = [], [], []
        for _ in range(rounds):
            b = run(args.python, n, depth, None)
            w = run(args.python, n, depth, args.frames)
            base.append(b)
            with_py.append(w)
            added.append(w - b)
        print(f"{depth:>6} {statistics.median(base):>10.0f} {statistics.median(with_py):>10.0f} "
              f"{statistics.median(added):>+10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
