"""Install time of the whole hook table (issue 13): install(MODE) then
uninstall(), CYCLES times, idle and with N busy threads (spinners of
tests/hooks/fixtures/churn.c, plus 2 threads calling cuMemAlloc_v2/
cuMemFree_v2 when --callers), printing the median and the worst install,
beside install("reloc") measured the same way in the same run.

    python bench/install/install_table_bench.py [--mode bistro] [--cycles 50]
                                                [--busy 0,4,16] [--callers]

Runs against whatever libcuda.so.1 the loader finds: the simulator here
(put memhook/sim/lib first on LD_LIBRARY_PATH), the real driver on a GPU
host.  Goals: median <= 5 ms on the H200; worst <= 50 ms under
oversubscription on the 2-core box.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import memhook

ROOT = Path(__file__).resolve().parents[2]


def build_churn(out: Path) -> ctypes.CDLL:
    lib = out / "libbench_churn.so"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(ROOT / "tests/hooks/fixtures/churn.c"),
                    "-o", str(lib), "-lpthread"], check=True)
    # cu* resolve against the driver the loader finds, loaded global first.
    ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    churn = ctypes.CDLL(str(lib))
    churn.hk_churn_stop.restype = ctypes.c_long
    return churn


def measure(mode: str, cycles: int) -> list[float]:
    times = []
    for _ in range(cycles):
        t0 = time.perf_counter()
        memhook.install(mode)
        times.append((time.perf_counter() - t0) * 1000)
        memhook.uninstall()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="bistro")
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--busy", default="0,4,16")
    ap.add_argument("--callers", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        churn = build_churn(Path(tmp))
        print(f"{'busy':>5} {'mode':>14} {'median ms':>10} {'worst ms':>9}   "
              f"{'reloc median':>12} {'reloc worst':>11}")
        for busy in (int(b) for b in args.busy.split(",")):
            callers = 2 if args.callers else 0
            if busy or callers:
                if churn.hk_churn_start(callers, busy, 0, 0) != 0:
                    raise SystemExit("cannot start the busy threads (cuInit failed?)")
            try:
                memhook.install(args.mode)  # warm: islands, trampolines, handlers
                memhook.uninstall()
                t = measure(args.mode, args.cycles)
                r = measure("reloc", args.cycles)
            finally:
                if busy or callers:
                    errors = churn.hk_churn_stop()
                    if errors:
                        print(f"  {errors} calls went wrong")
            print(f"{busy:>5} {args.mode:>14} {statistics.median(t):>10.2f} {max(t):>9.2f}   "
                  f"{statistics.median(r):>12.2f} {max(r):>11.2f}", flush=True)


if __name__ == "__main__":
    main()
