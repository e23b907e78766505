"""Benchmarks of memhook's memory-type cache, each figure beside the baseline
measured in the same run.

    python bench/queries/cache_bench.py            # everything (a few minutes)
    python bench/queries/cache_bench.py --quick    # fewer repetitions, no 1M sizes
    python bench/queries/cache_bench.py --clock wall

Figures are per call, read from this thread's CPU time (``--clock cpu``, the
default: other processes on a shared machine do not count) or wall time;
every figure is the median of several rounds, and a figure and its baseline
are timed in the same rounds, alternately.

1. Single ``MemtypeCache.memory_type(ptr)`` at 10, 10k and 1M regions, cold
   (random pointers, never repeated in a row) and hot (a small set of pointers
   asked about again and again), against the Python floor: the same loop
   calling ``bisect.bisect_right`` on a plain list of the region starts
   (through a lambda, as memhook is called through a method).  Goals: cold
   <= 3x the floor, hot <= 1.5x.  Both loops are identical (``for p in ptrs:
   f(p)``), so each figure includes the same loop overhead; the empty-loop
   cost is printed too.  Beside it, ``memhook.memory_type`` on the
   process-wide cache holding the same regions, with a trivial hook layer
   (drain ``lambda: None``, coverage ``lambda: True``) and without one; and,
   above 64 regions, "cold after write": every round right after a write,
   so that lookups go through the sorted list (a cache that has answered 4
   lookups per region since its last write reads a flat copy instead).
2. Batch ``memory_types`` over 1M random pointers at 10k regions (goal >= 20M
   pointers/s), beside numpy's bare ``searchsorted`` of the same pointers.
3. update+remove at 10k regions (goal <= 3 us per event): alternately allocate
   a fresh region and free an existing one, beside a plain
   ``SortedList.add``/``remove`` of the same keys, the two taking turns
   chunk by chunk.  It runs first, in a fresh heap (see main()).
4. Memory per region at 1M regions (goal <= 300 bytes), by tracemalloc, with
   and without the batch snapshot and the flat copy, and by a
   ``sys.getsizeof`` walk.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import tracemalloc
from bisect import bisect_right
from pathlib import Path
from typing import Any, Callable

import numpy as np


def _import_cache():  # type: ignore[no-untyped-def]
    """memhook.cache, also from a source tree whose native parts are not built."""
    try:
        from memhook import cache
        return cache
    except ImportError:
        import types
        root = Path(__file__).resolve().parents[2]
        pkg = types.ModuleType("memhook")
        pkg.__path__ = [str(root / "memhook")]  # type: ignore[attr-defined]
        sys.modules["memhook"] = pkg
        from memhook import cache
        return cache


cache_mod = _import_cache()
MemtypeCache = cache_mod.MemtypeCache
from memhook._values.types import MemoryType

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


clock = time.thread_time
"""The clock every figure is read from (``--clock``): this thread's CPU time by
default, so that the other processes of a shared machine do not count, or
wall time."""


CHUNK = 5000
"""Pointers (or events) timed at a time, the variants taking turns chunk by
chunk: on a shared machine whose speed changes from one second to the next,
every variant then meets the same conditions."""


def per_call(variants: dict[str, Any], ptrs: list[int], repeat: int,
             before: Callable[[], object] | None = None) -> dict[str, float]:
    """Median seconds per call of each variant over ``ptrs``: ``repeat``
    rounds; in each, the variants take turns over the same chunks of
    ``ptrs`` (in an order that rotates from chunk to chunk), each timing its
    calls in the same loop (``for p in chunk: f(p)``).  A variant is a
    function, or ``(setup, function)``; the setup and ``before()`` run, not
    timed, before each of its chunks."""
    names = list(variants)
    chunks = [ptrs[i:i + CHUNK] for i in range(0, len(ptrs), CHUNK)]
    times: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    for _ in range(repeat):
        total = dict.fromkeys(names, 0.0)
        for chunk in chunks:
            turn += 1
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                f = variants[name]
                if isinstance(f, tuple):
                    setup, f = f
                    setup()
                if before is not None:
                    before()
                t0 = clock()
                for p in chunk:
                    f(p)
                total[name] += clock() - t0
        for name in names:
            times[name].append(total[name])
    return {name: statistics.median(t) / len(ptrs) for name, t in times.items()}


def _noop(p: int) -> None:
    return None


SINGLE_VARIANTS = ("MemtypeCache", "memory_type")
"""What bench_single times beside the floor: ``MemtypeCache.memory_type`` (the
figure the goals are for), and ``memhook.memory_type`` on the process cache
(the core's) holding the same regions (no hooks here: a pointer in no region
is asked of the driver - none is loaded here - and is HOST)."""


def bench_single(sizes: list[int], repeat: int) -> list[tuple]:  # type: ignore[type-arg]
    rows = []
    print("\n== single memory_type(ptr): ns per call (median of "
          f"{repeat} interleaved rounds) and the ratio to the bisect floor ==")
    print(f"{'regions':>9} {'case':>16} {'floor':>6} " + " ".join(
        f"{v:>20}" for v in SINGLE_VARIANTS) + "  goal")
    process = cache_mod.process_cache()
    try:
        for n in sizes:
            layout = build_layout(n)
            c = filled_cache(layout)
            process.clear()
            for start, size, t, dev in layout:
                process.update(start, size, t, dev)
            starts = [s for s, _, _, _ in layout]
            lo, hi = layout[0][0], layout[-1][0] + layout[-1][1]
            rnd = random.Random(n)
            # cold: 200k distinct pointers over the whole span (inside regions and in gaps)
            cold = [rnd.randrange(lo - 4096, hi + 4096) for _ in range(200_000)]
            # hot: 64 pointers (the buffers a transport keeps sending), asked 3,000 times each
            hot_set = [rnd.randrange(lo, hi) for _ in range(64)]
            hot = hot_set * 3000
            rnd.shuffle(hot)

            def write(_caches=(c, process), _at=hi + 0x100000) -> None:
                """A write far from every pointer asked about: the caches drop
                their memos and the flat copy a read-mostly cache makes."""
                for cache in _caches:
                    cache.update(_at, 1, MemoryType.CUDA, 0)
                    cache.remove(_at, 1)

            variants = {
                "floor": lambda p, _b=bisect_right, _s=starts: _b(_s, p),
                "MemtypeCache": c.memory_type,
                "memory_type": cache_mod.memory_type,
            }
            cases = [("cold", cold, 3.0, None), ("hot", hot, 1.5, None)]
            if n > cache_mod.FLAT_LIMIT:
                # Every chunk right after a write: lookups through the sorted list.
                cases.append(("cold after write", cold[:60_000], 3.0, write))
            for case, ptrs, goal, before in cases:
                write()  # start each case without memos
                got = per_call(variants, ptrs, repeat, before)
                f_ns = got["floor"] * 1e9
                cells = []
                for variant in SINGLE_VARIANTS:
                    ratio = got[variant] / got["floor"]
                    rows.append((n, case, variant, f_ns, got[variant] * 1e9, ratio, goal))
                    mark = ("ok" if ratio <= goal else "MISSED") if variant == "MemtypeCache" \
                        else ("" if ratio <= goal else "over")
                    cells.append(f"{got[variant] * 1e9:6.0f} {ratio:5.2f}x {mark:6}")
                print(f"{n:>9,} {case:>16} {f_ns:>6.0f} " + " ".join(cells) + f"  {goal:.1f}x")
            del c
    finally:
        process.clear()
    empty = per_call({"noop": _noop}, list(range(200_000)), repeat)["noop"]
    print(f"(goals are for MemtypeCache; the loop plus a call of an empty Python function "
          f"costs {empty * 1e9:.0f} ns)")
    return rows


def bench_batch(repeat: int) -> tuple[float, float]:
    print("\n== batch memory_types at 10k regions (1M random pointers) ==")
    layout = build_layout(10_000)
    c = filled_cache(layout)
    lo, hi = layout[0][0], layout[-1][0] + layout[-1][1]
    ptrs = np.random.default_rng(0).integers(lo - 4096, hi + 4096, size=1_000_000, dtype=np.uint64)
    c.memory_types(ptrs[:10])  # build the snapshot once (it is rebuilt only on change)
    ends = np.array(sorted(s + z for s, z, _, _ in layout), dtype=np.uint64)
    times_m, times_s = [], []
    for _ in range(repeat):
        t0 = clock()
        c.memory_types(ptrs)
        times_m.append(clock() - t0)
        t0 = clock()
        ends.searchsorted(ptrs, side="right")
        times_s.append(clock() - t0)
    rate_m = len(ptrs) / statistics.median(times_m) / 1e6
    rate_s = len(ptrs) / statistics.median(times_s) / 1e6
    print(f"memhook memory_types: {rate_m:.1f} M pointers/s (median; best "
          f"{len(ptrs) / min(times_m) / 1e6:.1f}; goal >= 20); bare np.searchsorted of the same "
          f"pointers: {rate_s:.1f} M/s  {'ok' if rate_m >= 20 else 'MISSED'}")
    t0 = clock()
    c.update(lo, 4096, MemoryType.CUDA, 0)
    c.memory_types(ptrs[:10])
    print(f"(snapshot rebuild after a change, 10k regions: {(clock() - t0) * 1e3:.2f} ms)")
    return rate_m, rate_s


def bench_events(repeat: int) -> tuple[float, float]:
    from sortedcontainers import SortedList
    print("\n== update+remove at 10k regions ==")
    layout = build_layout(20_000, seed=7)
    live, fresh = layout[::2], layout[1::2]  # 10k in the cache, 10k to allocate
    order = list(range(len(fresh)))
    random.Random(3).shuffle(order)
    chunks = [order[i:i + CHUNK // 2] for i in range(0, len(order), CHUNK // 2)]
    times_m, times_b = [], []
    events = 2 * len(fresh)
    for r in range(repeat):
        c = filled_cache(live)
        upd, rem = c.update, c.remove
        sl = SortedList(s for s, _, _, _ in live)
        add, discard = sl.add, sl.remove
        total_m = total_b = 0.0
        for j, chunk in enumerate(chunks):  # memhook and the baseline take turns
            for side in ((0, 1) if (r + j) % 2 else (1, 0)):
                if side == 0:
                    t0 = clock()
                    for i in chunk:  # allocate one, free one: the cache stays at ~10k regions
                        s, z, t, d = fresh[i]
                        upd(s, z, t, d)
                        s, z, _, _ = live[i]
                        rem(s, z)
                    total_m += clock() - t0
                else:
                    t0 = clock()
                    for i in chunk:
                        add(fresh[i][0])
                        discard(live[i][0])
                    total_b += clock() - t0
        times_m.append(total_m)
        times_b.append(total_b)
    per_m = statistics.median(times_m) / events * 1e6
    per_b = statistics.median(times_b) / events * 1e6
    print(f"memhook update/remove: {per_m:.2f} us per event (median of {repeat}; best "
          f"{min(times_m) / events * 1e6:.2f}; goal <= 3); bare SortedList.add/remove of the "
          f"starts: {per_b:.2f} us  {'ok' if per_m <= 3 else 'MISSED'}")
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
    with_snap = tracemalloc.get_traced_memory()[0]
    # The flat copy that a read-mostly cache makes for single lookups (after
    # FLAT_AFTER lookups per region since its last write), made here at once.
    c._quiet = (c._version, cache_mod.FLAT_AFTER * len(c))
    c._memo_full(c._flat)
    assert c._flat[0] is not None
    gc.collect()
    with_flat, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"tracemalloc: {(after - base) / n:.0f} bytes/region (regions only), "
          f"{(with_snap - base) / n:.0f} with the memory_types snapshot, "
          f"{(with_flat - base) / n:.0f} with the flat copy too "
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
    walk(c._flat)
    walk(c._snapshot)
    print(f"getsizeof walk: {total / n:.0f} bytes/region (Regions, their ints, the key "
          f"and value sublists, the flat copy, the snapshot arrays; small ints and the enum "
          f"are shared)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, no 1M sizes")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="time figures by this thread's CPU time (default) or by wall time")
    args = ap.parse_args()
    global clock
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    repeat = 3 if args.quick else 5
    sizes = [10, 10_000] if args.quick else [10, 10_000, 1_000_000]
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, {args.clock} clock")
    # update+remove first, in a fresh heap: after the 1M-region sections have
    # made and freed millions of objects, it and its SortedList baseline both
    # run about 2x slower (measured), which is no part of what it measures.
    bench_events(repeat)
    bench_batch(repeat)
    bench_single(sizes, repeat)
    bench_memory(100_000 if args.quick else 1_000_000)


if __name__ == "__main__":
    main()
