"""The map's search at its edges (csrc/cache/region_map.c: the block index,
its guide and the batch's sixteen lanes), against a bisect over the regions.

Maps of every size around the blocks (16 keys) and the powers of two the
keys are padded to - empty, one region, a block less one, a block, a block
and one, n a power of two - laid out evenly (the guide takes the search's
upper steps), at random, crowded (spacings that grow geometrically: the
guide would save nothing), and as a dense run with far outliers at both
ends of the address space (starts near 0 and regions ending at 2^64).
Each is asked about every start, the byte before it, its last byte, its
end, the addresses 0, 1, 2^64 - 2 and 2^64 - 1, and random pointers: single
lookups, and the batch, each pointer asked inside a group of sixteen
whose other pointers fall in regions (so the sixteen lanes search it).
Then maps that grow and shrink across publishes while reader threads ask
the batch: every answer is one whole map's, never a mix; and the guide's
structure: built where the keys spread (a far outlier or a few left out of
its span), left out where they crowd."""

from __future__ import annotations

import bisect
import threading

import numpy as np
import pytest
from native_cache_testing import FOUND_ABSENT, NativeCache

from memhook._events.layout import EVENT_DTYPE

TOP = 2**64 - 1
HOST = 0
ALLOC, FREE = 1, 2


def _rows(regions: list[tuple[int, int, int]], kind: int = ALLOC) -> np.ndarray:
    rows = np.zeros(len(regions), dtype=EVENT_DTYPE)
    for i, (start, end, mem_type) in enumerate(regions):
        rows[i]["seq"] = i + 1
        rows[i]["kind"] = kind
        rows[i]["address"] = start
        rows[i]["size"] = (end - start) % 2**64  # (a region ending at 2^64: size to the top)
        rows[i]["mem_type"] = mem_type
        rows[i]["device"] = 0
    return rows


def _layout(kind: str, n: int, rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """n disjoint regions [start, end) with types 1..3, sorted."""
    if kind == "even":
        starts = [0x3_0200_0000 + i * 0x20000 for i in range(n)]
        sizes = [0x1000 * (1 + i % 4) for i in range(n)]
    elif kind == "random":
        gaps = rng.integers(1, 1 << 20, n)
        starts = (0x7F00_0000_0000 + np.cumsum(gaps * 2) - gaps * 2).tolist()
        sizes = [int(g) for g in gaps]
    elif kind == "crowded":
        starts = [(1 << 12) + (1 << min(12 + i, 62)) + i for i in range(n)]
        sizes = [1 + (s >> 2) if i + 1 < n else 1 for i, s in enumerate(starts)]
        sizes = [min(sz, (starts[i + 1] - starts[i]) if i + 1 < n else 1)
                 for i, sz in enumerate(sizes)]
    else:  # a dense run, and far outliers at both ends of the address space
        low = [(0x1000 * (i + 1), 0x1000 * (i + 1) + 0x800) for i in range(min(n, 3))]
        high_n = min(max(n - len(low), 0), 3)
        high = [(TOP - 0x10000 * (high_n - i) + 1, TOP - 0x10000 * (high_n - i) + 0x801)
                for i in range(high_n)]
        if high:  # the last one ends at 2^64
            high[-1] = (high[-1][0], 2**64)
        mid = n - len(low) - len(high)
        run = [(0x3_0200_0000 + i * 0x4000, 0x3_0200_0000 + i * 0x4000 + 0x3000)
               for i in range(mid)]
        out = sorted(low + run + high)
        return [(s, e, 1 + i % 3) for i, (s, e) in enumerate(out)]
    return [(int(s), int(s) + int(z), 1 + i % 3) for i, (s, z) in enumerate(zip(starts, sizes))]


def _probes(regions: list[tuple[int, int, int]], rng: np.random.Generator) -> list[int]:
    ps = {0, 1, TOP - 1, TOP}
    for start, end, _ in regions:
        ps.update({start, start - 1, end - 1, end % 2**64, (start + end) // 2})
    lo = regions[0][0] if regions else 0
    hi = regions[-1][1] if regions else 1 << 40
    ps.update(int(x) for x in rng.integers(max(lo - 4096, 0), min(hi + 4096, TOP), 200,
                                           dtype=np.uint64))
    return sorted(p for p in ps if 0 <= p <= TOP)


def _expected_in(regions: list[tuple[int, int, int]], starts: list[int], p: int) -> int:
    """The type a bisect over ``starts`` (the regions' starts) finds for p."""
    i = bisect.bisect_right(starts, p) - 1
    return regions[i][2] if i >= 0 and p < min(regions[i][1], TOP) else HOST


def _expected(regions: list[tuple[int, int, int]], probes: list[int]) -> list[int]:
    """What a bisect over the regions answers for each probe (a region ending
    at 2^64 loses its last byte: docs/design/native-cache.md)."""
    starts = [r[0] for r in regions]
    return [_expected_in(regions, starts, p) for p in probes]


def _in_groups(probes: list[int], inside: list[int]) -> np.ndarray:
    """Each probe as the last of sixteen pointers whose first fifteen lie in
    regions: the batch searches every group in its sixteen lanes."""
    if not inside:
        return np.array(probes, dtype=np.uint64)
    out = []
    for k, p in enumerate(probes):
        out += [inside[(k * 15 + j) % len(inside)] for j in range(15)] + [p]
    return np.array(out, dtype=np.uint64)


SIZES = [0, 1, 2, 15, 16, 17, 31, 32, 33, 255, 256, 257, 512, 1024, 1025, 4096, 5000]


@pytest.mark.parametrize("kind", ["even", "random", "crowded", "outliers"])
@pytest.mark.parametrize("n", SIZES)
def test_every_edge_answers_as_a_bisect(kind: str, n: int) -> None:
    rng = np.random.default_rng(n * 7 + len(kind))
    regions = _layout(kind, n, rng)
    assert all(a[1] <= b[0] for a, b in zip(regions, regions[1:])), "the layout overlaps"
    probes = _probes(regions, rng)
    want = _expected(regions, probes)
    with NativeCache() as c:
        c.hooks(installed=True, coverage=True)
        c.apply(_rows(regions))
        assert len(c.regions()) == len(regions)
        # Single lookups (the byte at 2^64 - 1 has no end: not a range).
        for p, w in zip(probes, want):
            if p == TOP:
                continue
            kind_found, got = c.lookup(p, 1)
            assert (kind_found == FOUND_ABSENT) == (w == HOST), (hex(p), kind_found, w)
            if w != HOST:
                assert got.mem_type == w, hex(p)
        # The batch: in order (walked), shuffled (searched), and in groups.
        assert c.types(np.array(probes, dtype=np.uint64)).tolist() == want
        order = rng.permutation(len(probes))
        shuffled = np.array(probes, dtype=np.uint64)[order]
        assert c.types(shuffled).tolist() == [want[i] for i in order]
        inside = [s for s, _, _ in regions]
        grouped = c.types(_in_groups(probes, inside)).tolist()
        if inside:
            assert grouped[15::16] == want
            assert all(t != HOST for k, t in enumerate(grouped) if k % 16 != 15)
        else:
            assert grouped == want


def test_readers_see_whole_maps_while_it_grows_and_shrinks() -> None:
    """Two maps of different sizes (one under the guide's threshold, one
    over it, with different padded lengths) replace each other in one
    publish each while three threads ask the batch: each answer is all of
    one map's, and the snapshots the readers held are reclaimed safely
    under them (a reused or unmapped one would answer a mix, or fault)."""
    rng = np.random.default_rng(5)
    small = _layout("even", 40, rng)
    big = [(s, e, 3 if t == 1 else t) for s, e, t in _layout("even", 3000, rng)]
    probes = np.array(_probes(big, rng)[:4000], dtype=np.uint64)
    rng.shuffle(probes)
    plist = probes.tolist()
    answers = {tuple(_expected(m, plist)) for m in (small, big)}
    assert len(answers) == 2
    with NativeCache() as c:
        c.hooks(installed=True, coverage=True)
        c.apply(_rows(small))
        stop = threading.Event()
        bad: list[str] = []
        seen = [0, 0]

        def reader() -> None:
            while not stop.is_set():
                got = tuple(c.types(probes).tolist())
                if got not in answers:
                    bad.append("an answer of no one map")
                    return
                seen[got == answers_big] += 1

        answers_big = tuple(_expected(big, plist))
        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for k in range(60):
                old, new = (small, big) if k % 2 == 0 else (big, small)
                c.apply(np.concatenate([_rows(old, FREE), _rows(new)]))
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not bad, bad
        assert sum(seen) > 0


@pytest.mark.parametrize(("kind", "most"), [("even", 2), ("outliers", 3), ("random", 7),
                                            ("crowded", 7)])
def test_the_guide_leaves_few_steps_where_the_keys_spread(kind: str, most: int) -> None:
    """10,000 regions: a binary search takes 14 steps (16,384 padded keys);
    the guide leaves one or two over an even layout, and a few where far
    outliers at both ends (or the 50 geometrically spread keys below the
    crowded layout's dense run) are left out of its span."""
    with NativeCache() as c:
        c.apply(_rows(_layout(kind, 10_000, np.random.default_rng(1))))
        assert 0 < c.search_steps() <= most, c.search_steps()


def test_the_guide_is_left_out_where_the_keys_crowd() -> None:
    """Two dense clusters far apart: every bucket but two is empty, the
    guide would save nothing, and the search's 14 steps stay (and a map
    too small for a block index has no guide either)."""
    low = [(0x3_0000_0000 + i * 0x4000, 0x3_0000_0000 + i * 0x4000 + 0x1000, 1)
           for i in range(5000)]
    high = [(0x7F00_0000_0000 + i * 0x4000, 0x7F00_0000_0000 + i * 0x4000 + 0x1000, 2)
            for i in range(5000)]
    with NativeCache() as c:
        c.apply(_rows(low + high))
        assert c.search_steps() == 14
        with NativeCache() as small:
            small.apply(_rows(low[:10]))
            assert small.search_steps() == 4


def _one(start: int, end: int, mem_type: int, kind: int, seq: int) -> np.ndarray:
    rows = _rows([(start, end, mem_type)], kind)
    rows[0]["seq"] = seq
    return rows


@pytest.mark.parametrize("kind", ["even", "random", "outliers"])
@pytest.mark.parametrize("n", [1000, 5000])
def test_a_map_changed_a_region_a_publish_answers_as_a_bisect(kind: str, n: int) -> None:
    """A drain's commit of one allocation or one free at a time (a program
    that asks about each buffer it makes): each publish builds its guide
    from the last one's, and after each the batch answers as a bisect over
    the map as it then stands - allocations in gaps, frees anywhere, and
    new outliers below and above the rest that come and go."""
    rng = np.random.default_rng(n + len(kind))
    regions = _layout(kind, n, rng)
    with NativeCache() as c:
        c.hooks(installed=True, coverage=True)
        c.apply(_rows(regions))
        seq = 10 * n
        for step in range(120):
            seq += 1
            pick = step % 4
            if pick == 0 and len(regions) > 2:  # a free anywhere
                i = int(rng.integers(0, len(regions)))
                s, e, t = regions.pop(i)
                c.apply(_one(s, e, t, FREE, seq))
            elif pick == 3:  # a far outlier, alternately below and above the rest
                s = 0x100 + step * 0x100 if step % 8 == 3 else TOP - 0x100000 + step * 0x100
                if not any(a < s + 0x80 and s < b for a, b, _ in regions):
                    regions.append((s, s + 0x80, 2))
                    regions.sort()
                    c.apply(_one(s, s + 0x80, 2, ALLOC, seq))
            else:  # an allocation in a gap between two regions
                i = int(rng.integers(0, len(regions) - 1))
                lo, hi = regions[i][1], regions[i + 1][0]
                if hi - lo >= 0x40:
                    s = lo + 0x10 + int(rng.integers(0, (hi - lo - 0x30) // 0x10)) * 0x10
                    regions.insert(i + 1, (s, s + 0x10, 1 + step % 3))
                    c.apply(_one(s, s + 0x10, 1 + step % 3, ALLOC, seq))
            probes = _probes(regions, rng)[:: max(1, n // 200)]
            starts = [r[0] for r in regions]
            want = [_expected_in(regions, starts, p) for p in probes]
            order = rng.permutation(len(probes))
            got = c.types(np.array(probes, dtype=np.uint64)[order]).tolist()
            assert got == [want[i] for i in order], f"after change {step}"
        assert len(c.regions()) == len(regions)


def test_the_guide_follows_an_outlier_that_comes_and_goes() -> None:
    """10,000 even regions and one far outlier: the guide leaves it out of
    its span (a step or two), keeps doing so while regions come and go one
    a publish, and still leaves a step or two once it is freed and when it
    comes back."""
    even = _layout("even", 10_000, np.random.default_rng(3))
    far = (0x7F00_0000_0000, 0x7F00_0000_1000, 2)
    with NativeCache() as c:
        c.apply(_rows(even))
        assert c.search_steps() <= 2
        c.apply(_rows([far]))
        assert c.search_steps() <= 2
        for k in range(20):
            s = even[k * 400][1] + 0x1000
            c.apply(_one(s, s + 0x1000, 1, ALLOC, 20_000 + 2 * k))
            assert c.search_steps() <= 2, k
            c.apply(_one(s, s + 0x1000, 1, FREE, 20_001 + 2 * k))
            assert c.search_steps() <= 2, k
        c.apply(_rows([far], FREE))
        assert c.search_steps() <= 2
        c.apply(_rows([far]))
        assert c.search_steps() <= 2


def test_a_crowded_map_gets_a_guide_once_its_keys_spread() -> None:
    """Two dense clusters far apart have no guide, and keep none while a
    region comes and goes one a publish (each answered right); once most
    of one cluster is freed and its regions made again evenly among the
    other's gaps (the same padded length), the map has a guide again."""
    low = [(0x3_0000_0000 + i * 0x4000, 0x3_0000_0000 + i * 0x4000 + 0x1000, 1)
           for i in range(5000)]
    high = [(0x7F00_0000_0000 + i * 0x4000, 0x7F00_0000_0000 + i * 0x4000 + 0x1000, 2)
            for i in range(5000)]
    with NativeCache() as c:
        c.apply(_rows(low + high))
        assert c.search_steps() == 14
        for k in range(10):
            s = low[k * 400][0] + 0x2000
            c.apply(_one(s, s + 0x1000, 3, ALLOC, 20_000 + 2 * k))
            assert c.search_steps() == 14
            assert c.types(np.array([s, s - 1], dtype=np.uint64)).tolist() == [3, HOST]
            c.apply(_one(s, s + 0x1000, 3, FREE, 20_001 + 2 * k))
            assert c.search_steps() == 14
        spread = [(s + 0x2000, s + 0x3000, 3) for s, _, _ in low]
        c.apply(np.concatenate([_rows(high, FREE), _rows(spread)]))
        assert len(c.regions()) == 10_000
        assert c.search_steps() <= 2


def test_readers_see_stable_regions_while_patched_publishes_run() -> None:
    """Three threads ask the batch about 5,000 regions that never change
    while the writer makes and frees a region in a gap one a publish (each
    publish's guide patched from the last one's, its table a copy with
    counts moved): the stable regions always answer their type and the
    gaps HOST, whichever snapshot a reader holds, and a pointer in the
    region that comes and goes answers its type or HOST, nothing else."""
    rng = np.random.default_rng(11)
    regions = _layout("even", 5000, rng)
    # (the regions start every 128 KiB, as do the guide's buckets: a
    # toggled region 80 KiB past a start shares its bucket with it, so the
    # first allocation builds a guide of two steps and every publish after
    # it patches that one; the probes beside it - the gap before and after
    # it, the regions either side - answer the same whether it is there or
    # not, and the writer asks about the toggled region itself)
    near = range(0, 4999, 97)
    toggles = [regions[k][0] + 0x14000 for k in near]
    probes = [regions[k][0] for k in range(0, 5000, 7)] + [regions[k][1] for k in
                                                            range(0, 5000, 7)]
    probes += [p for k in near for p in (regions[k][0], regions[k][1] - 1,
                                          regions[k][0] + 0x10000, regions[k][0] + 0x1C000,
                                          regions[k + 1][0])]
    want = _expected(regions, probes)
    with NativeCache() as c:
        c.hooks(installed=True, coverage=True)
        c.apply(_rows(regions))
        order = rng.permutation(len(probes))  # (searched, not walked)
        probes, want = [probes[i] for i in order], [want[i] for i in order]
        ask = np.array(probes + toggles, dtype=np.uint64)
        stop = threading.Event()
        bad: list[str] = []
        asked = [0]

        def reader() -> None:
            while not stop.is_set():
                got = c.types(ask).tolist()
                if got[: len(probes)] != want:
                    bad.append("a stable region answered wrong")
                    return
                if any(t not in (HOST, 3) for t in got[len(probes):]):
                    bad.append("a toggled region answered neither its type nor HOST")
                    return
                asked[0] += 1

        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            seq = 100_000
            for k in range(300):
                s = toggles[k % len(toggles)]
                # (out of order: the batch searches them, through the guide,
                # where sixteen in order would walk the starts)
                inside = np.array([s + 0xFFF, s, s + 0x800] * 6, dtype=np.uint64)
                c.apply(_one(s, s + 0x1000, 3, ALLOC, seq))
                if c.types(inside).tolist() != [3] * 18:
                    bad.append(f"allocation {k} not answered after its publish")
                    break
                c.apply(_one(s, s + 0x1000, 3, FREE, seq + 1))
                if c.types(inside).tolist() != [HOST] * 18:
                    bad.append(f"free {k} not answered after its publish")
                    break
                seq += 2
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not bad, bad
        assert asked[0] > 0
        assert c.search_steps() <= 2
