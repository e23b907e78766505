"""Instructions a Python query costs, under valgrind's callgrind: a figure
the box's load does not move (timings on a shared 2-core box do).

    python3 bench/queries/query_callgrind.py                       # this build
    python3 bench/queries/query_callgrind.py --baseline-python PY  # and another's, beside it

For each case, a child on the simulator installs the hooks (bistro), makes
REGIONS separate 4 KiB allocations through cuda-python (2 x REGIONS, every
other one freed) and flushes, then runs the case's loop over QUERIES
arguments once to warm it (a type's first object teaches C), and once more
inside a ctypes call (libc's qsort calling back into Python): callgrind
collects only inside libffi's ``ffi_call`` (``--toggle-collect``), so the
count is that loop's, harness included (``deque(map(f, args))``), divided
by QUERIES.  Cases: ``memory_type`` of random interior pointers (cold) and
of one pointer (hot), ``lookup`` cold, a numpy array, an object with a
literal ``__cuda_array_interface__`` dict, one whose dict is made as
CuPy makes it, and an array standing for CuPy's ndarray (its attributes,
and that interface: ``cupy_array``), each beside the cost of reading that
interface alone, and
``memory_types`` of the cold pointers (a pointer).

``--baseline-python PY`` runs every case again with that interpreter (a
script that runs python with another build first on PYTHONPATH will do:
valgrind follows it into python).  Needs valgrind and cuda-python.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CASES = ("cold", "hot", "lookup", "numpy", "cai", "cai_read", "cupy", "cupy_read", "cupy_array",
         "cupy_array_read", "types")
ALLOC = 4096


def _child(case: str, regions: int, queries: int) -> None:
    import collections
    import ctypes
    import random

    import numpy as np

    import memhook
    from memhook import MemoryType

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cache_vs_driver import _CudaArray, _CupyArray, _CupyLikeArray, cuda_ok, cupy_stand_in

    memhook.install("bistro")
    from cuda.bindings import driver as cu

    ok = functools.partial(cuda_ok, cu)

    ok(cu.cuInit(0))
    ok(cu.cuCtxSetCurrent(ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))))
    made = sorted(int(ok(cu.cuMemAlloc(ALLOC))) for _ in range(2 * regions))
    keep = made[::2]
    for p in made[1::2]:
        ok(cu.cuMemFree(p))
    memhook.flush()
    rng = random.Random(25)
    cold = [keep[rng.randrange(len(keep))] + rng.randrange(ALLOC) for _ in range(queries)]
    cycle = (lambda objs: (objs * (queries // len(objs) + 1))[:queries])
    cai = cycle([_CudaArray(p, ALLOC // 4) for p in keep[:64]])
    cupy = cycle([_CupyLikeArray(p, ALLOC // 4) for p in keep[:64]])
    assert cupy_stand_in(), "a real CuPy is imported"
    cupy_arrays = cycle([_CupyArray(p, ALLOC // 4) for p in keep[:64]])
    arrays = cycle([np.zeros(256 + i, dtype=np.float32) for i in range(64)])
    cold_arr = np.array(cold, dtype=np.uint64)
    mt, consume = memhook.memory_type, collections.deque(maxlen=0).extend
    assert all(mt(o) is MemoryType.CUDA
               for o in cold[:100] + cai[:100] + cupy[:100] + cupy_arrays[:100])
    work = {
        "cold": lambda: consume(map(mt, cold)),
        "hot": lambda: consume(map(mt, [cold[0]] * queries)),
        "lookup": lambda: consume(map(memhook.lookup, cold)),
        "numpy": lambda: consume(map(mt, arrays)),
        "cai": lambda: consume(map(mt, cai)),
        "cai_read": lambda: consume(o.__cuda_array_interface__ for o in cai),
        "cupy": lambda: consume(map(mt, cupy)),
        "cupy_read": lambda: consume(o.__cuda_array_interface__ for o in cupy),
        "cupy_array": lambda: consume(map(mt, cupy_arrays)),
        "cupy_array_read": lambda: consume(o.__cuda_array_interface__ for o in cupy_arrays),
        "types": lambda: memhook.memory_types(cold_arr),
    }
    fn = work[case]
    fn()
    # The counted window: a ctypes call whose callback runs the loop once.
    calls = [0]

    def once(a: Any, b: Any) -> int:
        if not calls[0]:
            calls[0] = 1
            fn()
        return 0

    compare = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(once)
    pair = (ctypes.c_int * 2)(1, 2)
    ctypes.CDLL(None).qsort(pair, 2, ctypes.sizeof(ctypes.c_int), compare)
    assert calls[0] == 1


def _count(python: str, case: str, regions: int, queries: int, tmp: str) -> float | None:
    import memhook.sim

    env = memhook.sim.environ()
    env.update(PYTHONHASHSEED="0", MEMHOOK_SIM_DEVICE_MEMORY="256M")
    out = os.path.join(tmp, f"cg.{case}")
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}.%p",
         "--toggle-collect=ffi_call", python, os.path.abspath(__file__), "--child", case,
         "--regions", str(regions), "--queries", str(queries)],
        env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    total = 0
    for f in Path(tmp).glob(f"cg.{case}.*"):
        for line in f.read_text().splitlines():
            if line.startswith("totals:") or line.startswith("summary:"):
                total = max(total, int(line.split()[1]))
                break
        f.unlink()
    return total / queries


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--regions", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=20_000)
    p.add_argument("--case", action="append", choices=CASES, help="a case (default: all)")
    p.add_argument("--baseline-python", metavar="PY")
    p.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, args.regions, args.queries)
        return 0
    pythons = [sys.executable] + ([args.baseline_python] if args.baseline_python else [])
    print(f"instructions a query (memory_types: a pointer), {args.regions} regions, "
          f"{args.queries} queries; columns: " + ", ".join(pythons))
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.case or CASES:
            cells = [_count(py, case, args.regions, args.queries, tmp) for py in pythons]
            print(f"{case:10s} " + " ".join("-" if c is None else f"{c:10.1f}" for c in cells),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
