"""^C anywhere: exceptions from a signal handler in every call that drains,
applies or writes, beside native producers (issue 32 items 4 and 5):

    python async_exceptions.py MODE KEEPER_LIBRARY CASE...

A SIGALRM timer fires every 100 us; while the main thread is inside the
call under test its handler raises KeyboardInterrupt (once per call: the
next call is armed again), so the exception lands anywhere in it - between
taking events out of the core and applying them, inside a cache write,
right after a lock is taken.  Meanwhile C threads (fixtures/keeper.c)
allocate and keep 4 KiB buffers through the hooks, and others make
alloc/free pairs.  Afterwards, with the timer stopped: every event reached
the subscriber exactly once and in order, every kept buffer is CUDA in the
cache and to every query, and the cache is what the subscriber's events
make of it (a reference MemtypeCache fed the same events).

Cases: flush, queries, subscribe (subscribe/close), install (install and
uninstall), cache (MemtypeCache's update/remove/clear: each write all or
nothing), lock-window (one ^C right after each of the drain's locks is
taken, before its try: placed by wrapping the lock).
"""

from __future__ import annotations

import ctypes
import errno
import random
import signal
import sys
import threading
import time
from typing import Any, Callable

from hkchild import MODES, Cases, alloc_free_v2, load_driver, mode_arg, primary_context

import memhook
from memhook import EventKind, MemoryType, MemtypeCache
from memhook._events import drain as _drain
from memhook._binding.core import lib as core
from memhook.cache import process_cache
from memhook.events import subscriptions

KEEP = 30_000  # buffers the keeper threads hold (the 30,000)
PAIRS = 20_000  # alloc/free pairs per churner


class Storm:
    """SIGALRM every ``interval`` s; a KeyboardInterrupt out of the handler
    whenever the main thread is inside :meth:`call` (once per call)."""

    def __init__(self, interval: float = 1e-4) -> None:
        self.interval = interval
        self.armed = False
        self.hits = 0
        self.calls = 0

    def _handler(self, signum: int, frame: object) -> None:
        if self.armed:
            self.armed = False
            self.hits += 1
            raise KeyboardInterrupt

    def __enter__(self) -> Storm:
        signal.signal(signal.SIGALRM, self._handler)
        signal.setitimer(signal.ITIMER_REAL, self.interval, self.interval)
        return self

    def __exit__(self, *exc: object) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    def call(self, fn: Callable[[], object]) -> bool:
        """``fn()``; False when a KeyboardInterrupt cut it short."""
        self.calls += 1
        try:
            self.armed = True
            fn()
            self.armed = False
        except KeyboardInterrupt:
            return False
        return True


class Producers:
    """fixtures/keeper.c's threads, joined by a Python thread (ctypes
    releases the GIL) so the main thread can storm meanwhile."""

    def __init__(self, library: ctypes.CDLL, keep: int, churners: int, pairs: int) -> None:
        self.lib = library
        self.keep = keep
        self.errors = -1
        self.done = threading.Event()
        if library.hk_keep_start(1 if keep else 0, keep, churners, pairs) != 0:
            raise RuntimeError("hk_keep_start failed")
        threading.Thread(target=self._join, daemon=True).start()

    def _join(self) -> None:
        self.errors = self.lib.hk_keep_join()
        self.done.set()

    def kept(self) -> list[int]:
        return [self.lib.hk_keep_address(i) for i in range(self.keep)]


class Seen:
    """Every event, through a subscriber that is a C function (list.append):
    exactly once is then the drain's promise alone."""

    def __init__(self) -> None:
        memhook.flush()  # (what came before is not this case's)
        self.events: list[memhook.Event] = []
        self.sub = memhook.subscribe(self.events.append)
        self.start = [(r.start, r.size, r.mem_type, r.device) for r in process_cache().regions()]

    def check(self, cases: Cases, expected: int | None, kept: list[int],
              compare: bool = True) -> None:
        memhook.flush()
        events = self.events
        seqs = [e.seq for e in events]
        cases.check(all(a < b for a, b in zip(seqs, seqs[1:])),
                    "the subscriber's events are repeated or out of order")
        if expected is not None:
            gaps = [(a, b) for a, b in zip(seqs, seqs[1:]) if b != a + 1]
            cases.check(len(events) == expected,
                        f"the subscriber got {len(events)} events, expected {expected} "
                        f"(gaps in seq: {gaps[:5]})")
        allocs = {e.address for e in events if e.kind is EventKind.ALLOC and e.size == 4096}
        missing = [p for p in kept if p not in allocs]
        cases.check(not missing, f"{len(missing)} of {len(kept)} kept buffers' ALLOCs never "
                                 "reached the subscriber")
        cache = process_cache()
        absent = [p for p in kept if (r := cache.lookup(p, 4096)) is None
                  or r.mem_type is not MemoryType.CUDA]
        cases.check(not absent, f"{len(absent)} of {len(kept)} kept buffers missing from the "
                                f"cache, e.g. {[hex(p) for p in absent[:3]]}")
        wrong = [p for p in kept[::97] if memhook.memory_type(p) is not MemoryType.CUDA]
        cases.check(not wrong, f"memory_type wrong for {len(wrong)} sampled kept buffers")
        if not compare:  # (install() marks reserved ranges, uninstall() loses events)
            self.sub.close()
            return
        reference = MemtypeCache()
        for start, size, mem_type, device in self.start:
            reference.update(start, size, mem_type, device)
        for e in events:
            if e.ok and e.kind is EventKind.ALLOC:
                reference.update(e.address, e.size, e.mem_type, max(e.device, -1))
            elif e.ok and e.kind is EventKind.FREE and e.size:
                reference.remove(e.address, e.size)
        cases.check(cache.regions() == reference.regions(),
                    f"the cache ({len(cache)} regions) is not what the subscriber's events "
                    f"make ({len(reference)} regions)")
        self.sub.close()


def storm_until(storm: Storm, producers: Producers, fn: Callable[[], object],
                at_least: float = 1.0) -> None:
    t0 = time.perf_counter()
    while not producers.done.is_set() or time.perf_counter() - t0 < at_least:
        storm.call(fn)
        if time.perf_counter() - t0 > 120:
            raise RuntimeError("the producers did not finish in 120 s")


def case_flush(cases: Cases, keeper: ctypes.CDLL, mode: str) -> None:
    seen = Seen()
    producers = Producers(keeper, KEEP, 2, PAIRS)
    with Storm() as storm:
        storm_until(storm, producers, memhook.flush)
    cases.check(producers.errors == 0, f"{producers.errors} producer calls failed")
    kept = producers.kept()
    seen.check(cases, KEEP + 2 * 2 * PAIRS, kept)
    cases.note(f"{storm.hits} exceptions in {storm.calls} flush() calls")
    cases.check(keeper.hk_keep_free() == 0, "freeing the kept buffers failed")
    memhook.flush()


def case_queries(cases: Cases, keeper: ctypes.CDLL, mode: str, cu: Any) -> None:
    import numpy as np

    alloc, free = alloc_free_v2(cu)
    known, _ = alloc(1 << 20)
    host = ctypes.create_string_buffer(4096)
    host_ptr = ctypes.addressof(host)
    seen = Seen()
    ptrs = np.array([known + 64 * i for i in range(32)] + [host_ptr], dtype=np.uint64)
    want = [MemoryType.CUDA] * 32 + [MemoryType.HOST]
    wrong: list[str] = []

    def ask() -> None:
        answers = (memhook.memory_type(known), memhook.memory_type(host_ptr))
        batch = [MemoryType(c) for c in memhook.memory_types(ptrs).tolist()]
        region = memhook.lookup(known + 64, 64)
        if answers != (MemoryType.CUDA, MemoryType.HOST) or batch != want or region is None \
                or region.mem_type is not MemoryType.CUDA:
            wrong.append(f"{answers} {region}")

    producers = Producers(keeper, KEEP, 2, PAIRS)
    with Storm() as storm:
        storm_until(storm, producers, ask)
    cases.check(not wrong, f"{len(wrong)} wrong answers, e.g. {wrong[:3]}")
    kept = producers.kept()
    seen.check(cases, KEEP + 2 * 2 * PAIRS, kept)
    cases.note(f"{storm.hits} exceptions in {storm.calls} rounds of queries")
    keeper.hk_keep_free()
    free(known)
    memhook.flush()


def case_subscribe(cases: Cases, keeper: ctypes.CDLL, mode: str) -> None:
    seen = Seen()

    def churn() -> None:
        memhook.subscribe(id, precise_time=True).close()
        memhook.subscribe(id, EventKind.FREE).close()

    producers = Producers(keeper, KEEP, 2, PAIRS)
    with Storm() as storm:
        storm_until(storm, producers, churn)
    for sub in subscriptions():  # (a subscribe() cut short after it registered)
        if sub is not seen.sub:
            sub.close()
    cases.check(subscriptions() == (seen.sub,), "subscriptions left open")
    # Every precise_time=True was given back (0 means one was still counted).
    cases.check(core.memhook_events_precise_time(0) == errno.EINVAL,
                "a subscription's precise-time request was never given back")
    seen.check(cases, KEEP + 2 * 2 * PAIRS, producers.kept())
    cases.note(f"{storm.hits} exceptions in {storm.calls} subscribe/close rounds")
    keeper.hk_keep_free()
    memhook.flush()


def case_install(cases: Cases, keeper: ctypes.CDLL, mode: str) -> None:
    other = "bistro,reloc" if MODES[mode] != "bistro,reloc" else "reloc"
    turn = [0]

    def cycle() -> None:
        turn[0] += 1
        if turn[0] % 4 == 0:
            memhook.uninstall()
        memhook.install(other if turn[0] % 2 else MODES[mode])

    seen = Seen()
    churn = Producers(keeper, 0, 2, PAIRS // 2)
    with Storm() as storm:
        storm_until(storm, churn, cycle, at_least=1.5)
    memhook.install(MODES[mode])
    cases.check(memhook.status().mode == memhook.HookMode.parse(MODES[mode]),
                "the hooks are not in the mode installed last")
    producers = Producers(keeper, KEEP // 3, 2, PAIRS // 4)
    with Storm() as storm2:
        storm_until(storm2, producers, memhook.flush)
    kept = producers.kept()
    seen.check(cases, None, kept, compare=False)  # (see Seen.check)
    cases.note(f"{storm.hits} exceptions in {storm.calls} install/uninstall calls")
    keeper.hk_keep_free()
    memhook.flush()


def _invariants(cache: MemtypeCache) -> list[str]:
    lists, keys, maxes = cache._lists, cache._keys, cache._maxes
    bad = []
    if len(lists) != len(keys) or len(keys) != len(maxes):
        bad.append("sublist counts differ")
    for sub, k, m in zip(lists, keys, maxes):
        if not sub or len(sub) != len(k) or k != [r.start + r.size for r in sub] or m != k[-1]:
            bad.append("a sublist, its keys and its maximum disagree")
            break
    if cache._regions._len != sum(map(len, lists)):
        bad.append("the length is wrong")
    if cache._flat[0] == [] and cache._flat[1] == [None]:
        bad.append("the published state is still a write's")
    return bad


def case_cache(cases: Cases, keeper: ctypes.CDLL, mode: str) -> None:
    """MemtypeCache's writes under the storm: after each call, interrupted or
    not, the regions are either all of the write or none of it."""
    rng = random.Random(32)
    producers = Producers(keeper, 0, 2, PAIRS)
    torn = 0
    for load, span in ((4, 1 << 16), (250, 1 << 22)):
        cache = MemtypeCache()
        model = MemtypeCache()  # (written outside the storm: the reference)
        if load != 250:
            cache._set_load(load)
        base = 0x7E00_0000_0000
        types = list(MemoryType)
        t0 = time.perf_counter()
        with Storm() as storm:
            while time.perf_counter() - t0 < 1.5:
                op = rng.random()
                start = base + rng.randrange(0, span, 256)
                size = rng.randrange(256, 64 * 256 + 1, 256)
                if op < 0.6:
                    args = (start, size, rng.choice(types), rng.randrange(-1, 2))
                    write: Callable[..., None] = cache.update
                    model_write: Callable[..., None] = model.update
                elif op < 0.995:
                    args = (start, size)
                    write, model_write = cache.remove, model.remove
                else:
                    args = ()
                    write, model_write = cache.clear, model.clear
                before = model.regions()
                finished = storm.call(lambda: write(*args))
                model_write(*args)
                got = cache.regions()
                if got != model.regions():
                    if finished or got != before:
                        torn += 1
                        break
                    model = MemtypeCache()
                    for r in got:
                        model.update(r.start, r.size, r.mem_type, r.device)
        bad = _invariants(cache)
        cases.check(not torn, f"a write left the cache neither before nor after it (load {load})")
        cases.check(not bad, f"the cache's structure is broken (load {load}): {bad}")
        cases.note(f"load {load}: {storm.hits} exceptions in {storm.calls} writes, "
                   f"{len(cache)} regions")
    producers.done.wait(120)


class _LeakyOnce:
    """A lock whose next successful acquire() raises KeyboardInterrupt as it
    returns, the lock held: ^C in the window after a lock is taken and
    before the try that releases it."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.armed = True

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        got = self.real.acquire(*args, **kwargs)
        if got and self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return got

    def release(self) -> None:
        self.real.release()

    def __enter__(self) -> bool:
        return self.real.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.real.__exit__(*exc)

    def _is_owned(self) -> bool:
        return self.real._is_owned()


def case_lock_window(cases: Cases, keeper: ctypes.CDLL, mode: str, cu: Any) -> None:
    alloc, free = alloc_free_v2(cu)
    seen = Seen()
    # (_take_lock was tried with acquire() only by a query's look at the
    # events the Python cache lacked, gone with that cache; the drain takes
    # it in a with statement)
    for name in ("_lock", "_deliver_lock"):
        real = getattr(_drain, name)
        leaky = _LeakyOnce(real)
        setattr(_drain, name, leaky)
        if name == "_lock":
            _drain._acquire = leaky.acquire
        p, _ = alloc(4096)
        try:
            try:
                memhook.flush()
            except KeyboardInterrupt:
                pass
        finally:
            setattr(_drain, name, real)
            if name == "_lock":
                _drain._acquire = real.acquire
        cases.check(not leaky.armed, f"{name}: the ^C was never placed")
        # The next drain on this thread and one on another thread both work.
        q, _ = alloc(4096)
        memhook.flush()
        other = threading.Thread(target=memhook.flush, daemon=True)
        r, _ = alloc(4096)
        other.start()
        other.join(10)
        cases.check(not other.is_alive(), f"{name}: a flush() on another thread hangs")
        memhook.flush()
        delivered = {e.address for e in seen.events if e.kind is EventKind.ALLOC}
        for ptr in (p, q, r):
            cases.check(process_cache().lookup(ptr, 4096) is not None,
                        f"{name}: an allocation made around the ^C is missing from the cache")
            cases.check(ptr in delivered,
                        f"{name}: an allocation made around the ^C never reached the subscriber")
    seen.check(cases, None, [])


def main() -> int:
    mode = mode_arg()
    keeper = ctypes.CDLL(sys.argv[2])
    keeper.hk_keep_kept.restype = ctypes.c_long
    keeper.hk_keep_join.restype = ctypes.c_long
    keeper.hk_keep_free.restype = ctypes.c_long
    keeper.hk_keep_address.restype = ctypes.c_ulonglong
    keeper.hk_keep_address.argtypes = [ctypes.c_long]
    keeper.hk_keep_start.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int, ctypes.c_long]
    cases = Cases()
    cu = load_driver()
    memhook.install(MODES[mode])
    primary_context(cu)
    for name in sys.argv[3:]:
        with cases.case(name):
            if name == "flush":
                case_flush(cases, keeper, mode)
            elif name == "queries":
                case_queries(cases, keeper, mode, cu)
            elif name == "subscribe":
                case_subscribe(cases, keeper, mode)
            elif name == "install":
                case_install(cases, keeper, mode)
            elif name == "cache":
                case_cache(cases, keeper, mode)
            elif name == "lock-window":
                case_lock_window(cases, keeper, mode, cu)
            else:
                raise SystemExit(f"unknown case {name!r}")
    memhook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
