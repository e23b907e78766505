"""Benchmarks of memhook's memory-type cache, each figure beside the baseline
measured in the same run.

    python bench/cache_bench.py            # everything (~1-2 minutes)
    python bench/cache_bench.py --quick    # fewer repetitions, no 1M sizes

1. Single ``MemtypeCache.memory_type(ptr)`` at 10, 10k and 1M regions, cold
   (random pointers, never repeated in a row) and hot (a small set of pointers
   asked about again and again), against the Python floor: the same loop
   calling ``bisect.bisect_right`` on a plain list of the region starts.
   Goals: cold <= 3x the floor, hot <= 1.5x.  Both loops are identical
   (``for p in ptrs: f(p)``), so each figure includes the same loop overhead;
   the empty-loop cost is printed too.
2. Batch ``memory_types`` over 1M random pointers at 10k regions (goal >= 20M
   pointers/s), beside numpy's bare ``searchsorted`` of the same pointers.
3. update+remove at 10k regions (goal <= 3 us per event): alternately allocate
   a fresh region and free an existing one, beside a plain
   ``SortedList.add``/``remove`` of the same keys.
4. Memory per region at 1M regions (goal <= 300 bytes), by tracemalloc, with
   and without the batch snapshot, and by a ``sys.getsizeof`` walk.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc
from bisect import bisect_right
from pathlib import Path

import numpy as np


def _import_cache():  # type: ignore[no-untyped-def]
    """memhook.cache, also from a source tree whose native parts are not built."""
    try:
        from memhook import cache
        return cache
    except ImportError:
        import types
        root = Path(__file__).resolve().parent.parent
        pkg = types.ModuleType("memhook")
        pkg.__path__ = [str(root / "memhook")]  # type: ignore[attr-defined]
        sys.modules["memhook"] = pkg
        from memhook import cache
        return cache


cache_mod = _import_cache()
MemtypeCache = cache_mod.MemtypeCache
from memhook._types import MemoryType

TYPES = [MemoryType.CUDA, MemoryType.CUDA_MANAGED, MemoryType.CUDA_HOST]
BASE = 0x7F00_0000_0000


def build_layout(n: int, seed: int = 1) -> list[tuple[int, int, MemoryType, int]]:
    """n disjoint regions with gaps, sizes 4 KiB-2 MiB, mixed types/devices."""
    rnd = random.Random(seed)
    out = []
    addr = BASE
    for i in range(n):
        addr += rnd.randrange(1, 64) * 4096  # a gap
        size = rnd.randrange(1, 512) * 4096
        out.append((addr, size, TYPES[i % 3], i % 2))
        addr += size
    return out


def filled_cache(layout):  # type: ignore[no-untyped-def]
    c = MemtypeCache()
    for start, size, t, dev in layout:
        c.update(start, size, t, dev)
    return c


def best_per_call(fn, ptrs, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """Best-of-repeat seconds per call of fn over ptrs (same loop for all)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for p in ptrs:
            fn(p)
        best = min(best, time.perf_counter() - t0)
    return best / len(ptrs)


def _noop(p: int) -> None:
    return None


def bench_single(sizes: list[int], repeat: int) -> list[tuple]:  # type: ignore[type-arg]
    rows = []
    print("\n== single memory_type(ptr): cache vs the bisect floor (ns per call) ==")
    print(f"{'regions':>9} {'case':>5} {'floor':>8} {'memhook':>8} {'ratio':>6} {'goal':>6}  (empty loop+call: see below)")
    for n in sizes:
        layout = build_layout(n)
        c = filled_cache(layout)
        starts = [s for s, _, _, _ in layout]
        lo, hi = layout[0][0], layout[-1][0] + layout[-1][1]
        rnd = random.Random(n)
        # cold: 200k distinct pointers over the whole span (inside regions and in gaps)
        cold = [rnd.randrange(lo - 4096, hi + 4096) for _ in range(200_000)]
        # hot: 64 pointers (the buffers a transport keeps sending), asked 3,000 times each
        hot_set = [rnd.randrange(lo, hi) for _ in range(64)]
        hot = hot_set * 3000
        rnd.shuffle(hot)
        mt = c.memory_type

        def floor(p: int, _b=bisect_right, _s=starts) -> int:
            return _b(_s, p)

        for case, ptrs, goal in (("cold", cold, 3.0), ("hot", hot, 1.5)):
            c._hot = {}  # start each case without memos (the hot case fills them at once)
            f = best_per_call(lambda p, _b=bisect_right, _s=starts: _b(_s, p), ptrs, repeat)
            m = best_per_call(mt, ptrs, repeat)
            ratio = m / f
            rows.append((n, case, f * 1e9, m * 1e9, ratio, goal))
            print(f"{n:>9,} {case:>5} {f * 1e9:>8.0f} {m * 1e9:>8.0f} {ratio:>6.2f} {goal:>5.1f}x"
                  f"  {'ok' if ratio <= goal else 'MISSED'}")
        del floor
    empty = best_per_call(_noop, list(range(200_000)), repeat)
    print(f"(the loop plus a call of an empty Python function costs {empty * 1e9:.0f} ns)")
    return rows


def bench_batch(repeat: int) -> tuple[float, float]:
    print("\n== batch memory_types at 10k regions (1M random pointers) ==")
    layout = build_layout(10_000)
    c = filled_cache(layout)
    lo, hi = layout[0][0], layout[-1][0] + layout[-1][1]
    ptrs = np.random.default_rng(0).integers(lo - 4096, hi + 4096, size=1_000_000, dtype=np.uint64)
    c.memory_types(ptrs[:10])  # build the snapshot once (it is rebuilt only on change)
    ends = np.array(sorted(s + z for s, z, _, _ in layout), dtype=np.uint64)
    best_m = best_s = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        c.memory_types(ptrs)
        best_m = min(best_m, time.perf_counter() - t0)
        t0 = time.perf_counter()
        ends.searchsorted(ptrs, side="right")
        best_s = min(best_s, time.perf_counter() - t0)
    rate_m, rate_s = len(ptrs) / best_m / 1e6, len(ptrs) / best_s / 1e6
    print(f"memhook memory_types: {rate_m:.1f} M pointers/s (goal >= 20); "
          f"bare np.searchsorted of the same pointers: {rate_s:.1f} M/s  "
          f"{'ok' if rate_m >= 20 else 'MISSED'}")
    t0 = time.perf_counter()
    c.update(lo, 4096, MemoryType.CUDA, 0)
    c.memory_types(ptrs[:10])
    print(f"(snapshot rebuild after a change, 10k regions: {(time.perf_counter() - t0) * 1e3:.2f} ms)")
    return rate_m, rate_s


def bench_events(repeat: int) -> tuple[float, float]:
    from sortedcontainers import SortedList
    print("\n== update+remove at 10k regions ==")
    layout = build_layout(20_000, seed=7)
    live, fresh = layout[::2], layout[1::2]  # 10k in the cache, 10k to allocate
    best_m = best_b = float("inf")
    events = 2 * len(fresh)
    for _ in range(repeat):
        c = filled_cache(live)
        order = list(range(len(fresh)))
        random.Random(3).shuffle(order)
        upd, rem = c.update, c.remove
        t0 = time.perf_counter()
        for i in order:  # allocate one, free one: the cache stays at ~10k regions
            s, z, t, d = fresh[i]
            upd(s, z, t, d)
            s, z, _, _ = live[i]
            rem(s, z)
        best_m = min(best_m, time.perf_counter() - t0)
        sl = SortedList(s for s, _, _, _ in live)
        t0 = time.perf_counter()
        for i in order:
            sl.add(fresh[i][0])
            sl.remove(live[i][0])
        best_b = min(best_b, time.perf_counter() - t0)
    per_m, per_b = best_m / events * 1e6, best_b / events * 1e6
    print(f"memhook update/remove: {per_m:.2f} us per event (goal <= 3); "
          f"bare SortedList.add/remove of the starts: {per_b:.2f} us  "
          f"{'ok' if per_m <= 3 else 'MISSED'}")
    return per_m, per_b


def bench_memory(n: int) -> None:
    print(f"\n== memory per region at {n:,} regions (goal <= 300 bytes) ==")
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    # The layout is made after tracing starts and dropped before measuring, so
    # the ints the cache keeps (as the hooks' events would hand them over) count.
    layout = build_layout(n)
    c = MemtypeCache()
    for start, size, t, dev in layout:
        c.update(start, size, t, dev)
    del layout, start, size, t, dev
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    c.memory_types(np.array([BASE], dtype=np.uint64))  # builds the batch snapshot
    gc.collect()
    with_snap, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"tracemalloc: {(after - base) / n:.0f} bytes/region (regions only), "
          f"{(with_snap - base) / n:.0f} bytes/region with the memory_types snapshot "
          f"(peak while building it all: {(peak - base) / n:.0f})")
    # getsizeof walk of everything the cache owns
    seen: set[int] = set()
    total = 0

    def walk(obj: object) -> None:
        nonlocal total
        if id(obj) in seen or isinstance(obj, MemoryType):
            return
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(k)
                walk(v)
        elif hasattr(obj, "__slots__") and not isinstance(obj, (int, np.ndarray)):
            for name in obj.__slots__:  # type: ignore[attr-defined]
                if hasattr(obj, name):
                    walk(getattr(obj, name))

    walk(c._regions._lists)
    walk(c._regions._keys)
    walk(c._regions._maxes)
    walk(c._hot)
    walk(c._snapshot)
    print(f"getsizeof walk: {total / n:.0f} bytes/region (Regions, their ints, the key "
          f"and value sublists, the snapshot arrays; small ints and the enum are shared)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, no 1M sizes")
    args = ap.parse_args()
    repeat = 2 if args.quick else 5
    sizes = [10, 10_000] if args.quick else [10, 10_000, 1_000_000]
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}")
    bench_single(sizes, repeat)
    bench_batch(repeat)
    bench_events(repeat)
    bench_memory(100_000 if args.quick else 1_000_000)


if __name__ == "__main__":
    main()
