"""memory_type's and lookup's C fast paths (csrc/pyext/query_fast.c, armed
by memhook._query): they answer only what the Python path would, and never
from a state of the cache that a write, a pending event, an apply under
way, a new install epoch or a newly loaded object has made old (issue 25).

Each test first "warms" the path - asks enough times that the Python path
hands the C one a snapshot - and checks that the C path is the one
answering, so what follows tests it and not the Python path behind it."""

from __future__ import annotations

import queue
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from hooks_api_testing import ALLOC, FREE, WINDOW, clean_events, record  # noqa: F401

import memhook
from memhook import MemoryType, Region, _drain, _query
from memhook.cache import process_cache

pytestmark = pytest.mark.usefixtures("clean_events")

M = MemoryType
A = WINDOW + 0x2000_0000
SIZE = 1 << 20


def warm(ptr: int, want: MemoryType) -> None:
    """Ask until the C path answers ``ptr`` itself, and check that it does."""
    for _ in range(_query.FAST_AFTER + 2):
        assert memhook.memory_type(ptr) is want
    assert _query._fast_type(ptr) is want, "the C fast path did not take over"


def warm_region(ptr: int, size: int = 1) -> Region | None:
    """Look up until the C path answers ``[ptr, ptr + size)`` itself; its answer."""
    want = memhook.lookup(ptr, size)
    for _ in range(_query.FAST_AFTER + 2):
        assert memhook.lookup(ptr, size) == want
    got = _query._fast_region(ptr, size)
    assert got is not False, "the C lookup path did not take over"
    assert got == want
    return got


def test_the_c_path_answers_a_region_and_declines_what_it_cannot_vouch_for() -> None:
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    warm(A + 100, M.CUDA)
    assert _query._fast_type(A + SIZE - 1) is M.CUDA
    # In no region, with no hooks installed here: not vouched for - the
    # Python path asks the driver (none is loaded: HOST).
    assert _query._fast_type(A + SIZE) is None
    assert memhook.memory_type(A + SIZE) is M.HOST
    # Not a plain int, or not an address: the Python path answers or says why.
    for odd in (True, -1, 1 << 64, np.uint64(A), float(A)):
        assert _query._fast_type(odd) is None
    assert memhook.memory_type(np.uint64(A)) is M.CUDA
    with pytest.raises(ValueError, match="negative"):
        memhook.memory_type(-1)


def test_a_recorded_free_or_alloc_is_seen_at_once() -> None:
    """The snapshot is of the state before the event: the pending flag makes
    the C path decline, and the query drains."""
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    warm(A + 1, M.CUDA)
    warm_region(A + 1)
    record(FREE, "cuMemFree_v2", A, SIZE, M.CUDA, 0)
    assert _query._fast_type(A + 1) is None  # an event is pending
    assert _query._fast_region(A + 1, 1) is False
    assert memhook.memory_type(A + 1) is M.HOST
    record(ALLOC, "cuMemAllocManaged", A + 4 * SIZE, SIZE, M.CUDA_MANAGED, 0)
    assert memhook.memory_type(A + 4 * SIZE + 7) is M.CUDA_MANAGED


def test_a_region_handed_over_by_another_thread_is_cuda_at_once() -> None:
    """Goal 5: another thread records the allocation (as its hook would)
    and hands the pointer over; the receiver's first query is CUDA, and
    after the other thread's free and hand-over, HOST - with the C path
    warm on a neighbour region throughout."""
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    warm(A, M.CUDA)
    handed: queue.Queue[tuple[str, int]] = queue.Queue()
    rounds = 300

    def other() -> None:
        for i in range(rounds):
            p = A + (2 + i % 7) * SIZE
            record(ALLOC, "cuMemAlloc_v2", p, SIZE, M.CUDA, 0)
            handed.put(("alloc", p))
            handed.join()  # (asked about before it is freed)
            record(FREE, "cuMemFree_v2", p, SIZE, M.CUDA, 0)
            handed.put(("free", p))
            handed.join()

    thread = threading.Thread(target=other)
    thread.start()
    wrong = []
    for _ in range(2 * rounds):
        what, p = handed.get(timeout=60)
        got = memhook.memory_type(p + 64)
        want = M.CUDA if what == "alloc" else M.HOST
        if got is not want:
            wrong.append((what, hex(p), got))
        # Between hand-overs the C path serves the warm region again.
        assert memhook.memory_type(A) is M.CUDA
        handed.task_done()
    thread.join(60)
    assert not wrong, wrong[:10]
    warm(A, M.CUDA)


def test_an_apply_under_way_makes_it_decline(monkeypatch: pytest.MonkeyPatch) -> None:
    """_quiet False: events were taken out of the core and are not all in
    the cache yet (another thread applies them): not answered from C."""
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    warm(A + 1, M.CUDA)
    region = warm_region(A + 1)
    monkeypatch.setattr(_drain, "_quiet", False)
    assert _query._fast_type(A + 1) is None
    assert _query._fast_region(A + 1, 1) is False
    monkeypatch.setattr(_drain, "_quiet", True)
    assert _query._fast_type(A + 1) is M.CUDA
    assert _query._fast_region(A + 1, 1) is region


def test_a_write_to_the_cache_drops_the_snapshot() -> None:
    """A write by hand (no event): the published state is replaced, so the
    C path declines until it is handed a snapshot of the new one."""
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    warm(A + 1, M.CUDA)
    warm_region(A + 1)
    process_cache().update(A + 8 * SIZE, SIZE, M.CUDA_HOST)
    assert _query._fast_type(A + 1) is None
    assert _query._fast_region(A + 1, 1) is False
    warm(A + 8 * SIZE, M.CUDA_HOST)
    process_cache().remove(A, SIZE)
    assert _query._fast_type(A + 1) is None
    assert memhook.memory_type(A + 1) is M.HOST
    process_cache().update(A, SIZE, M.CUDA_MANAGED, 1)
    assert memhook.memory_type(A + 1) is M.CUDA_MANAGED


def test_a_swapped_process_cache_or_a_stand_in_hook_layer_is_not_read_from_c(
        monkeypatch: pytest.MonkeyPatch) -> None:
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    warm(A + 1, M.CUDA)
    warm_region(A + 1)
    monkeypatch.setattr(_query, "_process_cache", memhook.MemtypeCache())
    assert _query._fast_type(A + 1) is None
    assert _query._fast_region(A + 1, 1) is False
    assert memhook.lookup(A + 1) is None  # (what the other cache holds)
    assert memhook.memory_type(A + 1) is M.HOST  # (what the other cache holds)
    monkeypatch.undo()
    warm(A + 1, M.CUDA)
    saved = _query._drain, _query._coverage_complete
    drains: list[int] = []
    _query.set_hook_layer(lambda: drains.append(1), lambda: True)
    try:
        for _ in range(_query.FAST_AFTER + 2):
            assert memhook.memory_type(A + 1) is M.CUDA
        assert _query._fast_type(A + 1) is None  # it cannot call a stand-in's drain
        assert len(drains) == _query.FAST_AFTER + 2
    finally:
        _query.set_hook_layer(*saved)
    warm(A + 1, M.CUDA)


@pytest.mark.parametrize("mode", ["bistro", "reloc", "bistro,reloc"])
def test_installed_hooks_host_answers_and_hand_over(native, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    mode: str) -> None:
    """Through install() and the simulator's real hooks: a host pointer is
    answered HOST from C while the coverage memo vouches, not after a new
    install epoch or an object loaded since (the core's token moves); a
    region another thread allocates and hands over is CUDA at once, and
    HOST once it frees it and says so."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""\
        import ctypes, os, queue, threading
        import numpy as np
        import memhook
        import memhook.sim
        from memhook import MemoryType as M, _coverage, _query
        report = memhook.install({mode!r})  # before the driver loads, as the bench does
        cu = memhook.sim.activate()
        def ok(rc):
            assert rc == 0, rc
        ok(cu.cuInit(0))
        dev = ctypes.c_int()
        ok(cu.cuDeviceGet(ctypes.byref(dev), 0))
        ctx = ctypes.c_void_p()
        ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        ok(cu.cuCtxSetCurrent(ctx))
        assert memhook.status().coverage_complete, memhook.status()
        def alloc():
            p = ctypes.c_uint64()
            ok(cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 16))
            return p.value
        keep = [alloc() for _ in range(100)]
        host = np.zeros(1 << 16, dtype=np.uint8)
        h = host.ctypes.data + 100
        def warm(p, want):
            for _ in range(_query.FAST_AFTER + 2):
                assert memhook.memory_type(p) is want
            assert _query._fast_type(p) is want, (hex(p), want)
        warm(h, M.HOST)
        warm(keep[3] + 5, M.CUDA)
        def holds(region, p):  # (neighbouring allocations merge into one region)
            return region is not None and region.mem_type is M.CUDA and \
                region.start <= p and p + 16 <= region.start + region.size
        for _ in range(_query.FAST_AFTER + 2):
            assert memhook.lookup(h) is None and holds(memhook.lookup(keep[3] + 5), keep[3])
        assert _query._fast_region(h, 1) is None           # vouched-for host memory, from C
        assert holds(_query._fast_region(keep[3] + 5, 8), keep[3])
        _coverage.invalidate()                     # as install()/uninstall() do
        assert _query._fast_type(h) is None
        warm(h, M.HOST)
        ctypes.CDLL(os.path.join(memhook.sim.library_dir(), "libcudart.so.13"))  # loaded now
        assert _query._fast_type(h) is None        # the loader's count moved
        assert memhook.memory_type(h) is M.HOST
        warm(h, M.HOST)
        handed = queue.Queue()
        def other():
            ok(cu.cuCtxSetCurrent(ctx))
            for _ in range(200):
                p = alloc()
                handed.put(("alloc", p))
                assert handed.join() is None
                ok(cu.cuMemFree_v2(ctypes.c_uint64(p)))
                handed.put(("free", p))
                handed.join()                      # (the next may reuse the address)
        t = threading.Thread(target=other)
        t.start()
        wrong = []
        for _ in range(400):
            what, p = handed.get(timeout=60)
            got = memhook.memory_type(p + 8)
            if got is not (M.CUDA if what == "alloc" else M.HOST):
                wrong.append((what, hex(p), got))
            region = memhook.lookup(p + 8, 8)
            if not (holds(region, p) if what == "alloc" else region is None):
                wrong.append(("lookup " + what, hex(p), region))
            assert memhook.memory_type(keep[3] + 5) is M.CUDA
            assert holds(memhook.lookup(keep[3] + 5), keep[3])
            handed.task_done()
        t.join(60)
        assert not wrong, wrong[:5]
        for p in keep:
            ok(cu.cuMemFree_v2(ctypes.c_uint64(p)))
        memhook.uninstall()
        assert _query._fast_type(h) is None        # no hooks: HOST is the driver's to say
        assert _query._fast_region(h, 1) is False
        print("ALL OK")
        """))
    proc = subprocess.run([sys.executable, str(script)], env=native.env(), capture_output=True,
                          text=True, timeout=180, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ALL OK"), (
        f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")


def cache_of_every_kind(n: int, rnd: random.Random) -> tuple[memhook.MemtypeCache,
                                                               list[tuple[int, int]]]:
    """The process cache with n regions of every kind, sizes 1 byte to 64 KiB,
    with gaps and touching neighbours (a region every fourth is UNKNOWN); a
    large one (past FLAT_LIMIT) given its flat copy.  The cache and the
    (start, size) of each region as written."""
    cache = process_cache()
    kinds = [M.CUDA, M.CUDA_MANAGED, M.CUDA_HOST, M.UNKNOWN]
    addr, regions = A, []
    for i in range(n):
        size = rnd.choice([1, 2, 4096, 1 << 16])
        regions.append((addr, size))
        cache.update(addr, size, kinds[i % len(kinds)], i % 3)
        addr += size + rnd.choice([0, 1, 64, 1 << 20])
    if n > memhook.cache.FLAT_LIMIT:  # the Python path makes its flat copy once read-mostly
        # (as if it had answered FLAT_AFTER lookups a region since its last write)
        cache._quiet = (cache._version, memhook.cache.FLAT_AFTER * len(cache))
        cache._memo_full(cache._flat)
        assert cache._flat[0] is not None
    return cache, regions


@pytest.mark.parametrize("n", [1, 3, 17, 64, 65, 1000])
def test_the_c_search_agrees_with_the_cache_at_every_bound(n: int) -> None:
    """Regions of every kind with gaps and touching neighbours: at each
    region's first and last byte, one byte either side and a random byte
    inside, the C path's answer (where it gives one) is the sorted list's.
    The counts straddle the search's block of 16 bounds and FLAT_LIMIT."""
    rnd = random.Random(n)
    cache, regions = cache_of_every_kind(n, rnd)
    warm(regions[0][0], cache.memory_type(regions[0][0]))
    answered = 0
    for start, size in regions:
        for p in (start - 1, start, start + 1, start + rnd.randrange(size), start + size - 1,
                  start + size):
            got = _query._fast_type(p)
            if got is not None:
                answered += 1
                assert got is cache.memory_type(p), (hex(p), got)
    assert answered >= len(regions) * 3  # (in no region: not vouched here, so not answered)


def test_the_c_lookup_gives_the_caches_own_region_and_declines_the_rest() -> None:
    """lookup's C path: the Region object the cache holds, for a range
    inside one region; False (the Python path answers) for a range that
    leaves it, an UNKNOWN region, host memory not vouched for, and anything
    not a plain int address and size of at least one byte."""
    cache = process_cache()
    cache.update(A, SIZE, M.CUDA, 0)
    cache.update(A + SIZE, SIZE, M.CUDA_HOST, -1)        # touching, another type
    cache.update(A + 4 * SIZE, SIZE, M.UNKNOWN, -1)
    region = warm_region(A + 10, 100)
    assert region is cache.regions()[0] or region == cache.regions()[0]
    assert region == Region(A, SIZE, M.CUDA, 0)
    assert _query._fast_region(A, SIZE) == region          # the whole region
    assert _query._fast_region(A + SIZE - 1, 1) == region
    assert _query._fast_region(A + SIZE, 1) == Region(A + SIZE, SIZE, M.CUDA_HOST, -1)
    assert _query._fast_region(A + SIZE - 1, 2) is False   # straddles two regions
    assert memhook.lookup(A + SIZE - 1, 2) == Region(A + SIZE - 1, 2, M.UNKNOWN, -1)
    assert _query._fast_region(A + 2 * SIZE - 1, 2) is False  # a region and a gap
    assert _query._fast_region(A + 4 * SIZE + 1, 1) is False  # UNKNOWN: the driver is asked
    assert _query._fast_region(A + 3 * SIZE, 1) is False   # a gap, not vouched for here
    for ptr, size in ((True, 1), (A, True), (A, 0), (-1, 1), (1 << 64, 1), (A, -1),
                      (np.uint64(A), 1), (A, np.int64(1)), ((1 << 64) - 1, 2), (float(A), 1)):
        assert _query._fast_region(ptr, size) is False, (ptr, size)
    assert memhook.lookup(np.uint64(A + 1), np.int64(4)) == region
    with pytest.raises(ValueError):
        memhook.lookup(A, 0)
    with pytest.raises(ValueError):
        memhook.lookup((1 << 64) - 1, 2)


def test_lookups_alone_hand_a_large_cache_to_the_c_path() -> None:
    """A cache of more regions than FLAT_LIMIT gets its flat copy (and then
    the C snapshot) from lookups too, not only from memory_type."""
    cache = process_cache()
    n = 4 * memhook.cache.FLAT_LIMIT
    for i in range(n):
        cache.update(A + 2 * i * 4096, 4096, M.CUDA, 0)
    assert cache._flat[0] is None  # (no flat copy after a write to a large cache)
    # Distinct pointers (a memo of them fills, which is what counts lookups):
    # enough to fill it twice and to pass FLAT_AFTER lookups a region.
    asks = max(2 * memhook.cache.HOT_LIMIT * memhook.cache.MEMO_SAMPLE,
               (memhook.cache.FLAT_AFTER + 1) * n)
    ptrs = [A + 2 * (i % n) * 4096 + (i // n) % 4096 for i in range(asks)]
    for p in ptrs:
        assert memhook.lookup(p).start == p - (p - A) % (2 * 4096)
    assert cache._flat[0] is not None, "lookups never gave the cache its flat copy"
    warm_region(ptrs[0])


@pytest.mark.parametrize("n", [1, 3, 17, 64, 65, 1000])
def test_the_c_lookup_agrees_with_the_cache_at_every_bound(n: int) -> None:
    """As the search test above, for lookup: single bytes and ranges around
    every region's ends, where the C path answers, answer as the cache's."""
    rnd = random.Random(1000 + n)
    cache, regions = cache_of_every_kind(n, rnd)
    first = next(s for (s, _), k in zip(regions, range(n)) if k % 4 != 3)
    warm_region(first)
    answered = 0
    for start, size in regions:
        for p, m in ((start - 1, 1), (start, 1), (start, size), (start - 1, 2),
                     (start + size - 1, 1), (start + size - 1, 2), (start + size, 1),
                     (start + rnd.randrange(size), 1)):
            got = _query._fast_region(p, m)
            if got is not False:
                answered += 1
                assert got == cache.lookup(p, m), (hex(p), m, got)
    assert answered >= len(regions) * 2
