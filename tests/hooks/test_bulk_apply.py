"""The drain's bulk apply (memhook/_events/apply.py: apply_rows) leaves the cache
exactly as applying each event in turn (apply_row) does.

Random event streams over a small address window (so that exact reuse and
overlapping reuse are frequent): ALLOCs and FREEs of several sizes, failed
calls, size-0 events, FREEs of unknown size, skipped slots, driver-unload and
context-reset markers, malformed ranges past 2**64, and unknown type codes
and devices; replayed from the same random starting cache both ways, with
the cache's regions compared.  Also: an exception in the middle of a bulk
apply, and the rows from its progress mark applied again, give the same
cache too (what the drain's backlog relies on)."""

from __future__ import annotations

import functools
import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memhook import MemoryType, MemtypeCache, Region
from memhook._events import apply as _apply
from memhook._binding.core import lib
from memhook._events.layout import EVENT_DTYPE

ALLOC = int(lib.MEMHOOK_EVENT_ALLOC)
FREE = int(lib.MEMHOOK_EVENT_FREE)
SIZE_UNKNOWN = int(lib.MEMHOOK_EVENT_SIZE_UNKNOWN)
SKIPPED = int(lib.MEMHOOK_EVENT_SKIPPED)
UNLOADED = int(lib.MEMHOOK_EVENT_DRIVER_UNLOADED)
CONTEXT_RESET = int(lib.MEMHOOK_EVENT_CONTEXT_RESET)

BASE = 0x7F00_0000_0000
TOP = (1 << 64) - 256  # ranges near the end of the address space


def _row(kind: int, address: int, size: int, mem_type: int = 1, device: int = 0,
         result: int = 0, flags: int = 0) -> tuple[int, ...]:
    return (0, address, size, 0, kind, 1, mem_type, device, 1, 1, result, flags, 0)


SIZES = [64, 64, 128, 192, 256, 0]
TYPES = [1, 1, 2, 3, 4, 0, 7]  # 7: not a MemoryType code
DEVICES = [0, 0, 1, -1, -3]
sizes = st.sampled_from(SIZES)
types = st.sampled_from(TYPES)
devices = st.sampled_from(DEVICES)
# A call's fields other than its address (kind, size, type, device, result,
# flags): every combination of the fields' choices, drawn as one, is each
# field drawn on its own, with the same chances; one draw instead of six
# (drawing is most of this test's time, and a stream is up to 250 calls).
NOISY_CALLS = list(itertools.product([ALLOC, ALLOC, FREE, FREE, 0], SIZES, TYPES, DEVICES,
                                     [0, 0, 0, 0, 2], [0, 0, 0, 0, 0, SKIPPED]))
QUIET_CALLS = list(itertools.product([ALLOC, FREE], [64, 128, 192, 256], [1, 1, 2, 3], [0, 1],
                                     [0], [0]))
# (made once: a strategy made inside events() would be labelled again for
# every stream, which walks its whole list)
CALL_FIELDS = {True: st.sampled_from(NOISY_CALLS), False: st.sampled_from(QUIET_CALLS)}


@functools.lru_cache(maxsize=None)
def _addresses(spacing: int, slots: int) -> st.SearchStrategy[int]:
    """Three in four addresses one of the window's slots, one in four one of
    the four near 2**64 (each address of a kind equally likely)."""
    in_window = [BASE + spacing * k for k in range(slots)]
    near_top = [TOP + 64 * k for k in range(4)]
    return st.sampled_from(in_window * 12 + near_top * slots)


@st.composite
def events(draw):  # type: ignore[no-untyped-def]
    """A stream over a window of a few slots: dense (64 B apart: sizes up to
    256 overlap their neighbours) or sparse (1 KiB apart: events of one
    address, of several sizes, mostly alone), with a few slots near 2**64;
    quiet (successful ALLOCs and FREEs only) or noisy (failed calls, odd
    kinds, skipped slots, and barriers: FREEs of unknown size and markers)."""
    spacing = draw(st.sampled_from([64, 64, 1024]))
    slots = draw(st.sampled_from([4, 8, 32]))
    noisy = draw(st.booleans())
    addresses = _addresses(spacing, slots)

    def call_row(address: int, fields: tuple[int, ...]) -> tuple[int, ...]:
        kind, size, mem_type, device, result, flags = fields
        return _row(kind, address, size, mem_type, device, result, flags)

    call = st.builds(call_row, addresses, CALL_FIELDS[noisy])
    unknown_size_free = st.builds(lambda a: _row(FREE, a, 0, flags=SIZE_UNKNOWN), addresses)
    unloaded = st.just(_row(0, 0, 0, 4, -1, flags=UNLOADED))
    context_reset = st.builds(lambda d, r: _row(FREE, 0, 0, 4, d, result=r, flags=CONTEXT_RESET),
                              st.sampled_from([0, 1, -1]), st.sampled_from([0, 0, 1]))
    event = (st.one_of(*[call] * 30, unknown_size_free, unknown_size_free, unloaded,
                       context_reset) if noisy else call)
    # (hypothesis keeps lists short unless told: most streams here are long)
    return draw(st.one_of(st.lists(event, max_size=12),
                          st.lists(event, min_size=40, max_size=250),
                          st.lists(event, min_size=40, max_size=250)))


start = st.lists(st.tuples(st.integers(0, 15), st.integers(1, 4), types, devices), max_size=6)


def _cache(initial: list[tuple[int, int, int, int]]) -> MemtypeCache:
    cache = MemtypeCache()
    for k, n, t, d in initial:
        cache.update(BASE + 64 * k, 64 * n, MemoryType.UNKNOWN if t > 4 else t, max(d, -1))
    return cache


def _rows(stream: list[tuple[int, ...]]) -> np.ndarray:
    return np.array(stream, dtype=EVENT_DTYPE)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=events(), initial=start, bulk_min=st.sampled_from([1, 2, 16]))
def test_bulk_apply_leaves_the_cache_as_one_at_a_time(stream, initial, bulk_min) -> None:
    one, bulk = _cache(initial), _cache(initial)
    for row in stream:
        _apply.apply_row(one, row)
    saved = _apply.BULK_MIN
    _apply.BULK_MIN = bulk_min
    try:
        progress = [0]
        _apply.apply_rows(bulk, _rows(stream), progress)
    finally:
        _apply.BULK_MIN = saved
    assert bulk.regions() == one.regions()
    assert progress == [len(stream)]


class _Stop(BaseException):
    pass


class _CountingCache(MemtypeCache):
    """Counts writes; raises _Stop at write number ``stop_at`` (0: never)."""

    def __init__(self, stop_at: int = 0) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.stop_at = stop_at

    def _count(self, what: str) -> None:
        self.writes.append(what)
        if len(self.writes) == self.stop_at:
            raise _Stop

    def update(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self._count("update")
        super().update(*args, **kwargs)

    def remove(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self._count("remove")
        super().remove(*args, **kwargs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=events(), initial=start, stop_at=st.integers(1, 40))
def test_an_interrupted_bulk_apply_finishes_from_its_progress(stream, initial, stop_at) -> None:
    """A BaseException out of a cache write (a KeyboardInterrupt) leaves
    progress at a row from which applying again gives the same cache."""
    one = _cache(initial)
    for row in stream:
        _apply.apply_row(one, row)
    bulk = _CountingCache()
    for region in _cache(initial).regions():
        bulk.update(region.start, region.size, region.mem_type, region.device)
    bulk.writes.clear()
    bulk.stop_at = stop_at
    rows = _rows(stream)
    progress = [0]
    saved = _apply.BULK_MIN
    _apply.BULK_MIN = 2
    try:
        _apply.apply_rows(bulk, rows, progress)
    except _Stop:
        bulk.stop_at = 0
        _apply.apply_rows(bulk, rows[progress[0]:], [0])
    finally:
        _apply.BULK_MIN = saved
    assert bulk.regions() == one.regions()


def test_a_reused_address_reduces_to_its_last_event() -> None:
    """An allocator handing one address out and back 2,000 times: one cache
    write, not 4,000 (the point of the bulk path)."""
    cache = _CountingCache()
    rows = _rows([_row(ALLOC if i % 2 == 0 else FREE, BASE, 4096) for i in range(4000)]
                 + [_row(ALLOC, BASE + 8192, 64)])
    _apply.apply_rows(cache, rows, [0])
    assert sorted(cache.writes) == ["remove", "update"]
    assert cache.regions() == [Region(BASE + 8192, 64, MemoryType.CUDA, 0)]
