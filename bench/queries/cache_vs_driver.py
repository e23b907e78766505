"""memhook's memory-type queries through the path a user takes, against
asking the CUDA driver through cuda-python, in the same process.

    python3 bench/queries/cache_vs_driver.py                      # GPU if present, else the simulator
    python3 bench/queries/cache_vs_driver.py --driver sim --mode reloc --regions 1000

For each hook mode (bistro, reloc, bistro,reloc), in a fresh process of its
own so that one mode's install cannot colour another's figures:

* ``memhook.install(mode)``, then cuda-python's ``cuMemAlloc(64 KiB)``
  2 x REGIONS times and ``cuMemFree`` of every other one, all recorded by
  the real hooks and ``memhook.flush()``-ed: REGIONS separate regions in the
  cache (allocations side by side would merge into one region; the frees
  keep them apart, as a long-running process's heap is);
* ``memhook.memory_type(p)`` over QUERIES random interior pointers of those
  regions ("dev cold"), over one pointer QUERIES times ("dev hot"), and over
  QUERIES random pointers inside a numpy array ("host");
* ``memhook.lookup(p)`` over the cold pointers, and ``memhook.memory_types``
  of the cold and of the host pointers as one uint64 array each (ns per
  pointer; the cold ones also sorted, which numpy's searchsorted answers
  several times faster);
* the baseline, measured in the same rounds: cuda-python's
  ``cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p)`` over the
  same pointers (for host memory it fails with CUDA_ERROR_INVALID_VALUE,
  which is its answer "not CUDA's");
* an extra column labelled "stub": ``memory_type`` with the hook layer
  swapped for ``set_hook_layer(None, lambda: True)`` (no drain check, no
  coverage check) - not what a user gets.  (Its HOST answers take the
  Python path: the C fast path reads the hooks' own coverage memo, and
  cannot call a stand-in predicate.)

With ``--pieces``, the parts ``memory_type`` is made of are timed alone too
(the drain check, the coverage check and its C call, the cache's own
lookup, the flat copy's bisect, the memo), for the work on the query path.

Each figure is the best of REPEAT rounds (all figures measured once per
round, interleaved), through ``deque(map(f, pointers), maxlen=0)`` so that
the harness adds the least it can, the same for memhook and cuda-python.
Before timing, the child checks every answer it is about to time (device
pointers CUDA, host pointers HOST, from every query), so a bench that runs
is a bench that measured right answers.

Goal (issue 25): memhook >= 3x cuda-python for dev cold, dev hot and host;
host no dearer than dev cold; batch <= 20 ns a pointer.  The table says
"met" or "MISSED"; the exit status is 0 either way (1 only if a child fails).

Needs cuda-python's driver bindings (``pip install cuda-bindings``; the test
extra has them) and memhook built with its native parts.  On the simulator
(``--driver sim``, or no GPU) the driver's own work is the simulator's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

MODES = ("bistro", "reloc", "bistro,reloc")
ALLOC_BYTES = 64 << 10
HOST_BYTES = 64 << 20
RESULT = "RESULT "
SEED = 25


# ---------------------------------------------------------------- the child

PIECES = {
    "noop": "a Python function of one argument (the harness and call cost)",
    "fast_dev_cold": "the C fast path alone (memhook._query._fast_type), dev cold",
    "fast_host": "same, host (with its coverage check)",
    "query_drain": "the drain check before every query (memhook._drain.query_drain)",
    "pending_flag": "its load of the core's pending flag (_pending[0], through cffi)",
    "coverage_complete": "the coverage check on a HOST answer (_coverage.coverage_complete)",
    "coverage_token": "its C call for the token (lib.memhook_coverage_token, through cffi)",
    "is_cuda_host": "a driver query for a host pointer (_driver.is_cuda: without coverage)",
    "cache_dev_cold": "MemtypeCache.memory_type of the process cache, dev cold (no drain)",
    "cache_dev_hot": "same, dev hot",
    "cache_host": "same, host",
    "bisect_cold": "bisect_right over the flat copy's bounds, dev cold",
    "bisect_host": "same, host",
    "memo_get_cold": "the memo's dict.get, dev cold (a miss, mostly)",
    "memo_turn": "next(_memo_turn): the memo's one-in-MEMO_SAMPLE draw",
}


def _pieces(cache: Any, cold: list[int], host: list[int], hot: int, consume: Any) \
        -> dict[str, Any]:
    """What ``memhook.memory_type`` is made of, each timed alone (--pieces)."""
    from bisect import bisect_right
    from itertools import repeat as same
    from itertools import starmap
    from operator import getitem

    from memhook import _coverage, _driver
    from memhook import _drain as drain_mod
    from memhook import _query as query_mod
    from memhook import cache as cache_mod

    def noop(p: int) -> int:
        return p

    n = len(cold)
    nothing = ((),)
    # These are internals, and they change: a piece whose internal is gone
    # is left out (a "-" in the table), not an error.
    query_drain = getattr(drain_mod, "query_drain", None)
    pending = getattr(drain_mod, "_pending", None)
    coverage_complete = getattr(_coverage, "coverage_complete", None)
    token = getattr(_coverage, "_token", None)
    is_cuda = getattr(_driver, "is_cuda", None)
    memo_turn = getattr(cache_mod, "_memo_turn", None)
    fast = getattr(query_mod, "_fast_type", None)
    memory_type = query_mod.memory_type
    # The C path answers once the Python path has handed it a snapshot of
    # the cache's state (FAST_AFTER answers from it): ask that often first.
    again = [cold[0]] * (getattr(query_mod, "FAST_AFTER", 0) + 1)
    flat = getattr(cache, "_flat", None)
    bounds, memo = (flat[0], flat[2]) if isinstance(flat, tuple) and len(flat) == 4 else (None, None)
    candidates: dict[str, Any] = {
        "noop": lambda: consume(map(noop, cold)),
        "fast_dev_cold": fast and (lambda: (consume(map(memory_type, again)),
                                            consume(map(fast, cold)))),
        "fast_host": fast and (lambda: (consume(map(memory_type, again)),
                                        consume(map(fast, host)))),
        "query_drain": query_drain and (lambda: consume(starmap(query_drain, nothing * n))),
        "pending_flag": pending is not None and (
            lambda: consume(map(getitem, same(pending, n), same(0, n)))),
        "coverage_complete": coverage_complete and (
            lambda: consume(starmap(coverage_complete, nothing * n))),
        "coverage_token": token and (lambda: consume(starmap(token, nothing * n))),
        "is_cuda_host": is_cuda and (lambda: consume(map(is_cuda, host))),
        "cache_dev_cold": lambda: consume(map(cache.memory_type, cold)),
        "cache_dev_hot": lambda: consume(map(cache.memory_type, same(hot, n))),
        "cache_host": lambda: consume(map(cache.memory_type, host)),
        "bisect_cold": bounds is not None and (
            lambda: consume(map(bisect_right, same(bounds, n), cold))),
        "bisect_host": bounds is not None and (
            lambda: consume(map(bisect_right, same(bounds, n), host))),
        "memo_get_cold": isinstance(memo, dict) and (lambda: consume(map(memo.get, cold))),
        "memo_turn": memo_turn is not None and (
            lambda: consume(starmap(next, same((memo_turn,), n)))),
    }
    return {key: fn for key, fn in candidates.items() if callable(fn)}


def _child(mode: str, regions: int, queries: int, repeat: int, pieces: bool = False) \
        -> dict[str, Any]:
    """Install, allocate, check, time; the figures as a dict (ns)."""
    import collections
    import gc
    import random
    import time
    from itertools import repeat as same

    import numpy as np

    import memhook
    from memhook import MemoryType
    from memhook import _query as query_mod
    from memhook import cache as cache_mod

    report = memhook.install(mode)  # before cuda-python resolves the driver's entry points
    from cuda.bindings import driver as cu

    def ok(result: Any) -> Any:
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"a CUDA call failed: {err!r}")
        return values[0] if len(values) == 1 else tuple(values)

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    name = ok(cu.cuDeviceGetName(128, dev)).split(b"\0")[0].decode()
    ok(cu.cuCtxSetCurrent(ok(cu.cuDevicePrimaryCtxRetain(dev))))

    made = [int(ok(cu.cuMemAlloc(ALLOC_BYTES))) for _ in range(2 * regions)]
    made.sort()
    keep, drop = made[::2], made[1::2]
    for p in drop:
        ok(cu.cuMemFree(p))
    memhook.flush()
    cache = cache_mod.process_cache()

    rng = random.Random(SEED)
    cold = [keep[rng.randrange(len(keep))] + rng.randrange(ALLOC_BYTES) for _ in range(queries)]
    hot = cold[0]
    host_buf = np.zeros(HOST_BYTES, dtype=np.uint8)
    base = host_buf.ctypes.data
    host = [base + rng.randrange(HOST_BYTES) for _ in range(queries)]
    cold_arr = np.array(cold, dtype=np.uint64)
    sorted_arr = np.sort(cold_arr)  # (numpy's searchsorted is much cheaper over sorted keys)
    host_arr = np.array(host, dtype=np.uint64)

    # Every answer about to be timed is right (the hooks saw every allocation).
    CUDA, HOST = MemoryType.CUDA, MemoryType.HOST
    assert all(memhook.memory_type(p) is CUDA for p in cold), "a device pointer is not CUDA"
    assert all(memhook.memory_type(p) is HOST for p in host), "a host pointer is not HOST"
    assert all(memhook.memory_type(p + ALLOC_BYTES // 2) is HOST for p in drop[:100])
    assert all(memhook.lookup(p).mem_type is CUDA for p in cold[:1000])  # type: ignore[union-attr]
    assert (memhook.memory_types(cold_arr) == CUDA).all()
    assert (memhook.memory_types(host_arr) == HOST).all()
    attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    get_attr = cu.cuPointerGetAttribute
    device_answer = get_attr(attr, hot)
    assert device_answer[0] == cu.CUresult.CUDA_SUCCESS, device_answer
    assert device_answer[1] == cu.CUmemorytype.CU_MEMORYTYPE_DEVICE, device_answer
    assert get_attr(attr, host[0])[0] == cu.CUresult.CUDA_ERROR_INVALID_VALUE

    consume: Any = collections.deque(maxlen=0).extend
    clock = time.perf_counter_ns
    memory_type, lookup, memory_types = memhook.memory_type, memhook.lookup, memhook.memory_types

    def stubbed(fn: Any) -> Any:
        """``fn`` run with the hook layer swapped for a stub that vouches."""
        def run() -> None:
            layer = (query_mod._drain, query_mod._coverage_complete)
            query_mod.set_hook_layer(None, lambda: True)
            try:
                fn()
            finally:
                query_mod.set_hook_layer(*layer)
        return run

    work: dict[str, tuple[Any, int]] = {
        "dev_cold": (lambda: consume(map(memory_type, cold)), queries),
        "dev_hot": (lambda: consume(map(memory_type, same(hot, queries))), queries),
        "host": (lambda: consume(map(memory_type, host)), queries),
        "lookup_cold": (lambda: consume(map(lookup, cold)), queries),
        "batch_dev": (lambda: memory_types(cold_arr), queries),
        "batch_dev_sorted": (lambda: memory_types(sorted_arr), queries),
        "batch_host": (lambda: memory_types(host_arr), queries),
        "cu_dev_cold": (lambda: consume(map(get_attr, same(attr), cold)), queries),
        "cu_dev_hot": (lambda: consume(map(get_attr, same(attr), same(hot, queries))), queries),
        "cu_host": (lambda: consume(map(get_attr, same(attr), host)), queries),
        "stub_dev_cold": (stubbed(lambda: consume(map(memory_type, cold))), queries),
        "stub_dev_hot": (stubbed(lambda: consume(map(memory_type, same(hot, queries)))), queries),
        "stub_host": (stubbed(lambda: consume(map(memory_type, host))), queries),
    }
    flat_copy = cache._flat[0] is not None
    if pieces:
        work.update({f"piece_{k}": (fn, queries)
                     for k, fn in _pieces(cache, cold, host, hot, consume).items()})
    best = dict.fromkeys(work, float("inf"))
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            for key, (fn, count) in work.items():
                t0 = clock()
                fn()
                best[key] = min(best[key], (clock() - t0) / count)
    finally:
        gc.enable()

    regions_in_cache = len(cache)
    status = memhook.status()
    for p in keep:
        ok(cu.cuMemFree(p))
    return {"mode": mode, "device": name,
            "installed_as_asked": report.mode == memhook.HookMode.parse(mode),
            "coverage_complete": bool(getattr(status, "coverage_complete", False)),
            "regions": regions_in_cache, "flat_copy": flat_copy, "queries": queries,
            "repeat": repeat, **best}


# --------------------------------------------------------------- the parent

def _run_mode(mode: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode,
           "--regions", str(args.regions), "--queries", str(args.queries),
           "--repeat", str(args.repeat), *(["--pieces"] if args.pieces else [])]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout,
                          check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"mode {mode}: the child exited {proc.returncode}\n"
                           f"{proc.stdout}{proc.stderr}")
    return json.loads(lines[-1][len(RESULT):])  # type: ignore[no-any-return]


def _ratio(base: float, ours: float) -> str:
    return f"{base / ours:.1f}x" if ours > 0 else "-"


def _print_table(rows: list[dict[str, Any]], driver: str) -> bool:
    first = rows[0]
    print(f"{driver}: {first['device']}; python {sys.version.split()[0]}; "
          f"{first['regions']} regions of {ALLOC_BYTES >> 10} KiB, {first['queries']} "
          f"pointers, best of {first['repeat']} rounds; ns per query (batch: per pointer)")
    head = ("| mode | dev cold | dev hot | host | lookup | batch dev | batch host "
            "| cuda-python dev cold | dev hot | host "
            "| speed-up dev cold | dev hot | host | host/dev | goal |")
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    met_all = True
    for r in rows:
        speed = (r["cu_dev_cold"] / r["dev_cold"], r["cu_dev_hot"] / r["dev_hot"],
                 r["cu_host"] / r["host"])
        host_per_dev = r["host"] / r["dev_cold"]
        met = (min(speed) >= 3.0 and host_per_dev <= 1.0
               and max(r["batch_dev"], r["batch_host"]) <= 20.0)
        met_all &= met
        print(f"| {r['mode']} | {r['dev_cold']:.0f} | {r['dev_hot']:.0f} | {r['host']:.0f} "
              f"| {r['lookup_cold']:.0f} | {r['batch_dev']:.1f} | {r['batch_host']:.1f} "
              f"| {r['cu_dev_cold']:.0f} | {r['cu_dev_hot']:.0f} | {r['cu_host']:.0f} "
              f"| {speed[0]:.1f}x | {speed[1]:.1f}x | {speed[2]:.1f}x | {host_per_dev:.2f} "
              f"| {'met' if met else 'MISSED'} |")
    print("batch dev: the cold pointers in random order; sorted, the same batch costs "
          + ", ".join(f"{r['batch_dev_sorted']:.1f}" for r in rows) + " ns a pointer")
    print()
    print("stub (not the user's path: set_hook_layer(None, lambda: True), no drain or "
          "coverage check):")
    print("| mode | stub dev cold | stub dev hot | stub host | speed-up dev cold | dev hot | host |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['mode']} | {r['stub_dev_cold']:.0f} | {r['stub_dev_hot']:.0f} "
              f"| {r['stub_host']:.0f} | {_ratio(r['cu_dev_cold'], r['stub_dev_cold'])} "
              f"| {_ratio(r['cu_dev_hot'], r['stub_dev_hot'])} "
              f"| {_ratio(r['cu_host'], r['stub_host'])} |")
    print()
    vouched = ", ".join(f"{r['mode']} {'yes' if r['coverage_complete'] else 'NO'}" for r in rows)
    print(f"coverage complete (host answers without asking the driver): {vouched}")
    print("goal (>= 3x cuda-python for dev cold, dev hot and host; host/dev <= 1.0; "
          f"batch <= 20 ns): {'met' if met_all else 'MISSED'}")
    return met_all


def _print_pieces(rows: list[dict[str, Any]]) -> None:
    print()
    print("pieces, each timed alone (ns per call, harness included: see noop; '-': that "
          "internal is gone); flat copy: "
          + ", ".join(f"{r['mode']} {'yes' if r['flat_copy'] else 'no'}" for r in rows))
    print("| piece | " + " | ".join(r["mode"] for r in rows) + " | what |")
    print("| --- |" + " --- |" * len(rows) + " --- |")
    for key, what in PIECES.items():
        values = [r.get(f"piece_{key}") for r in rows]
        cells = " | ".join("-" if v is None else f"{v:.0f}" for v in values)
        print(f"| {key} | {cells} | {what} |")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--driver", choices=("auto", "sim", "real"), default="auto",
                   help="the real driver (needs a GPU), the simulator, or the real one if a "
                        "GPU is present (default)")
    p.add_argument("--mode", action="append", dest="modes", metavar="MODE",
                   help="a hook mode to measure (repeatable; default: each of "
                        f"{', '.join(MODES)})")
    p.add_argument("--regions", type=int, default=10_000, help="regions in the cache")
    p.add_argument("--queries", type=int, default=200_000, help="pointers per figure")
    p.add_argument("--repeat", type=int, default=5, help="rounds; each figure is the best")
    p.add_argument("--timeout", type=float, default=600, help="seconds per mode")
    p.add_argument("--json", action="store_true", help="also print each mode's figures as JSON")
    p.add_argument("--pieces", action="store_true",
                   help="also time the pieces memory_type is made of (drain check, coverage "
                        "check, lookup, memo), each alone")
    p.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("regions", "queries", "repeat"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        figures = _child(args.child, args.regions, args.queries, args.repeat, args.pieces)
        print(RESULT + json.dumps(figures), flush=True)
        return 0
    import memhook.sim
    from memhook.cli.demo import gpu_present

    driver = args.driver
    if driver == "auto":
        driver = "real" if gpu_present() else "sim"
    env = memhook.sim.environ() if driver == "sim" else dict(os.environ)
    env.pop("MEMHOOK_CUDA_MODE", None)  # the mode is install()'s argument
    modes = args.modes or list(MODES)
    try:
        rows = [_run_mode(mode, args, env) for mode in modes]
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"cache_vs_driver: {exc}", file=sys.stderr)
        return 1
    _print_table(rows, "simulator" if driver == "sim" else "GPU")
    if args.pieces:
        _print_pieces(rows)
    if args.json:
        for r in rows:
            print(RESULT + json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
