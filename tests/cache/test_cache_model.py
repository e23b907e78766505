"""MemtypeCache against a brute-force byte-map model (hypothesis).

The model keeps, for every byte of a small address space, None or the
(type, device) last written there.  The cache's regions must be exactly the
model's maximal runs (merging is canonical), and every query must answer what
the bytes say.  The space sits at a 47-bit base so addresses are real-sized
ints, and the cache runs with tiny sublists (load 4) as well as the default,
so that sortedcontainers' splits and merges happen within a few regions.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memhook.cache as cache_module
from memhook import MemoryType, MemtypeCache, Region

BASE = 0x7F00_0000_0000
SPACE = 160
KINDS = [MemoryType.CUDA, MemoryType.CUDA_MANAGED, MemoryType.CUDA_HOST, MemoryType.UNKNOWN]
DEVICES = [-1, 0, 1]


class Model:
    def __init__(self) -> None:
        self.bytes: list[tuple[MemoryType, int] | None] = [None] * SPACE

    def update(self, s: int, n: int, t: MemoryType, d: int) -> None:
        for b in range(s, s + n):
            self.bytes[b] = (t, d)

    def remove(self, s: int, n: int) -> None:
        for b in range(s, s + n):
            self.bytes[b] = None

    def run(self, b: int) -> tuple[int, int]:
        """The maximal run of equal (type, device) holding byte b."""
        v = self.bytes[b]
        lo = b
        while lo > 0 and self.bytes[lo - 1] == v:
            lo -= 1
        hi = b + 1
        while hi < SPACE and self.bytes[hi] == v:
            hi += 1
        return lo, hi

    def regions(self) -> list[Region]:
        out, b = [], 0
        while b < SPACE:
            if self.bytes[b] is None:
                b += 1
                continue
            lo, hi = self.run(b)
            t, d = self.bytes[b]  # type: ignore[misc]
            out.append(Region(BASE + lo, hi - lo, t, d))
            b = hi
        return out

    def lookup(self, p: int, n: int) -> Region | None:
        span = self.bytes[p:p + n]
        if all(v is None for v in span):
            return None
        if all(v == span[0] for v in span):
            lo, hi = self.run(p)
            t, d = span[0]  # type: ignore[misc]
            return Region(BASE + lo, hi - lo, t, d)
        if all(v is not None for v in span) and len({v[0] for v in span}) == 1:  # type: ignore[index]
            lo, _ = self.run(p)
            _, hi = self.run(p + n - 1)
            return Region(BASE + lo, hi - lo, span[0][0], -1)  # type: ignore[index]
        return Region(BASE + p, n, MemoryType.UNKNOWN, -1)

    def memory_type(self, p: int, n: int) -> MemoryType:
        r = self.lookup(p, n)
        return MemoryType.HOST if r is None else r.mem_type


@st.composite
def ranges(draw):  # type: ignore[no-untyped-def]
    s = draw(st.integers(0, SPACE - 1))
    n = draw(st.integers(1, min(48, SPACE - s)))
    return s, n


ops = st.lists(
    st.one_of(
        st.tuples(st.just("update"), ranges(), st.sampled_from(KINDS), st.sampled_from(DEVICES)),
        st.tuples(st.just("remove"), ranges()),
        st.tuples(st.just("lookup"), ranges()),
    ),
    min_size=1, max_size=60,
)


def check_all(cache: MemtypeCache, model: Model) -> None:
    assert cache.regions() == model.regions()
    assert len(cache) == len(model.regions())
    codes = cache.memory_types(np.arange(BASE - 2, BASE + SPACE + 2, dtype=np.uint64))
    expect = [MemoryType.HOST] * 2 + [model.memory_type(b, 1) for b in range(SPACE)] \
        + [MemoryType.HOST] * 2
    assert codes.tolist() == [int(t) for t in expect]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, load=st.sampled_from([4, 1000]), mode=st.sampled_from(["flat", "sorted", "lazy"]))
def test_random_sequences_match_the_byte_map(ops, load, mode) -> None:  # type: ignore[no-untyped-def]
    # "flat": small caches keep a flat copy (the default); "sorted" turns it
    # off, so the bisect path over the sorted sublists is checked on small
    # caches too; "lazy" has every memo fill make the flat copy a large,
    # read-mostly cache makes (and every fresh answer go into the memo).
    saved = (cache_module.FLAT_LIMIT, cache_module.HOT_LIMIT, cache_module.FLAT_AFTER,
             cache_module._memo_turn)
    if mode != "flat":
        cache_module.FLAT_LIMIT = 0
    if mode == "lazy":
        cache_module.HOT_LIMIT, cache_module.FLAT_AFTER = 2, 0
        cache_module._memo_turn = itertools.repeat(True)
    try:
        _run_against_model(ops, load)
    finally:
        (cache_module.FLAT_LIMIT, cache_module.HOT_LIMIT, cache_module.FLAT_AFTER,
         cache_module._memo_turn) = saved


def _run_against_model(ops, load) -> None:  # type: ignore[no-untyped-def]
    cache, model = MemtypeCache(), Model()
    cache._set_load(load)
    for op in ops:
        if op[0] == "update":
            (s, n), t, d = op[1], op[2], op[3]
            cache.update(BASE + s, n, t, d)
            model.update(s, n, t, d)
        elif op[0] == "remove":
            s, n = op[1]
            cache.remove(BASE + s, n)
            model.remove(s, n)
        else:
            s, n = op[1]
            assert cache.lookup(BASE + s, n) == model.lookup(s, n), (s, n)
            assert cache.memory_type(BASE + s, n) is model.memory_type(s, n), (s, n)
            # twice: the second single-byte answer comes from the hot memo
            assert cache.memory_type(BASE + s) is model.memory_type(s, 1)
            assert cache.memory_type(BASE + s) is model.memory_type(s, 1)
    check_all(cache, model)


def test_many_regions_split_and_merge_sublists() -> None:
    """A long random run: thousands of regions in sublists of ~50, so the
    sorted list really splits and merges, checked against a numpy byte map."""
    rng = np.random.default_rng(5)
    space = 60_000
    kind = np.zeros(space, dtype=np.int16) - 1  # -1: no region; else type*8 + device+1
    cache = MemtypeCache()
    cache._set_load(50)
    for step in range(6000):
        s = int(rng.integers(0, space - 1))
        n = int(rng.integers(1, min(40, space - s) + 1))
        if rng.random() < 0.7:
            t, d = KINDS[int(rng.integers(0, 3))], int(rng.integers(-1, 2))
            cache.update(BASE + s, n, t, d)
            kind[s:s + n] = int(t) * 8 + d + 1
        else:
            cache.remove(BASE + s, n)
            kind[s:s + n] = -1
    assert len(cache._maxes) > 10  # really several sublists
    # expected regions: runs of equal codes
    edges = np.flatnonzero(np.diff(kind)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [space]])
    expect = [Region(BASE + int(a), int(b - a), MemoryType(int(kind[a]) // 8), int(kind[a]) % 8 - 1)
              for a, b in zip(starts, ends) if kind[a] >= 0]
    assert cache.regions() == expect
    ptrs = np.arange(BASE, BASE + space, dtype=np.uint64)
    want = np.where(kind >= 0, kind // 8, 0).astype(np.uint8)
    assert np.array_equal(cache.memory_types(ptrs), want)
    sample = rng.integers(0, space, 3000)
    assert [int(cache.memory_type(BASE + int(p))) for p in sample] == want[sample].tolist()


# ------------------------------------------------------------- named cases

def test_update_merges_same_type_and_device_including_adjacent() -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x1000, MemoryType.CUDA, 0)
    c.update(0x2000, 0x1000, MemoryType.CUDA, 0)  # adjacent: merged
    c.update(0x2800, 0x1000, MemoryType.CUDA, 0)  # overlapping: merged
    assert c.regions() == [Region(0x1000, 0x2800, MemoryType.CUDA, 0)]
    c.update(0x3800, 0x100, MemoryType.CUDA, 1)  # other device: not merged
    assert len(c) == 2
    assert c.lookup(0x1000, 0x2800) == Region(0x1000, 0x2800, MemoryType.CUDA, 0)


def test_update_over_other_types_replaces_only_the_overlap() -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x3000, MemoryType.CUDA, 0)
    c.update(0x2000, 0x800, MemoryType.CUDA_MANAGED, 0)
    assert c.regions() == [Region(0x1000, 0x1000, MemoryType.CUDA, 0),
                           Region(0x2000, 0x800, MemoryType.CUDA_MANAGED, 0),
                           Region(0x2800, 0x1800, MemoryType.CUDA, 0)]
    c.update(0x2000, 0x800, MemoryType.CUDA, 0)  # back: everything merges again
    assert c.regions() == [Region(0x1000, 0x3000, MemoryType.CUDA, 0)]


def test_remove_punches_holes() -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x3000, MemoryType.CUDA, 0)
    c.remove(0x2000, 0x100)
    assert c.regions() == [Region(0x1000, 0x1000, MemoryType.CUDA, 0),
                           Region(0x2100, 0x1F00, MemoryType.CUDA, 0)]
    assert c.memory_type(0x2050) is MemoryType.HOST
    assert c.lookup(0x2050) is None
    c.remove(0, 1 << 40)
    assert len(c) == 0 and c.regions() == []


def test_straddles_are_unknown() -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x1000, MemoryType.CUDA, 0)
    assert c.memory_type(0x1000, 0x1000) is MemoryType.CUDA
    assert c.memory_type(0x1800, 0x1000) is MemoryType.UNKNOWN  # runs past the end
    assert c.memory_type(0x800, 0x1000) is MemoryType.UNKNOWN  # starts in a gap
    assert c.memory_type(0x800, 0x800) is MemoryType.HOST  # ends where the region starts
    assert c.lookup(0x1800, 0x1000) == Region(0x1800, 0x1000, MemoryType.UNKNOWN, -1)
    # touching regions of one type but different devices behave as one
    c.update(0x2000, 0x1000, MemoryType.CUDA, 1)
    assert c.memory_type(0x1800, 0x1000) is MemoryType.CUDA
    assert c.lookup(0x1800, 0x1000) == Region(0x1000, 0x2000, MemoryType.CUDA, -1)
    # ... but not touching regions of different types
    c.update(0x3000, 0x1000, MemoryType.CUDA_HOST, 1)
    assert c.memory_type(0x2800, 0x1000) is MemoryType.UNKNOWN


def test_region_at_the_top_of_the_address_space() -> None:
    c = MemtypeCache()
    top = (1 << 64) - 0x1000
    c.update(top, 0x1000, MemoryType.CUDA, 0)
    assert c.memory_type((1 << 64) - 1) is MemoryType.CUDA
    assert c.memory_types([(1 << 64) - 1, top - 1]).tolist() == [1, 0]
    assert c.regions()[0].end == 1 << 64
    with pytest.raises(ValueError, match="runs past the end"):
        c.update(top, 0x1001, MemoryType.CUDA, 0)


def test_memory_types_snapshot_follows_changes_and_shapes() -> None:
    c = MemtypeCache()
    ptrs = np.array([[0x1000, 0x1800], [0x2000, 0x5000]], dtype=np.uint64)
    assert c.memory_types(ptrs).tolist() == [[0, 0], [0, 0]]
    c.update(0x1000, 0x1000, MemoryType.CUDA_MANAGED)
    out = c.memory_types(ptrs)
    assert out.dtype == np.uint8 and out.shape == (2, 2)
    assert out.tolist() == [[2, 2], [0, 0]]
    c.clear()
    assert c.memory_types(ptrs).tolist() == [[0, 0], [0, 0]]
    assert c.memory_types([]).tolist() == []
    assert c.memory_types(np.array([5], dtype=np.int64)).tolist() == [0]


def test_update_that_changes_nothing_keeps_the_memo() -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x1000, MemoryType.CUDA, 0)
    c.memory_type(0x1800)
    state = c._flat
    c.update(0x1200, 0x100, MemoryType.CUDA, 0)
    assert c._flat is state
    c.update(0x1200, 0x100, MemoryType.CUDA, 1)
    assert c._flat is not state and c.memory_type(0x1250) is MemoryType.CUDA and len(c) == 3
