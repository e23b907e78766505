"""memory_types's search (csrc/pyext/batch_search.c through
memhook._queries.search): the same index as numpy's searchsorted for every key,
over bounds of every size the lockstep loop and its tail split differently,
at each bound, one off it on both sides, and the ends of the address space."""

from __future__ import annotations

import numpy as np
import pytest

from memhook import MemoryType, MemtypeCache
from memhook._queries import search as _search

TOP = np.uint64(2**64 - 1)


def test_the_native_search_is_built() -> None:
    assert _search._c_lower_bounds is not None, "the extension lacks memhook_lower_bounds"


@pytest.mark.parametrize("seed", range(40))
def test_the_same_index_as_searchsorted(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 70)) if seed % 2 else int(rng.integers(0, 5000))
    bounds = np.unique(rng.integers(0, TOP, n, dtype=np.uint64, endpoint=True))
    if seed % 3 == 0:
        bounds = np.unique(np.append(bounds, TOP))  # the cache's sentinel
    with np.errstate(over="ignore"):
        keys = np.concatenate([bounds, bounds + np.uint64(1), bounds - np.uint64(1),
                               rng.integers(0, TOP, int(rng.integers(0, 200)), dtype=np.uint64,
                                            endpoint=True),
                               np.array([0, TOP], dtype=np.uint64)])
    rng.shuffle(keys)
    for m in (0, 1, 15, 16, 17, len(keys)):  # around the 16 lanes
        got = _search.lower_bounds(bounds, keys[:m])
        assert got.dtype == np.int64
        assert got.tolist() == bounds.searchsorted(keys[:m]).tolist(), (n, m)


def test_a_strided_key_array_is_read_in_order() -> None:
    bounds = np.arange(0, 1000, 10, dtype=np.uint64)
    keys = np.arange(0, 2000, dtype=np.uint64)[::7]
    assert _search.lower_bounds(bounds, keys).tolist() == bounds.searchsorted(keys).tolist()


def test_memory_types_over_many_regions_agrees_with_memory_type() -> None:
    rng = np.random.default_rng(7)
    cache = MemtypeCache()
    starts = np.sort(rng.choice(1 << 30, 3000, replace=False)).astype(np.uint64) * np.uint64(1 << 16)
    kinds = [MemoryType.CUDA, MemoryType.CUDA_MANAGED, MemoryType.CUDA_HOST, MemoryType.UNKNOWN]
    for i, s in enumerate(starts.tolist()):
        cache.update(s, 4096 + i, kinds[i % 4], 0)
    ptrs = np.concatenate([starts, starts + np.uint64(4095), starts + np.uint64(1 << 15),
                           starts - np.uint64(1)])
    rng.shuffle(ptrs)
    expected = [int(cache.memory_type(int(p))) for p in ptrs.tolist()]
    assert cache.memory_types(ptrs).tolist() == expected


def test_the_native_classifier_is_built() -> None:
    assert _search._c_memory_types is not None, "the extension lacks memhook_memory_types"


def _random_snapshot(rng: np.random.Generator, n: int, to_the_top: bool):
    """A snapshot as MemtypeCache builds one: n sorted disjoint regions
    (touching ones too), then the sentinel; the last region may end at 2**64."""
    edges = np.unique(rng.integers(1, TOP, 2 * n + 2, dtype=np.uint64))[: 2 * n]
    n = len(edges) // 2
    starts, ends = edges[0:2 * n:2].copy(), edges[1:2 * n:2].copy()  # [start, end)
    if n > 1 and rng.random() < 0.5:
        starts[1] = ends[0]  # touching neighbours
    lasts = ends - np.uint64(1)
    if to_the_top and n:
        lasts[-1] = TOP
    types = rng.integers(1, 5, n, dtype=np.uint8)
    return (np.append(starts, TOP), np.append(lasts, TOP), np.append(types, np.uint8(0)),
            starts, lasts)


@pytest.mark.parametrize("seed", range(30))
def test_the_native_classifier_answers_as_numpy(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(0, 40)) if seed % 2 else int(rng.integers(0, 3000))
    snap_starts, snap_lasts, snap_types, starts, lasts = _random_snapshot(rng, n, seed % 3 == 0)
    with np.errstate(over="ignore"):
        keys = np.concatenate([starts, starts - np.uint64(1), lasts, lasts + np.uint64(1),
                               rng.integers(0, TOP, 300, dtype=np.uint64, endpoint=True),
                               np.array([0, 1, TOP - np.uint64(1), TOP], dtype=np.uint64)])
    rng.shuffle(keys)
    for m in (0, 1, 15, 16, 17, 33, len(keys)):  # around the 16 lanes
        want_codes, want_absent = _search.snapshot_memory_types(
            snap_starts, snap_lasts, snap_types, keys[:m], True, native=False)
        codes, absent = _search.snapshot_memory_types(snap_starts, snap_lasts, snap_types,
                                                      keys[:m], True)
        assert codes.dtype == np.uint8 and absent.dtype == np.bool_
        assert codes.tolist() == want_codes.tolist(), (n, m)
        assert absent.tolist() == want_absent.tolist(), (n, m)
        only, none = _search.snapshot_memory_types(snap_starts, snap_lasts, snap_types,
                                                   keys[:m], False)
        assert none is None and only.tolist() == want_codes.tolist()


def test_the_classifier_against_the_regions_themselves() -> None:
    """An oracle that knows nothing of the search: each key's region found by
    a linear scan."""
    rng = np.random.default_rng(5)
    snap_starts, snap_lasts, snap_types, starts, lasts = _random_snapshot(rng, 200, False)
    keys = np.concatenate([starts, lasts, lasts + np.uint64(1), starts - np.uint64(1),
                           rng.integers(0, TOP, 500, dtype=np.uint64)])
    codes, absent = _search.snapshot_memory_types(snap_starts, snap_lasts, snap_types, keys, True)
    for key, code, out in zip(keys.tolist(), codes.tolist(), absent.tolist()):
        held = [t for s, last, t in zip(starts.tolist(), lasts.tolist(), snap_types.tolist())
                if s <= key <= last]
        assert (code, out) == ((held[0], False) if held else (0, True)), hex(key)
