"""One process cache, in the core: what Python writes into
``memhook.cache.process_cache()`` a C transport's ``memhook_query`` sees,
what the core learns from an event Python's queries see without a drain of
their own, and ``process_cache()`` lists what the core holds.  (The hooks
are installed for the module's tests, as in the field, before they record anything:
they vouch for what the cache holds, origin HOOKS, and for HOST outside
it, whether or not an earlier test loaded and initialised a driver in this
process.)"""

from __future__ import annotations

import numpy as np
import pytest
from memhook_testing import hooks_installed_module  # noqa: F401
from native_cache_testing import ORIGIN_HOOKS, query, query_types

import memhook
from memhook import MemoryType, Region
from memhook._binding.core import lib
from memhook.hooks import hook_index

BASE = 0x7E40_0000_0000
SIZE = 1 << 20

pytestmark = pytest.mark.usefixtures("hooks_installed_module")


def test_a_write_from_python_is_what_c_reads() -> None:
    cache = memhook.cache.process_cache()
    cache.update(BASE, SIZE, MemoryType.CUDA_MANAGED, 1)
    try:
        rc, r = query(BASE + 100, 8)
        assert rc == 0
        assert (r.mem_type, r.device, r.base, r.size, r.origin) == \
            (int(MemoryType.CUDA_MANAGED), 1, BASE, SIZE, ORIGIN_HOOKS)
        assert r.alloc_id != 0
        assert memhook.memory_type(BASE + 100) is MemoryType.CUDA_MANAGED
        assert query_types(np.array([BASE, BASE + SIZE], dtype=np.uint64)).tolist() == \
            [int(MemoryType.CUDA_MANAGED), int(MemoryType.HOST)]
        cache.update(BASE + SIZE, SIZE, MemoryType.CUDA_MANAGED, 1)  # touching: one for lookups
        assert Region(BASE, 2 * SIZE, MemoryType.CUDA_MANAGED, 1) in cache.regions()
        assert query(BASE + SIZE - 1, 2)[1].mem_type == int(MemoryType.CUDA_MANAGED)
    finally:
        cache.remove(BASE, 2 * SIZE)
    assert query(BASE + 100)[1].mem_type == int(MemoryType.HOST)
    assert memhook.memory_type(BASE + 100) is MemoryType.HOST
    assert cache.lookup(BASE) is None


def test_an_event_reaches_c_and_python_at_once_without_a_flush() -> None:
    """An event recorded as a hook records it: memhook_query (C) and
    memhook.memory_type / lookup (Python) answer from it at once, with no
    drain of Python's own; a C query first and a Python one next see the
    same allocation (one cache, one alloc_id)."""
    alloc = hook_index("cuMemAlloc_v2")
    free = hook_index("cuMemFree_v2")
    address = BASE + 8 * SIZE
    assert lib.memhook_events_record(lib.MEMHOOK_EVENT_ALLOC, alloc, address, SIZE,
                                     lib.MEMHOOK_MEM_CUDA, 0, 0) == 0
    try:
        rc, r = query(address + 5)
        assert rc == 0 and r.mem_type == int(MemoryType.CUDA) and r.base == address
        assert memhook.memory_type(address + 5) is MemoryType.CUDA
        assert memhook.lookup(address + 5, 16) == Region(address, SIZE, MemoryType.CUDA, 0)
        again = query(address + SIZE - 1)[1]
        assert again.alloc_id == r.alloc_id
    finally:
        lib.memhook_events_record(lib.MEMHOOK_EVENT_FREE, free, address, SIZE,
                                  lib.MEMHOOK_MEM_CUDA, 0, 0)
    assert memhook.memory_type(address + 5) is MemoryType.HOST
    assert query(address + 5)[1].mem_type == int(MemoryType.HOST)
    memhook.flush()
