"""Concurrent writers and readers: readers take no lock, so check that what
they see is always an answer some state of the cache gives."""

from __future__ import annotations

import itertools
import sys
import threading

import numpy as np
import pytest

import memhook.cache as cache_module
from memhook import MemoryType, MemtypeCache

BASE = 0x7F00_0000_0000
SLOTS = 64
SLOT = 0x10000


@pytest.mark.parametrize("mode", ["default", "sorted", "lazy"])
def test_concurrent_updates_and_lookups(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers churn 'moving' slots while fixed slots never change: a reader
    must always see every fixed slot right, and a moving slot only as one of
    the types it can have.  "sorted": never a flat copy; "lazy": readers make
    flat copies (as a read-mostly large cache does) all the time."""
    if mode != "default":
        monkeypatch.setattr(cache_module, "FLAT_LIMIT", 0)
    if mode == "lazy":
        monkeypatch.setattr(cache_module, "HOT_LIMIT", 2)
        monkeypatch.setattr(cache_module, "FLAT_AFTER", 0)
        monkeypatch.setattr(cache_module, "_memo_turn", itertools.repeat(True))
    c = MemtypeCache()
    c._set_load(8)  # many sublists: splits and merges race with the readers
    fixed = {i: MemoryType.CUDA if i % 2 else MemoryType.CUDA_MANAGED for i in range(0, SLOTS, 4)}
    for i, t in fixed.items():
        c.update(BASE + i * SLOT, SLOT // 2, t, 0)
    moving = [i for i in range(SLOTS) if i not in fixed]
    stop = threading.Event()
    errors: list[str] = []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible

    def writer(seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            i = int(rng.choice(moving))
            a = BASE + i * SLOT + int(rng.integers(0, SLOT // 2))
            n = int(rng.integers(1, SLOT // 2))
            if rng.random() < 0.6:
                c.update(a, n, MemoryType.CUDA_HOST, int(rng.integers(0, 2)))
            else:
                c.remove(a, n)

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        ptrs = np.array([BASE + i * SLOT + 16 for i in fixed], dtype=np.uint64)
        want = np.array([int(t) for t in fixed.values()], dtype=np.uint8)
        while not stop.is_set():
            for i, t in fixed.items():
                got = c.memory_type(BASE + i * SLOT + int(rng.integers(0, SLOT // 2)))
                if got is not t:
                    errors.append(f"slot {i}: {got}")
                r = c.lookup(BASE + i * SLOT, SLOT // 2)
                if r is None or r.mem_type is not t or r.size != SLOT // 2:
                    errors.append(f"lookup slot {i}: {r}")
            i = int(rng.choice(moving))
            got = c.memory_type(BASE + i * SLOT + int(rng.integers(0, SLOT)))
            if got not in (MemoryType.HOST, MemoryType.CUDA_HOST):
                errors.append(f"moving slot {i}: {got}")
            if not np.array_equal(c.memory_types(ptrs), want):
                errors.append("memory_types")

    try:
        threads = [threading.Thread(target=writer, args=(s,)) for s in (1, 2)]
        threads += [threading.Thread(target=reader, args=(s,)) for s in (3, 4, 5)]
        for t in threads:
            t.start()
        stop.wait(2.0)
        stop.set()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:10]
    # and the structure is still sound: regions disjoint and sorted
    regions = c.regions()
    assert all(a.end <= b.start for a, b in zip(regions, regions[1:]))
    assert all(c.memory_type(BASE + i * SLOT) is t for i, t in fixed.items())
