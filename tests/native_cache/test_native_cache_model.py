"""The core's cache against memhook.MemtypeCache, the reference (hypothesis).

Random event streams - allocations of every type over each other (exact and
overlapping reuse), frees of any range (a thread freeing what another
allocated is, in the one drained order, just a FREE), frees of unknown size,
failed calls, context-reset markers of one device or of none, the driver
unloading, hooks-gap markers, and remembered driver answers - go, in random
batches, into a native test cache (memhook_testing_cache_apply: the feed
the drain calls) and, event by event, into a MemtypeCache through
memhook._events.apply.apply_row (what Python's drain does).  After every batch
every answer is compared: lookup of every byte and of ranges that
straddle, the batch types, and the map of regions (the native cache keeps
allocations apart; merged by (type, device) they must be the reference's
regions).

A hooks-gap marker (the hooks stopped, or started again) is where the two
differ in form and agree in meaning.  The reference marks every region
UNKNOWN; the native cache keeps each region's type, and what it learned
before the gap is no longer vouched for, as the install period it was
learned in has ended (csrc/cuda/install.c ends the period at the stop and
opens a new one at the restart; the test cache is told both with
memhook_testing_cache_hooks).
Both mean "ask the driver", so a native answer the hooks no longer vouch
for is compared as UNKNOWN on no device."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from native_cache_testing import (FOUND_ABSENT, FOUND_IN, FOUND_MIXED, FOUND_RUN,
                                  ORIGIN_UNKNOWN, NativeCache, NativeRegion)

from memhook import MemoryType, MemtypeCache, Region
from memhook._events.apply import apply_row
from memhook._events.layout import EVENT_DTYPE

BASE = 0x7F00_0000_0000
SPACE = 96
ALLOC, FREE = 1, 2
SIZE_UNKNOWN, UNLOADED, CONTEXT_RESET, HOOKS_GAP = 0x1, 0x4, 0x8, 0x10
TYPES = [int(t) for t in MemoryType]  # (HOST too: an event may carry any code)

_offset = st.integers(0, SPACE - 1)
_device = st.sampled_from([-1, 0, 1])


@st.composite
def _event(draw: st.DrawFn) -> tuple:
    """(address, size, kind, mem_type, device, result, flags) or ("remember", ...)."""
    what = draw(st.sampled_from(["alloc"] * 5 + ["free"] * 4 + ["free_unknown", "failed",
                                                                 "reset", "unload", "gap",
                                                                 "remember"]))
    s = draw(_offset)
    n = draw(st.integers(1, SPACE - s))
    if what == "alloc":
        return (BASE + s, n, ALLOC, draw(st.sampled_from(TYPES)), draw(_device), 0, 0)
    if what == "free":
        return (BASE + s, n, FREE, 0, -1, 0, 0)
    if what == "free_unknown":
        return (BASE + s, 0, FREE, 0, -1, 0, SIZE_UNKNOWN)
    if what == "failed":
        return (BASE + s, n, draw(st.sampled_from([ALLOC, FREE])), 1, 0, 2, 0)
    if what == "reset":
        return (0, 0, FREE, 0, draw(_device), draw(st.sampled_from([0, 0, 0, 201])),
                CONTEXT_RESET)
    if what == "unload":
        return (0, 0, 0, 0, -1, 0, UNLOADED)
    if what == "gap":
        return (0, 0, 0, 0, -1, 0, HOOKS_GAP)
    return ("remember", BASE + s, n, draw(st.sampled_from(TYPES[1:])), draw(_device))


def _rows(events: list[tuple]) -> np.ndarray:
    rows = np.zeros(len(events), dtype=EVENT_DTYPE)
    for i, (address, size, kind, mem_type, device, result, flags) in enumerate(events):
        rows[i]["seq"] = i + 1
        rows[i]["address"] = address
        rows[i]["size"] = size
        rows[i]["kind"] = kind
        rows[i]["mem_type"] = mem_type
        rows[i]["device"] = device
        rows[i]["result"] = result
        rows[i]["flags"] = flags
    return rows


def _merged(regions: list[NativeRegion]) -> list[Region]:
    """The native regions as a merging cache holds them."""
    out: list[Region] = []
    for r in regions:
        if out and out[-1].start + out[-1].size == r.base and \
                out[-1].mem_type == r.mem_type and out[-1].device == r.device:
            last = out.pop()
            out.append(Region(last.start, last.size + r.size, last.mem_type, last.device))
        else:
            out.append(Region(r.base, r.size, MemoryType(r.mem_type), r.device))
    return out


def _unvouched(kind: int, got: NativeRegion) -> bool:
    """A region (or run) whose type the hooks no longer vouch for: learned
    before a hooks gap.  The query asks the driver, as for UNKNOWN."""
    return kind in (FOUND_IN, FOUND_RUN) and got.origin == ORIGIN_UNKNOWN and \
        got.mem_type != MemoryType.UNKNOWN


def _as_answered(native: NativeCache, regions: list[NativeRegion]) -> list[NativeRegion]:
    """The native regions with those the hooks no longer vouch for as
    UNKNOWN on no device (what the reference holds for them)."""
    return [replace(r, mem_type=int(MemoryType.UNKNOWN), device=-1)
            if _unvouched(*native.lookup(r.base, 1)) else r for r in regions]


def _compare(native: NativeCache, ref: MemtypeCache) -> None:
    regions = native.regions()
    assert _merged(_as_answered(native, regions)) == ref.regions()
    for a, b in zip(regions, regions[1:]):
        assert a.base + a.size <= b.base, "regions overlap"
    ptrs = np.arange(BASE - 2, BASE + SPACE + 2, dtype=np.uint64)
    types = [int(MemoryType.UNKNOWN) if _unvouched(*native.lookup(p, 1)) else t
             for p, t in zip(ptrs.tolist(), native.types(ptrs).tolist())]
    assert types == ref.memory_types(ptrs).tolist()
    for p in range(BASE - 1, BASE + SPACE + 1):
        for n in (1, 2, 7, 33):
            kind, got = native.lookup(p, n)
            want = ref.lookup(p, n)
            where = f"[{p - BASE}, +{n})"
            if _unvouched(kind, got):
                # (the driver's to answer: the range lies in what the native
                # cache holds, and the reference has it UNKNOWN)
                assert want is not None and (want.mem_type, want.device) == (
                    MemoryType.UNKNOWN, -1), (where, got, want)
                assert got.base <= p and p + n <= got.base + got.size, (where, got)
                continue
            if want is None:
                assert kind == FOUND_ABSENT, (where, kind, got)
                assert got.mem_type == MemoryType.HOST
                continue
            assert kind != FOUND_ABSENT, (where, want)
            assert (got.mem_type, got.device) == (want.mem_type, want.device), (where, got, want)
            if kind == FOUND_MIXED:
                assert (got.base, got.size, got.alloc_id) == (p, n, 0), where
                continue
            # The answer's extent holds the range and lies within the
            # reference's (merged) region.
            assert got.base <= p and p + n <= got.base + got.size, (where, got)
            assert want.start <= got.base and got.base + got.size <= want.start + want.size, \
                (where, got, want)
            if kind == FOUND_IN:
                assert got.alloc_id != 0, where
            else:
                assert kind == FOUND_RUN, kind


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_event(), min_size=1, max_size=12), min_size=1, max_size=6))
def test_native_cache_answers_as_memtypecache(batches: list[list[tuple]]) -> None:
    ref = MemtypeCache()
    with NativeCache() as native:
        native.hooks(installed=True, coverage=True)
        for batch in batches:
            # Events go in batches (one merge each); a remembered driver
            # answer is a write of its own between them, and so is a hooks
            # gap (the stop or restart ends the install period, after what
            # it recorded is applied).
            run: list[tuple] = []
            for ev in [*batch, None]:
                if ev is not None and ev[0] != "remember" and not ev[6] & HOOKS_GAP:
                    run.append(ev)
                    continue
                if ev is not None and ev[0] != "remember":
                    run.append(ev)  # (the marker: nothing to the native feed)
                if run:
                    rows = _rows(run)
                    native.apply(rows)
                    for row in rows.tolist():
                        apply_row(ref, tuple(row))
                    run = []
                if ev is None:
                    continue
                if ev[0] == "remember":
                    _, base, size, mem_type, device = ev
                    native.remember(base, size, mem_type, device)
                    ref.update(base, size, MemoryType(mem_type), device)
                else:  # the stop ends the install period, the restart opens one
                    native.hooks(installed=False, coverage=False)
                    native.hooks(installed=True, coverage=True)
            _compare(native, ref)


def _alloc(address: int, size: int, mem_type: int = 1, device: int = 0) -> tuple:
    return (address, size, ALLOC, mem_type, device, 0, 0)


def _free(address: int, size: int) -> tuple:
    return (address, size, FREE, 0, -1, 0, 0)


def test_alloc_ids_are_per_allocation_and_survive_a_partial_unmap() -> None:
    with NativeCache() as c:
        c.apply(_rows([_alloc(BASE, 64), _alloc(BASE + 64, 64)]))  # touching, same type+device
        _, a = c.lookup(BASE, 1)
        _, b = c.lookup(BASE + 64, 1)
        assert a.alloc_id and b.alloc_id and a.alloc_id != b.alloc_id
        assert (a.base, a.size, b.base, b.size) == (BASE, 64, BASE + 64, 64)
        kind, run = c.lookup(BASE + 60, 8)  # spans both: one type and device, no one id
        assert (kind, run.mem_type, run.device, run.alloc_id) == (FOUND_RUN, 1, 0, 0)
        c.apply(_rows([_free(BASE + 16, 16)]))  # a hole in the first
        _, left = c.lookup(BASE, 1)
        _, right = c.lookup(BASE + 40, 1)
        assert left.alloc_id == right.alloc_id == a.alloc_id
        c.apply(_rows([_free(BASE, 64), _alloc(BASE, 64)]))  # exact reuse
        _, again = c.lookup(BASE, 1)
        assert again.alloc_id not in (0, a.alloc_id, b.alloc_id)


def test_vouching_follows_install_periods_and_coverage() -> None:
    with NativeCache() as c:
        c.hooks(installed=True, coverage=True)
        c.apply(_rows([_alloc(BASE, 64)]))
        c.remember(BASE + 128, 64, 1, 0)
        assert c.lookup(BASE, 1)[1].origin == 1             # learned from hooks: vouched
        assert c.lookup(BASE + 128, 1)[1].origin == 1       # driver answer, frees covered
        c.hooks(installed=True, coverage=False)
        assert c.lookup(BASE, 1)[1].origin == 1             # hooks still see its free
        assert c.lookup(BASE + 128, 1)[1].origin == 0       # a free may go unseen
        c.hooks(installed=False, coverage=False)            # uninstall: the period ends
        assert c.lookup(BASE, 1)[1].origin == 0
        c.hooks(installed=True, coverage=True)              # reinstall: a new period
        assert c.lookup(BASE, 1)[1].origin == 0             # learned before: not vouched
        assert c.lookup(BASE, 1)[1].mem_type == 1           # (what it holds, to re-verify)
        c.apply(_rows([_alloc(BASE + 256, 64)]))
        assert c.lookup(BASE + 256, 1)[1].origin == 1       # this period's: vouched
        c.remember(BASE, 64, 1, 0)                          # re-verified by the driver
        assert c.lookup(BASE, 1)[1].origin == 1


def test_a_context_reset_marks_its_device_unknown_in_event_order() -> None:
    reset0 = (0, 0, FREE, 0, 0, 0, CONTEXT_RESET)
    with NativeCache() as c:
        c.hooks(installed=True, coverage=True)
        c.apply(_rows([_alloc(BASE, 64, 1, 0), _alloc(BASE + 64, 64, 1, 1), reset0,
                       _alloc(BASE + 128, 64, 1, 0)]))
        assert c.lookup(BASE, 1)[1].mem_type == MemoryType.UNKNOWN
        assert c.lookup(BASE, 1)[1].origin == 0             # UNKNOWN: the driver decides
        assert c.lookup(BASE + 64, 1)[1].mem_type == MemoryType.CUDA
        assert c.lookup(BASE + 128, 1)[1].mem_type == MemoryType.CUDA  # after the marker


def test_a_large_map_answers_as_memtypecache() -> None:
    """Thousands of regions (the search's upper levels then run over an
    index of blocks, and the batch's lanes all run): random allocations,
    overlapping reuse and frees over a wide space, in a few batches, then
    every answer of 40,000 random pointers, single and batched, and of
    the same in ascending runs."""
    rng = np.random.default_rng(34)
    space = 1 << 24
    ref = MemtypeCache()
    with NativeCache() as native:
        for _ in range(4):
            events = []
            for _ in range(3000):
                start = int(rng.integers(0, space - 4096))
                size = int(rng.integers(1, 4096))
                if rng.random() < 0.7:
                    events.append(_alloc(BASE + start, size, int(rng.integers(1, 4)),
                                         int(rng.integers(-1, 2))))
                else:
                    events.append(_free(BASE + start, size))
            rows = _rows(events)
            native.apply(rows)
            for row in rows.tolist():
                apply_row(ref, tuple(row))
            ptrs = (BASE + rng.integers(-64, space + 64, size=40_000)).astype(np.uint64)
            assert native.types(ptrs).tolist() == ref.memory_types(ptrs).tolist()
            # In order (the batch then walks the regions instead of
            # searching), dense and sparse (steps past several regions),
            # and in runs that go back down.
            ordered = np.sort(ptrs)
            for some in (ordered, ordered[::37], np.concatenate([ordered[::5], ordered[3::5]])):
                assert native.types(some).tolist() == ref.memory_types(some).tolist()
            for p in ptrs[:2000].tolist():
                kind, got = native.lookup(p, 1)
                want = ref.lookup(p, 1)
                assert (kind == FOUND_ABSENT) == (want is None), (p, kind, want)
                if want is not None:
                    assert (got.mem_type, got.device) == (want.mem_type, want.device), p
        assert len(native.regions()) > 2 * 16


def test_a_free_of_unknown_size_keeps_to_its_install_period() -> None:
    """A FREE of unknown size demotes the run at its address - of regions
    learned in its own install period: one learned before a hooks gap is
    UNKNOWN to the reference, so it cannot join a new allocation's run
    (hypothesis found the native cache demoting the new one with it)."""
    ref = MemtypeCache()
    with NativeCache() as native:
        native.hooks(installed=True, coverage=True)
        for ev in [_alloc(BASE, 2, mem_type=1), (0, 0, 0, 0, -1, 0, HOOKS_GAP)]:
            rows = _rows([ev])
            native.apply(rows)
            apply_row(ref, tuple(rows.tolist()[0]))
        native.hooks(installed=False, coverage=False)
        native.hooks(installed=True, coverage=True)
        for ev in [_alloc(BASE, 1, mem_type=1), (BASE + 1, 0, FREE, 0, -1, 0, SIZE_UNKNOWN)]:
            rows = _rows([ev])
            native.apply(rows)
            apply_row(ref, tuple(rows.tolist()[0]))
        assert ref.lookup(BASE) == Region(BASE, 1, MemoryType.CUDA, 0)
        kind, got = native.lookup(BASE, 1)
        assert (kind, got.mem_type, got.device) == (FOUND_IN, int(MemoryType.CUDA), 0)
        _compare(native, ref)
