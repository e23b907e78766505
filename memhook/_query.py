"""The process-wide cache and the queries a user makes of it:
:func:`memory_type`, :func:`lookup`, :func:`memory_types`, with the hook
layer's seam (:func:`set_hook_layer`) and :func:`process_cache`.  They are
re-exported by :mod:`memhook.cache` (and the first three by :mod:`memhook`),
where the public API names them; :class:`~memhook.cache.MemtypeCache` itself, the
interval map, is in :mod:`memhook.cache`.

The module-level :func:`memory_type`, :func:`lookup` and :func:`memory_types`
query one process-wide cache, because a process has one address space: every
library in it allocates from, and asks about, the same pointers, so one cache
fed by the hooks serves them all (and a second would only be a second,
staler copy).  Before answering they drain the hooks' pending events - or,
when that would mean waiting for another thread (it is applying a batch),
they answer from the cache where no event it lacks touches the range, and
through the driver where one does (not remembering that answer: see
_remember) - and they resolve through the CUDA driver what the cache cannot vouch for: UNKNOWN
regions and straddling ranges always, and - while the hook layer does not say
it covers every allocation entry point of the loaded driver, which today it
never does - pointers the cache does not know.  The driver is asked only if
the process has already loaded and initialised it (see :mod:`memhook._driver`);
its answer is remembered as a region while the hooks record (a "not CUDA's"
answer never is: without hooks such a pointer is asked about again, with
one ``cuPointerGetAttributes`` call).  Without hooks nothing tells the cache
about frees, so nothing is remembered then (see _remember), and what the
cache knew before the hooks stopped is marked UNKNOWN by the gap marker the
core puts in the event order (memhook._apply).

The hook layer plugs in with :func:`set_hook_layer`.

The single-pointer fast path (issue 25).  ``memory_type(p)`` for an int
``p`` first asks a CPython builtin built into the extension
(csrc/pyext/query_fast.c), which makes the checks the Python path makes -
the drain has nothing pending and nothing half-applied, the cache's
published state is the one a snapshot was made from, a HOST answer only
while the coverage memo vouches - reading memory instead of making calls,
and searches a flat uint64 copy of the region bounds.  Where any check
fails it answers None and the Python path below runs, unchanged.  The
snapshot is made (by :func:`_publish_fast`) from the cache's own flat copy,
an immutable list pair tied to one published ``_flat`` tuple: every cache
write replaces that tuple, so a snapshot never outlives the state it was
made from.  It is made after :data:`FAST_AFTER` answers from one published
state, so that a cache written between every pair of queries does not pay
for a copy per write.  ``lookup(p, size)`` of ints has its own builtin over
the same snapshot: it answers with the cache's Region object for the
interval that holds the whole range (the snapshot carries them), or None
for vouched-for host memory, and declines as ``memory_type``'s does.
"""

from __future__ import annotations

import os
import sys
import threading
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from itertools import chain
from typing import Any, Callable

import numpy as np

from . import _driver
from . import cache as _cache
from ._driver import _core_lib
from ._fastpath import FAST
from ._inputs import ADDRESS_LIMIT, address_array, byte_range
from ._types import MemoryType, Region, _make_region
from .cache import (_ABSENT, _BLOCKED, _BUSY, _FOUND, _MIXED, _ONE, _RUN, _State, HOST, UNKNOWN,
                    MemtypeCache)

__all__ = [
    "CACHE_WAIT_S",
    "FAST_AFTER",
    "Applier",
    "lookup",
    "memory_type",
    "memory_types",
    "process_cache",
    "set_hook_layer",
]

_ADDRESS_MAX = ADDRESS_LIMIT - 1

_process_cache = MemtypeCache()


def _after_fork_in_child() -> None:
    # A writer thread of the parent may have held the lock at fork(); it is
    # gone, and every published state is whole (writers publish one tuple).
    _process_cache._lock = threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)
_drain: Callable[[], object] | None = None
_coverage_complete: Callable[[], bool] | None = None


@dataclass(frozen=True)
class Applier:
    """What the hook layer's drain offers the module-level queries besides
    draining (memhook._drain provides it; see :func:`set_hook_layer`).

    ``settle()`` waits until the cache holds every event published before
    the call (for a query the driver cannot answer); ``generation()``
    counts the drain's applies; ``remember(since, write)`` runs ``write``
    (storing a driver answer) only if no apply happened since
    ``generation()`` returned ``since``, and says whether it did;
    ``applying()`` is True on a thread inside an apply, which may hold the
    cache's lock (a signal handler there must not wait for it);
    ``unapplied(start, size, closed[, take])`` is, of the events the cache
    lacks yet, the last that can change its answer for the range
    (memhook._apply.last_touch), UNTOUCHED, or UNSURE (``take`` False: it
    need not take events out of the core again, as for the later pointers
    of one memory_types() call)."""

    settle: Callable[[], object]
    generation: Callable[[], int]
    remember: Callable[[int, Callable[[], None]], bool]
    applying: Callable[[], bool]
    unapplied: Callable[..., Any]


_applier: Applier | None = None

FAST_AFTER = 4
"""Answers the Python path gives from one published state of the process
cache (one with a flat copy) before it makes the C fast path a snapshot of
it: a state that lives that long is likely read again, and one that a write
replaces at once is not worth a copy."""


def _unarmed(ptr: Any) -> MemoryType | None:
    return None


def _unarmed_region(ptr: Any, size: Any) -> Region | None | bool:
    return False


_fast = FAST
_fast_type: Callable[[Any], MemoryType | None] = _fast.fast_type if _fast else _unarmed
# (False: not answered there; None: host memory)
_fast_region: Callable[[Any, Any], Region | None | bool] = \
    _fast.fast_region if _fast else _unarmed_region
# The published state the C snapshot was made from (None: none), and the
# one the Python path is counting answers for (see FAST_AFTER).
_fast_flat: _State | None = None
_candidate: _State | None = None
_candidate_count = 0

CACHE_WAIT_S = 0.002
"""How long a module-level query waits for the cache's lock while another
thread writes (a write takes microseconds, unless its thread lost the CPU
or the GIL mid-write); past that it resolves through the driver."""


def process_cache() -> MemtypeCache:
    """The one cache of this process, that the hooks feed and the module-level
    queries read.  Writing to it by hand is allowed (a transport that knows of
    memory the hooks cannot see may record it); the hooks keep writing too.

    Runtime complexity: O(1).

    >>> import memhook
    >>> from memhook.cache import process_cache
    >>> process_cache() is process_cache()
    True
    >>> isinstance(process_cache(), memhook.MemtypeCache)
    True
    """
    return _process_cache


def set_hook_layer(drain: Callable[[], object] | None,
                   coverage_complete: Callable[[], bool] | None,
                   applier: Applier | None = None) -> None:
    """The seam for the hook layer.

    ``drain()`` is called before every module-level query; it must apply the
    pending events to :func:`process_cache` (``update`` on ALLOC, ``remove`` on
    FREE) in order, and return False - exactly False - when it could not
    do so without waiting for another thread: the query then answers
    through the driver (``applier.settle()`` first when the driver cannot
    answer).  ``coverage_complete()`` returns True while the hooks cover
    every allocation entry point of the loaded driver; only then does a
    pointer the cache does not know count as HOST without asking the driver.
    ``applier``: see :class:`Applier` (None: the drain's own ``applier``
    attribute if it has one - so a layer saved as ``(drain,
    coverage_complete)`` and set again keeps it - else driver answers are
    remembered at once and the cache's lock is waited for).  Pass None to
    detach any of them.  ``import memhook`` attaches the hooks' own layer
    (:mod:`memhook._drain`); this is for tests and benchmarks that stand in
    for it, so it has no example here.

    Runtime complexity: O(1)."""
    global _drain, _coverage_complete, _applier
    if applier is None:
        applier = getattr(drain, "applier", None)
    _drain = drain
    _coverage_complete = coverage_complete
    _applier = applier
    _configure_fast()


def _configure_fast() -> None:
    """Tell the C fast path what to check, for the hook layer now set: the
    hooks' own drain and coverage answer (memhook._drain, memhook._coverage)
    it reads as memory; with no drain it checks none; any other drain (a
    test's, a benchmark's stub) it cannot check, so it stays out of the way
    (every query takes the Python path)."""
    global _fast_flat, _candidate
    if _fast is None:
        return
    configure = _fast.configure
    _fast_flat = _candidate = None
    drain_mod = sys.modules.get("memhook._drain")
    coverage_mod = sys.modules.get("memhook._coverage")
    query_ns: dict[str, Any] | None = globals()
    pending, idle_ns = 0, None
    if _drain is None:
        pass
    elif drain_mod is not None and _drain is getattr(drain_mod, "query_drain", None):
        from ._core import ffi

        pending = int(ffi.cast("uintptr_t", drain_mod._pending))
        idle_ns = vars(drain_mod)
    else:
        query_ns = None
    covered = coverage_mod is not None and _coverage_complete is getattr(
        coverage_mod, "coverage_complete", None)
    configure(pending, idle_ns, covered, query_ns, tuple(MemoryType))


def _publish_fast(flat: _State) -> None:
    """Give the C fast path a snapshot of ``flat`` (a published state of the
    process cache with a flat copy) once the Python path has answered
    FAST_AFTER times from it.  The bounds become one uint64 array (without
    the 0 and 2**64 that frame them) and the types one byte each; a region
    ending at 2**64, which a uint64 cannot hold, gets no snapshot.  The
    regions come with it, for lookup: taken while ``flat`` is the cache's
    state before and after (no write began meanwhile, so they are the very
    regions ``flat`` was copied from - a write replaces ``_flat`` first)."""
    global _fast_flat, _candidate, _candidate_count
    if flat is not _candidate:
        _candidate, _candidate_count = flat, 1
        return
    _candidate_count += 1
    if _candidate_count < FAST_AFTER or _fast is None or flat is _BUSY:
        return
    _candidate = None
    bounds, types, _, _ = flat
    if bounds is None or types is None or len(bounds) < 2 or bounds[-2] >= ADDRESS_LIMIT:
        return
    inner = bounds[1:-1]
    # (the types between the frame's two Nones: MemoryType codes, no None)
    codes = bytes(types[1:-1])  # type: ignore[arg-type]
    cache = _process_cache
    if cache._flat is not flat:
        return
    regions = tuple(chain.from_iterable(cache._lists))
    if cache._flat is not flat or 2 * len(regions) != len(inner):
        return  # (written meanwhile: the next state gets its own snapshot)
    _fast.publish(flat, array("Q", inner).tobytes() + codes, len(inner), regions)
    _fast_flat = flat


def _vouched() -> bool:
    predicate = _coverage_complete
    return predicate is not None and bool(predicate())


def _classify(start: int, n: int) -> tuple[int, Region | None]:
    """What the process cache holds for ``[start, start + n)`` - or
    ``(_BLOCKED, None)`` rather than wait long for a write under way: at
    most CACHE_WAIT_S, and not at all on a thread inside the drain's apply
    (a signal handler there: the interrupted write may hold the lock)."""
    applier = _applier
    if applier is None:
        return _process_cache._classify_checked(start, n)
    return _process_cache._classify_checked(start, n, 0.0 if applier.applying() else CACHE_WAIT_S)


def _hooks_record() -> bool:
    """True while the core's hooks record (its mode is not none), read
    without a lock (the mode's bits of ``memhook_coverage_token``)."""
    return _core_lib is not None and bool(_core_lib.memhook_coverage_token() & 3)


def _remember(answer: _driver.DriverAnswer, since: int) -> bool:
    """Store a driver answer in the process cache, unless the drain applied
    an event since ``since`` (its generation before the driver was asked):
    the answer may predate that event - a FREE of the range applied
    between the driver's answer and this write would leave a freed range
    recorded as CUDA for good.  True when stored.

    Only while the hooks record.  Without them no FREE ever reaches the
    cache, so a stored answer would outlive its allocation, and the only
    way to trust it again would be a driver call per query (comparing the
    range and buffer id), which costs about what asking does.  So the
    driver is simply asked again.  A store that races an uninstall comes
    before the gap marker's apply, which marks it (the core sets the mode
    to none before it emits the marker), or after, which ``since``
    refuses."""
    if not _hooks_record():
        return False

    def write() -> None:
        _process_cache.update(answer.start, answer.size, answer.mem_type, answer.device)

    applier = _applier
    if applier is None:
        write()
        return True
    return applier.remember(since, write)


def _since() -> int:
    applier = _applier
    return 0 if applier is None else applier.generation()


def _answer_type(answer: _driver.DriverAnswer, start: int, n: int) -> MemoryType:
    """The type the driver's answer gives ``[start, start + n)``."""
    if answer.mem_type is HOST:
        return HOST
    if answer.start <= start and start + n <= answer.start + answer.size:
        return answer.mem_type
    return UNKNOWN


def _ask_driver(start: int, n: int, kind: int) -> MemoryType | None:
    """Resolve ``[start, start + n)`` through the driver and remember a CUDA
    answer (see _remember); None when the driver gives no answer."""
    since = _since()
    if n == 1 and not _hooks_record():
        # Nothing will be remembered (see _remember), so the extent that
        # remembering needs is not asked for: one call says the byte's type.
        answer = _driver.type_at(start)
    else:
        answer = _driver.query(start, n)
    if answer is None:
        return None
    if answer.mem_type is HOST:
        # The driver does not know the pointer.  A range that starts in host
        # memory and runs into a region is still mixed.
        return UNKNOWN if kind is _MIXED else HOST
    _remember(answer, since)
    return _answer_type(answer, start, n)


def _driver_only(start: int, n: int) -> _driver.DriverAnswer | None:
    """The driver's answer for ``[start, start + n)``, for a query that
    cannot read the cache without waiting for another thread (the drain is
    busy elsewhere, or the cache is being written).  Not remembered: the
    thread applying events may be writing this very range.  A range whose
    first byte the driver does not know but whose last byte it does gets
    UNKNOWN, as the cache would give it."""
    answer = _driver.query(start, 1)
    if answer is None or answer.mem_type is not HOST or n == 1:
        return answer
    last = _driver.query(start + n - 1, 1)
    if last is not None and last.mem_type is not HOST:
        return _driver.DriverAnswer(UNKNOWN, -1, start, n)
    return answer


_UNTOUCHED, _UNSURE = 0, 1  # memhook._apply.UNTOUCHED / UNSURE (no import: no native core here)


def _allocated_type(row: tuple[Any, ...], start: int, n: int) -> MemoryType | None:
    from ._apply import allocated_type

    return allocated_type(row, start, n)


def _memory_type_undrained(start: int, n: int, take: bool = True,
                           learned: list[_driver.DriverAnswer] | None = None) -> MemoryType:
    """memory_type when the drain could not bring the cache up to date
    without waiting for another thread: the cache as it stands where no
    event it lacks touches the range (Applier.touched); else the driver's
    answer, which is the truth for every pointer the hooks would have told
    the cache about; only where there is no driver to ask (events recorded
    by a native recorder alone), the cache once it is up to date.  For the
    pointers of one memory_types() call after its first, ``take`` False
    (the events published before the call are out already) and
    ``learned``, the driver's allocations this call was told of: a pointer
    inside one needs no driver call of its own."""
    if learned:  # (the driver's word, given after every event published before the call)
        for known in learned:
            if known.start <= start and start + n <= known.start + known.size:
                return known.mem_type
    applier = _applier
    if applier is not None:
        last = applier.unapplied(start, n, False) if take else \
            applier.unapplied(start, n, False, False)
        if last == _UNTOUCHED:
            return _memory_type_slow(start, n)  # what the cache says there is final
        if last != _UNSURE:  # the last event over the range: a new allocation?
            t = _allocated_type(last, start, n)
            if t is not None:
                return t
    answer = _driver_only(start, n)
    if answer is not None:
        if learned is not None and answer.mem_type is not HOST and answer.mem_type is not UNKNOWN:
            learned.append(answer)
        return _answer_type(answer, start, n)
    if applier is not None:
        applier.settle()
    return _memory_type_slow(start, n)


def _memory_type_slow(start: int, n: int) -> MemoryType:
    kind, region = _classify(start, n)
    if kind is _FOUND or kind is _RUN:
        t = region.mem_type  # type: ignore[union-attr]
        if t is not UNKNOWN:
            return t
        answer = _ask_driver(start, n, kind)
        return UNKNOWN if answer is None else answer
    if kind is _MIXED:
        answer = None if _vouched() else _ask_driver(start, n, kind)
        return UNKNOWN if answer is None else answer
    if kind is _BLOCKED:
        found = _driver_only(start, n)
        return UNKNOWN if found is None else _answer_type(found, start, n)
    if _vouched():
        return HOST
    answer = _ask_driver(start, n, kind)
    return HOST if answer is None else answer


def memory_type(ptr: Any, size: Any = 1) -> MemoryType:
    """The memory type of ``[ptr, ptr + size)``, or of an object's whole
    extent (``__cuda_array_interface__``, ``__array_interface__``, DLPack,
    buffer protocol).  Pending hook events are applied first; UNKNOWN regions,
    and ranges the hooks cannot vouch for, are resolved through the driver.
    ``ptr`` takes every form :meth:`MemtypeCache.memory_type` does: a ctypes
    integer or pointer, or a ``CUdeviceptr``, is the address it holds; an
    empty object gets the type at its data pointer (HOST for a NULL one).

    The answer comes from the process-wide cache (:func:`process_cache`) as
    :meth:`MemtypeCache.memory_type` gives it, except that the driver - only
    one this process has already loaded and initialised; memhook never
    loads one - is asked about UNKNOWN regions, ranges that straddle
    regions, and (unless ``status().coverage_complete``) pointers in no
    region; a CUDA answer is remembered as a region while the hooks record
    (without them no FREE would ever undo it).

    Runtime complexity: O(1) for a recently asked pointer, else O(log n)
    for n regions, plus the drain of e pending events, O(e log n); plus one
    driver call where the driver is asked.

    >>> import numpy as np
    >>> import memhook
    >>> memhook.memory_type(np.zeros(4))            # host memory
    <MemoryType.HOST: 0>
    >>> cache = memhook.cache.process_cache()
    >>> cache.update(0x7000_0000_0000, 1 << 20, memhook.MemoryType.CUDA, 0)  # as the hooks would
    >>> memhook.memory_type(0x7000_0000_0000 + 64)
    <MemoryType.CUDA: 1>
    >>> cache.remove(0x7000_0000_0000, 1 << 20)
    """
    if size is _ONE:
        t = _fast_type(ptr)  # (C: every check below, read as memory; None: not answered there)
        if t is not None:
            return t
    drain = _drain
    if drain is not None and drain() is False:
        return _memory_type_undrained(*byte_range(ptr, size))
    if size is _ONE and type(ptr) is int:
        # MemtypeCache.memory_type's fast path, inlined (a call less).
        cache = _process_cache
        flat = cache._flat
        bounds, types, hot, limit = flat
        if bounds is not None and flat is not _fast_flat:
            _publish_fast(flat)  # (the C path did not answer: it has no snapshot of this state)
        t = hot.get(ptr)
        if t is None:
            if bounds is not None:
                t = types[bisect_right(bounds, ptr)]  # type: ignore[index]
                if t is not None and next(_cache._memo_turn):
                    if len(hot) >= limit:
                        hot.clear()
                    hot[ptr] = t
            else:
                try:
                    maxes = cache._maxes
                    pos = bisect_right(maxes, ptr)
                    if pos != len(maxes):
                        r = cache._lists[pos][bisect_right(cache._keys[pos], ptr)]
                        t = r.mem_type if r.start <= ptr else HOST
                    else:
                        t = HOST
                except IndexError:  # a write got in the way
                    t = None
                else:
                    if cache._flat is not flat or (t is HOST and not 0 <= ptr <= _ADDRESS_MAX):
                        t = None
                    elif next(_cache._memo_turn):
                        if len(hot) >= limit:
                            cache._memo_full(flat)
                        hot[ptr] = t
        if t is not None:
            if t is not HOST:
                if t is not UNKNOWN:
                    return t  # a region's type: what the hooks (or the driver) recorded
            else:
                vouched = _coverage_complete
                if (vouched is not None and vouched()) or not _driver.is_cuda(ptr):
                    return t  # in no region, and the hooks or the driver say so
                if not _hooks_record():  # (nothing to remember: the byte's type, one call)
                    found = _driver.type_at(ptr)
                    if found is not None and found.mem_type is not HOST:
                        return found.mem_type
    return _memory_type_slow(*byte_range(ptr, size))


def lookup(ptr: Any, size: Any = 1) -> Region | None:
    """The region holding ``[ptr, ptr + size)`` (or an object's extent), as
    :meth:`MemtypeCache.lookup` answers it, after applying pending hook events
    and resolving through the driver what the cache cannot vouch for (as
    :func:`memory_type` does).  None for host memory.

    Runtime complexity: O(log n + k) for n regions, k of them touched, plus
    the drain and any driver call, as for :func:`memory_type`.

    >>> import memhook
    >>> cache = memhook.cache.process_cache()
    >>> cache.update(0x7000_0000_0000, 1 << 20, memhook.MemoryType.CUDA_MANAGED, 0)
    >>> memhook.lookup(0x7000_0000_0000 + 4096, 4096)
    Region(start=0x700000000000, size=1048576, mem_type=CUDA_MANAGED, device=0)
    >>> memhook.lookup(bytearray(16)) is None     # a host buffer
    True
    >>> cache.remove(0x7000_0000_0000, 1 << 20)
    """
    found = _fast_region(ptr, size)  # (C: memory_type's checks; False: not answered there)
    if found is not False:
        return found  # type: ignore[return-value]
    start, n = byte_range(ptr, size)
    drain = _drain
    applier = _applier
    if drain is not None and drain() is False and (
            applier is None or applier.unapplied(start, n, True) != _UNTOUCHED):
        answer = _driver_only(start, n)
        if answer is not None:
            return _answer_region(answer, start, n)
        if applier is not None:
            applier.settle()
    flat = _process_cache._flat
    if flat[0] is not None and flat is not _fast_flat:
        _publish_fast(flat)  # (the C path did not answer: it has no snapshot of this state)
    kind, region = _classify(start, n)
    if kind is _BLOCKED:
        answer = _driver_only(start, n)
        return _make_region(start, n, UNKNOWN, -1) if answer is None else \
            _answer_region(answer, start, n)
    if kind is _FOUND or kind is _RUN:
        if region.mem_type is not UNKNOWN:  # type: ignore[union-attr]
            return region
    elif _vouched():
        return None if kind is _ABSENT else _make_region(start, n, UNKNOWN, -1)
    since = _since()
    answer = _driver.query(start, n)
    if answer is None:  # no answer: what the cache has
        return _make_region(start, n, UNKNOWN, -1) if kind is _MIXED else region
    if answer.mem_type is HOST:  # the driver does not know it: host memory
        return _make_region(start, n, UNKNOWN, -1) if kind is _MIXED else None
    if _remember(answer, since):
        kind, region = _classify(start, n)  # the remembered region (merged, maybe)
        if kind is _FOUND or kind is _RUN:
            return region
        if kind is _MIXED:
            return _make_region(start, n, UNKNOWN, -1)
    return _answer_region(answer, start, n)


def _answer_region(answer: _driver.DriverAnswer, start: int, n: int) -> Region | None:
    """lookup's answer from the driver's alone: None for host memory, the
    driver's allocation when it holds the whole range, else UNKNOWN."""
    if answer.mem_type is HOST:
        return None
    if answer.mem_type is not UNKNOWN and answer.start <= start and \
            start + n <= answer.start + answer.size:
        return _make_region(answer.start, answer.size, answer.mem_type, answer.device)
    return _make_region(start, n, UNKNOWN, -1)


def memory_types(ptrs: Any) -> np.ndarray:
    """:func:`memory_type` of many single-byte addresses, as ``uint8``
    :class:`MemoryType` codes shaped like ``ptrs`` (a numpy integer array or
    a sequence of addresses, as :meth:`MemtypeCache.memory_types` takes).

    Runtime complexity: O(m log n) for m addresses and n regions (as
    :meth:`MemtypeCache.memory_types`), plus the drain, plus one driver call
    per distinct address the cache cannot vouch for.

    >>> import numpy as np
    >>> import memhook
    >>> cache = memhook.cache.process_cache()
    >>> cache.update(0x7000_0000_0000, 1 << 20, memhook.MemoryType.CUDA, 0)
    >>> ptrs = np.array([[0x7000_0000_0000, 0x7000_0010_0000]], dtype=np.uint64)
    >>> memhook.memory_types(ptrs)                  # the second is one past the end
    array([[1, 0]], dtype=uint8)
    >>> cache.remove(0x7000_0000_0000, 1 << 20)
    """
    drain = _drain
    undrained = drain is not None and drain() is False
    arr = address_array(ptrs)
    applier = _applier
    got = None
    if not (undrained or (applier is not None and applier.applying())):
        # (at most CACHE_WAIT_S for a write's lock: on a signal handler that
        # interrupted its own thread's write, the wait would be forever)
        got = _process_cache._memory_types(arr, True, CACHE_WAIT_S)
    if got is None:
        # Pointer by pointer, as memory_type answers without the drain (a
        # thread inside the drain's apply must not wait for the cache's
        # lock either, which the snapshot takes).
        out = np.empty(arr.shape, dtype=np.uint8)
        answers: dict[int, MemoryType] = {}
        learned: list[_driver.DriverAnswer] = []
        for i, p in enumerate(arr.tolist()):
            t = answers.get(p)
            if t is None:
                t = answers[p] = _memory_type_undrained(p, 1, not answers, learned)
            out[i] = t
        shape = getattr(ptrs, "shape", None)
        return out.reshape(shape) if shape is not None and len(shape) != 1 else out
    out, absent = got
    need = out == UNKNOWN
    if not _vouched():
        need |= absent
    if need.any() and _driver.driver_loaded():
        todo = np.flatnonzero(need)
        answers = {}
        for i in todo.tolist():
            p = int(arr[i])
            t = answers.get(p)
            if t is None:
                t = answers[p] = _memory_type_slow(p, 1)
            out[i] = t
    shape = getattr(ptrs, "shape", None)
    return out.reshape(shape) if shape is not None and len(shape) != 1 else out


_configure_fast()  # (no hook layer yet: memhook._drain attaches its own)
