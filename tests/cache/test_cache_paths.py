"""The lookup paths of the cache, each checked against the plain sorted-list
answer: the memo (sampled), the flat copy of a small cache, the flat copy a
large cache makes once it is read-mostly, and the module-level queries,
which read the core's process cache."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest
from memhook_testing import hooks_installed  # noqa: F401

import memhook
import memhook.cache as cache_module
from memhook import MemoryType, MemtypeCache, Region

BASE = 0x7F00_0000_0000
KINDS = [MemoryType.CUDA, MemoryType.CUDA_MANAGED, MemoryType.CUDA_HOST]


@pytest.fixture
def memo_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fresh answer goes into the memo (no sampling)."""
    monkeypatch.setattr(cache_module, "_memo_turn", itertools.repeat(True))


@pytest.fixture
def process_cache_regions(hooks_installed: memhook.HookReport,
                          ) -> Iterator[list[tuple[int, int, MemoryType, int]]]:
    """The regions the test writes into the process cache, removed after it.
    They are written while the hooks are in, as the hooks would write them:
    the module-level queries answer from them, and memory in none is HOST,
    whether or not an earlier test initialised a driver in this process."""
    written: list[tuple[int, int, MemoryType, int]] = []
    try:
        yield written
    finally:
        for start, size, _, _ in written:
            cache_module.process_cache().remove(start, size)


def layout(n: int, seed: int = 1) -> list[tuple[int, int, MemoryType, int]]:
    rnd = random.Random(seed)
    out, addr = [], BASE
    for i in range(n):
        addr += rnd.randrange(1, 8) * 0x100  # a gap
        size = rnd.randrange(1, 16) * 0x100
        out.append((addr, size, KINDS[i % 3], i % 2))
        addr += size
    return out


def expected(regions: list[tuple[int, int, MemoryType, int]], ptr: int) -> MemoryType:
    for start, size, t, _ in regions:
        if start <= ptr < start + size:
            return t
    return MemoryType.HOST


def probes(regions: list[tuple[int, int, MemoryType, int]]) -> list[int]:
    """Every region's first, last and one-past-last byte, and some gap bytes."""
    out = [0, BASE - 1, (1 << 64) - 1]
    for start, size, _, _ in regions:
        out += [start - 1, start, start + size // 2, start + size - 1, start + size]
    return out


@pytest.mark.parametrize("n", [3, 64, 65, 500])
def test_memo_and_flat_paths_agree_with_the_regions(n: int, memo_always: None) -> None:
    regions = layout(n)
    c = MemtypeCache()
    for r in regions:
        c.update(*r)
    assert (c._flat[0] is not None) == (n <= cache_module.FLAT_LIMIT)
    for p in probes(regions) * 2:  # the second round meets the memo
        assert c.memory_type(p) is expected(regions, p), hex(p)
    assert len(c._flat[2]) <= c._flat[3]
    some = probes(regions)[:100]
    for p in some * 2:  # (the memo may be emptied once, as it fills, in the first round)
        assert c.memory_type(p) is expected(regions, p), hex(p)
    assert all(p in c._flat[2] for p in some)


def test_a_read_mostly_large_cache_gets_a_flat_copy_and_drops_it_at_a_write(
        monkeypatch: pytest.MonkeyPatch, memo_always: None) -> None:
    monkeypatch.setattr(cache_module, "HOT_LIMIT", 16)
    regions = layout(300)
    c = MemtypeCache()
    for r in regions:
        c.update(*r)
    assert c._flat[0] is None
    ptrs = probes(regions)
    for i, p in enumerate(ptrs):
        assert c.memory_type(p) is expected(regions, p), hex(p)
        # 16 memo entries take 16 x MEMO_SAMPLE lookups; 4 lookups per region make a copy
        fills = i // 16
        need = cache_module.FLAT_AFTER * len(regions) / (16 * cache_module.MEMO_SAMPLE)
        if fills < need:
            assert c._flat[0] is None, i
    assert c._flat[0] is not None  # the flat copy
    assert len(c._flat[2]) <= 16
    for p in ptrs:  # answered from it
        assert c.memory_type(p) is expected(regions, p), hex(p)
    # a write drops it, and the answers follow the write
    start, size, _, _ = regions[7]
    c.remove(start, size)
    assert c._flat[0] is None and not c._flat[2]
    del regions[7]
    for p in ptrs:
        assert c.memory_type(p) is expected(regions, p), hex(p)
    c.update(start, size, MemoryType.CUDA_MANAGED, 3)
    regions.insert(7, (start, size, MemoryType.CUDA_MANAGED, 3))
    for p in ptrs:
        assert c.memory_type(p) is expected(regions, p), hex(p)


@pytest.mark.parametrize("query", ["memory_type", "lookup"])
def test_a_full_memo_never_waits_for_the_lock(monkeypatch: pytest.MonkeyPatch,
                                              memo_always: None, query: str) -> None:
    """A reader whose memo fills while the lock is held - by another thread,
    or by its own thread's write a signal handler interrupted (a plain lock:
    its owner cannot take it again) - goes on: the memo is emptied, the flat
    copy waits for a fill when the lock is free."""
    monkeypatch.setattr(cache_module, "HOT_LIMIT", 16)
    regions = layout(300)
    c = MemtypeCache()
    for r in regions:
        c.update(*r)
    ask = getattr(c, query)
    ptrs = probes(regions)
    wrong: list[int] = []

    def reader() -> None:  # (a plain lock: another thread stands for the owner too)
        for p in ptrs * 3:  # (past the fills that would make a flat copy)
            got = ask(p)
            if (got if query == "memory_type" else
                    (MemoryType.HOST if got is None else got.mem_type)) is not expected(regions, p):
                wrong.append(p)
            if len(c._flat[2]) > 16:
                wrong.append(-1)

    assert c._lock.acquire(False)
    try:
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "a reader waited for the cache's lock"
        assert not wrong, wrong[:5]
        assert c._flat[0] is None  # (no copy while the lock is held)
    finally:
        c._lock.release()
    for p in ptrs:
        ask(p)
    assert c._flat[0] is not None  # the copy, at the next fill


def test_the_memo_is_sampled_and_a_repeated_pointer_gets_there() -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x1000, MemoryType.CUDA, 0)
    for _ in range(cache_module.MEMO_SAMPLE):  # one of these turns inserts
        assert c.memory_type(0x1800) is MemoryType.CUDA
    assert c._flat[2] == {0x1800: MemoryType.CUDA}
    c.update(0x1000, 0x1000, MemoryType.CUDA, 0)  # changes nothing: the memo stays
    assert c._flat[2] == {0x1800: MemoryType.CUDA}
    c.update(0x1800, 1, MemoryType.CUDA_HOST, 0)  # a change: a new memo
    assert c._flat[2] == {} and c.memory_type(0x1800) is MemoryType.CUDA_HOST


def test_regions_made_by_updates_are_plain_frozen_regions() -> None:
    import dataclasses
    c = MemtypeCache()
    c.update(0x1000, 0x100, MemoryType.CUDA_HOST, 2)
    (r,) = c.regions()
    assert type(r) is Region and r == Region(0x1000, 0x100, MemoryType.CUDA_HOST, 2)
    assert hash(r) == hash(Region(0x1000, 0x100, MemoryType.CUDA_HOST, 2))
    assert dataclasses.astuple(r) == (0x1000, 0x100, MemoryType.CUDA_HOST, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.start = 0  # type: ignore[misc]
    assert c.lookup(0x1080) is r


@pytest.mark.parametrize("n", [5, 500])
def test_module_level_queries_read_the_process_cache(
        n: int, process_cache_regions: list[tuple[int, int, MemoryType, int]]) -> None:
    """memhook.memory_type answers a region's type from the process cache
    and HOST for a pointer in no region (the hooks vouch for both); bad
    addresses are refused; a write is seen by the next query.  (Before the
    cache moved into the core this test stood in a hook layer of its own
    through set_hook_layer, which is gone.)"""
    cache = cache_module.process_cache()
    regions = layout(n)
    process_cache_regions.extend(regions)
    for r in process_cache_regions:
        cache.update(*r)
    ptrs = probes(regions)
    for round_ in range(3):
        for p in ptrs:
            want = expected(regions, p)
            assert cache_module.memory_type(p) is want, (round_, hex(p))
            assert cache.memory_type(p) is want, (round_, hex(p))
    with pytest.raises(ValueError, match="negative"):
        cache_module.memory_type(-1)
    with pytest.raises(ValueError, match="below 2"):
        cache_module.memory_type(1 << 64)
    with pytest.raises(TypeError, match="float"):
        cache_module.memory_type(float(regions[0][0]))
    start, size, _, _ = regions[1]
    cache.update(start, size, MemoryType.CUDA_MANAGED, 5)
    assert cache_module.memory_type(start) is MemoryType.CUDA_MANAGED
    assert cache_module.lookup(start) == Region(start, size, MemoryType.CUDA_MANAGED, 5)


def test_an_unknown_region_stays_unknown_with_no_driver_to_resolve_it() -> None:
    """With no driver loaded, memhook.memory_type has nothing to resolve an
    UNKNOWN region through: it answers UNKNOWN there, as the process cache
    does, and the other regions' types and HOST around it, in a small cache
    and a large one (its flat copy).  In a fresh child with no hooks and no
    driver: where a driver is loaded and initialised (an earlier test in
    the pytest process may have done so) it resolves UNKNOWN (DESIGN.md
    section 4)."""
    cases = {}
    for n in (5, 500):
        regions = layout(n)
        unknown = (regions[-1][0] + regions[-1][1] + 0x1000, 0x100, MemoryType.UNKNOWN, -1)
        want = [(p, int(expected(regions, p))) for p in probes(regions)]
        want += [(p, int(MemoryType.UNKNOWN)) for p in (unknown[0], unknown[0] + 0xFF)]
        cases[n] = ([(s, z, int(t), d) for s, z, t, d in [*regions, unknown]], want)
    script = textwrap.dedent(f"""
        import memhook.cache as cache_module
        from memhook import MemoryType, Region
        with open("/proc/self/maps") as maps:
            assert "libcuda.so" not in maps.read(), "a driver is loaded"
        cache = cache_module.process_cache()
        for n, (regions, want) in {cases!r}.items():
            for r in regions:
                cache.update(*r)
            for round_ in range(3):
                for p, t in want:
                    assert cache_module.memory_type(p) is MemoryType(t), (n, round_, hex(p))
                    assert cache.memory_type(p) is MemoryType(t), (n, round_, hex(p))
            start, size, _, _ = regions[-1]
            assert cache_module.lookup(start + 5) == Region(start, size, MemoryType.UNKNOWN, -1)
            for start, size, _, _ in regions:
                cache.remove(start, size)
        print("ALL OK")
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and "ALL OK" in proc.stdout, proc.stdout + proc.stderr


def test_module_level_batch_answers_while_another_thread_writes(
        process_cache_regions: list[tuple[int, int, MemoryType, int]]) -> None:
    """memhook.memory_types while another thread keeps writing the process
    cache elsewhere: every answer right, none waits for the writer (the
    core's readers take no lock)."""
    import numpy as np

    cache = cache_module.process_cache()
    regions = layout(50)
    process_cache_regions.extend(regions)
    for r in regions:
        cache.update(*r)
    ptrs = probes(regions)
    arr = np.array(ptrs, dtype=np.uint64)
    want = [int(expected(regions, p)) for p in ptrs]
    far = BASE + (1 << 40)
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            cache.update(far, 0x1000, MemoryType.CUDA, 0)
            cache.remove(far, 0x1000)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(50):
            assert cache_module.memory_types(arr).tolist() == want
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()


def test_a_write_on_a_thread_inside_the_cache_is_refused_not_deadlocked() -> None:
    """A signal handler that interrupted this thread inside a cache (its
    lock held: a snapshot being copied, a write being planned) and writes
    to the same cache gets a RuntimeError, not a wait for its own thread for
    ever (the process cache's drain does not apply there at all).  In a
    child, so that the old deadlock fails the test instead of hanging it."""
    script = textwrap.dedent("""
        import signal, time
        from memhook import MemoryType, MemtypeCache
        cache = MemtypeCache()
        for i in range(20000):
            cache.update(0x10000 + 0x2000 * i, 0x1000, MemoryType.CUDA)
        outcome = {"refused": 0, "written": 0}
        def handler(signum, frame):
            try:
                cache.update(0x7000_0000_0000, 0x1000, MemoryType.CUDA_HOST)
                cache.remove(0x7000_0000_0000, 0x1000)
                outcome["written"] += 1
            except RuntimeError as exc:
                assert "signal handler" in str(exc), exc
                outcome["refused"] += 1
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, 1e-4, 1e-4)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not outcome["refused"]:
            cache.regions()  # (holds the lock while it copies: the handler lands there)
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        assert outcome["refused"], outcome
        assert len(cache) == 20000 and cache.lookup(0x7000_0000_0000) is None
        print("ALL OK", outcome)
        """)
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("a write nested in the same cache waited for its own thread")
    assert proc.returncode == 0 and "ALL OK" in proc.stdout, proc.stdout + proc.stderr
