"""memory_types's search (csrc/pyext/batch_search.c through
memhook._search): the same index as numpy's searchsorted for every key,
over bounds of every size the lockstep loop and its tail split differently,
at each bound, one off it on both sides, and the ends of the address space."""

from __future__ import annotations

import numpy as np
import pytest

from memhook import MemoryType, MemtypeCache, _search

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
