"""Where a FREE's size comes from, as subscribers see it.

    python free_sizes.py MODE

  without exact
      a subscriber that did not ask for exact sizes: every FREE of an
      allocation made after install carries the ALLOC's size, type and
      device (filled by the drain from the ALLOC it pairs with), for each kind
      of free (cuMemFree_v2, cuMemFreeAsync, cuMemFreeHost, another
      thread's free); an allocation made before install that nobody asked
      about frees with size 0 and size_unknown, and answers HOST after.
  asked about
      an allocation made before install that a query asked the driver
      about (memory_type of a pointer inside it) frees, without exact, with
      the driver's size, type and device (the cache's record of that
      answer); a free of a pointer inside another such allocation is
      refused and stays size_unknown (only a record starting at the
      address sizes a FREE), and so is a second free of the first one,
      drained with it (the order ended that record).
  refused
      a free the driver refuses (a pointer inside an allocation, a pointer
      freed already) is one FREE with the driver's error, and the
      allocation still answers its type: the cache is as it was.
  exact
      a subscriber with exact=True: the allocation made before install
      frees with the driver's size, and every event has a precise stamp;
      once it closes, FREEs are filled by the drain again.
  exact switch
      threads freeing while an exact=True subscriber opens and closes:
      every FREE carries its thread's size, from one side or the other.
  unmapped together
      two maps unmapped by one cuMemUnmap over both (its FREE names the
      first's address), then a new map at the second's address, unmapped:
      a refused cuMemFree_v2 there is size_unknown - the drain's record of
      the second map went when the new map took its address, though the
      new map's own pair never reached the drain's table.
"""
from __future__ import annotations

import ctypes
import sys
import threading

from hkchild import (Cases, CUmemAccessDesc, CUmemAllocationProp, Recorder, byref, c_uint64,
                     fmt_all, install, load_driver, mode_arg, primary_context)

import memhook
from memhook import EventKind, MemoryType

KiB, MiB = 1 << 10, 1 << 20
SIZE_UNKNOWN = 0x1


def frees_of(events: list[memhook.Event], ptr: int) -> list[memhook.Event]:
    return [e for e in events if e.kind == EventKind.FREE and e.address == ptr]


def alloc(cu, size: int) -> int:
    p = c_uint64()
    assert cu.cuMemAlloc_v2(byref(p), size) == 0
    return p.value


def without_exact(cases: Cases, cu, mode: str, before: int) -> None:
    rec = Recorder()

    def check(fn: str, ptr: int, size: int, mem_type: MemoryType) -> None:
        got = frees_of(rec.take(), ptr)
        cases.check([(e.function, e.size, e.mem_type, e.device, e.size_unknown) for e in got]
                    == [(fn, size, mem_type, 0, False)],
                    f"the FREE of {size} bytes at {ptr:#x} ({fn}): {fmt_all(got)}")

    p = alloc(cu, 3 * MiB + 256)
    assert cu.cuMemFree_v2(p) == 0
    check("cuMemFree_v2", p, 3 * MiB + 256, MemoryType.CUDA)
    q = c_uint64()
    assert cu.cuMemAllocAsync(byref(q), 5 * KiB, None) == 0
    assert cu.cuMemFreeAsync(q.value, None) == 0
    assert cu.cuStreamSynchronize(None) == 0
    check("cuMemFreeAsync", q.value, 5 * KiB, MemoryType.CUDA)
    h = ctypes.c_void_p()
    assert cu.cuMemAllocHost_v2(byref(h), 7 * KiB) == 0
    assert cu.cuMemFreeHost(h.value) == 0
    check("cuMemFreeHost", h.value, 7 * KiB, MemoryType.CUDA_HOST)
    # Freed by another thread than the allocating one, drained in between
    # or not.
    for drain_between in (False, True):
        r = alloc(cu, 9 * KiB)
        if drain_between:
            memhook.flush()
        t = threading.Thread(target=lambda: cu.cuMemFree_v2(r))
        t.start()
        t.join()
        check("cuMemFree_v2", r, 9 * KiB, MemoryType.CUDA)
    assert cu.cuMemFree_v2(before) == 0
    events = rec.take()
    rec.sub.close()
    got = frees_of(events, before)
    cases.check([(e.size, bool(e.flags & SIZE_UNKNOWN), e.result) for e in got]
                == [(0, True, 0)],
                f"the FREE of the allocation made before install: {fmt_all(got)}")
    cases.check(memhook.memory_type(before) != MemoryType.CUDA,
                "the allocation made before install, freed, still answers CUDA")


def asked_about(cases: Cases, cu, before: int, other: int) -> None:
    rec = Recorder()
    cases.check(memhook.memory_type(before + 4 * KiB, KiB) == MemoryType.CUDA,
                "the allocation made before install does not answer CUDA")
    cases.check(memhook.memory_type(other + 8 * KiB) == MemoryType.CUDA,
                "the other allocation made before install does not answer CUDA")
    rc_inside = cu.cuMemFree_v2(other + 8 * KiB)
    cases.check(rc_inside != 0, "the simulator freed a pointer inside an allocation")
    assert cu.cuMemFree_v2(before) == 0
    rc_twice = cu.cuMemFree_v2(before)
    cases.check(rc_twice != 0, "the simulator freed a pointer twice")
    events = rec.take()
    rec.sub.close()
    got = frees_of(events, before)
    cases.check([(e.size, e.mem_type, e.device, e.size_unknown, e.result) for e in got]
                == [(2 * MiB, MemoryType.CUDA, 0, False, 0),
                    (0, MemoryType.CUDA, -1, True, rc_twice)],
                f"the FREE of the allocation made before install, asked about: {fmt_all(got)}")
    inside = frees_of(events, other + 8 * KiB)
    cases.check([(e.result, e.size, e.size_unknown) for e in inside] == [(rc_inside, 0, True)],
                f"the refused free inside the other allocation: {fmt_all(inside)}")
    cases.check(memhook.memory_type(before) != MemoryType.CUDA,
                "the allocation made before install, freed, still answers CUDA")
    cases.check(memhook.memory_type(other + 8 * KiB) == MemoryType.CUDA,
                "after a refused free inside it, the other allocation no longer answers CUDA")
    assert cu.cuMemFree_v2(other) == 0


def refused(cases: Cases, cu) -> None:
    rec = Recorder()
    p = alloc(cu, 64 * KiB)
    rc_inside = cu.cuMemFree_v2(p + 4 * KiB)
    cases.check(rc_inside != 0, "the simulator freed a pointer inside an allocation")
    cases.check(memhook.memory_type(p + 32 * KiB) == MemoryType.CUDA,
                "after a refused free inside it, the allocation no longer answers CUDA")
    assert cu.cuMemFree_v2(p) == 0
    rc_twice = cu.cuMemFree_v2(p)
    cases.check(rc_twice != 0, "the simulator freed a pointer twice")
    events = rec.take()
    rec.sub.close()
    inside = frees_of(events, p + 4 * KiB)
    cases.check([(e.result, e.size_unknown) for e in inside] == [(rc_inside, True)],
                f"the refused free inside the allocation: {fmt_all(inside)}")
    at_p = frees_of(events, p)
    cases.check([(e.result, e.size) for e in at_p] == [(0, 64 * KiB), (rc_twice, 0)],
                f"the free and the refused second free: {fmt_all(at_p)}")


def exact(cases: Cases, cu, before: int) -> None:
    seen: list[memhook.Event] = []
    with memhook.subscribe(seen.append, exact=True):
        p = alloc(cu, 11 * KiB)
        assert cu.cuMemFree_v2(p) == 0
        assert cu.cuMemFree_v2(before) == 0
        memhook.flush()
    got = frees_of(seen, before)
    cases.check([(e.size, e.size_unknown) for e in got] == [(2 * MiB, False)],
                f"exact=True: the FREE of the allocation made before install: {fmt_all(got)}")
    got = frees_of(seen, p)
    cases.check([e.size for e in got] == [11 * KiB], f"exact=True: {fmt_all(got)}")
    coarse = [e for e in seen if e.timestamp_ns % 1000 == 0 and e.timestamp_ns % 10**6 == 0]
    cases.check(len(coarse) < len(seen), f"exact=True: no precise stamp among {fmt_all(seen)}")


def exact_switch(cases: Cases, cu, ctx) -> None:
    rec = Recorder()
    sizes = [4 * KiB * (i + 1) for i in range(3)]
    stop = threading.Event()
    tids: dict[int, int] = {}
    errors: list[str] = []

    def work(i: int) -> None:
        tids[threading.get_native_id()] = sizes[i]
        try:
            assert cu.cuCtxSetCurrent(ctx) == 0
            for _ in range(3000):  # (bounded: the recorder keeps every event)
                q = alloc(cu, sizes[i])
                assert cu.cuMemFree_v2(q) == 0
        except Exception as exc:  # noqa: BLE001 - the case's problem
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(sizes))]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            with memhook.subscribe(lambda e: None, exact=True):
                memhook.flush()
            memhook.flush()
    finally:
        stop.set()
        for t in threads:
            t.join()
    events = rec.take()
    rec.sub.close()
    cases.check(not errors, f"the threads failed: {errors}")
    frees = [e for e in events if e.kind == EventKind.FREE and e.tid in tids]
    wrong = [e for e in frees if e.size != tids[e.tid]]
    cases.check(len(frees) > 100, f"only {len(frees)} FREEs")
    cases.check(not wrong, f"{len(wrong)} FREEs without their thread's size: "
                           f"{fmt_all(wrong[:5])}")


def unmapped_together(cases: Cases, cu) -> None:
    prop = CUmemAllocationProp()
    prop.type, prop.location.type, prop.location.id = 1, 1, 0  # pinned, on device 0
    gran = ctypes.c_size_t()
    assert cu.cuMemGetAllocationGranularity(byref(gran), byref(prop), 0) == 0
    g = gran.value
    va, h1, h2, h3 = c_uint64(), c_uint64(), c_uint64(), c_uint64()
    assert cu.cuMemAddressReserve(byref(va), 2 * g, 0, 0, 0) == 0
    for h in (h1, h2, h3):
        assert cu.cuMemCreate(byref(h), g, byref(prop), 0) == 0
    desc = CUmemAccessDesc()
    desc.location.type, desc.location.id, desc.flags = 1, 0, 3
    rec = Recorder()
    second = va.value + g
    assert cu.cuMemMap(va.value, g, 0, h1.value, 0) == 0
    assert cu.cuMemMap(second, g, 0, h2.value, 0) == 0
    p = alloc(cu, 4 * KiB)  # (the second map's record goes to the drain's table)
    assert cu.cuMemFree_v2(p) == 0
    assert cu.cuMemUnmap(va.value, 2 * g) == 0
    assert cu.cuMemMap(second, g, 0, h3.value, 0) == 0
    assert cu.cuMemSetAccess(second, g, byref(desc), 1) == 0
    assert cu.cuMemUnmap(second, g) == 0
    rc_refused = cu.cuMemFree_v2(second)
    cases.check(rc_refused != 0, "the simulator freed a map with cuMemFree_v2")
    events = rec.take()
    rec.sub.close()
    got = [e for e in frees_of(events, second) if e.function == "cuMemFree_v2"]
    cases.check([(e.result, e.size, e.size_unknown) for e in got] == [(rc_refused, 0, True)],
                f"the refused free where the second map was: {fmt_all(got)}")
    for h in (h1, h2, h3):
        assert cu.cuMemRelease(h.value) == 0
    assert cu.cuMemAddressFree(va.value, 2 * g) == 0


def main() -> int:
    mode = mode_arg()
    cases = Cases()
    cu = load_driver()
    ctx = primary_context(cu)
    install(mode)
    for name in ("cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemFreeAsync",
                 "cuMemAllocHost_v2", "cuMemFreeHost", "cuStreamSynchronize", "cuMemMap",
                 "cuMemUnmap"):
        getattr(cu, name)  # (looked up under the hooks, as a program holds them)
    memhook.uninstall()
    befores = [alloc(cu, 2 * MiB) for _ in range(4)]  # while no hook records: unseen
    install(mode)
    with cases.case("without exact"):
        without_exact(cases, cu, mode, befores[0])
    with cases.case("asked about"):
        asked_about(cases, cu, befores[2], befores[3])
    with cases.case("refused"):
        refused(cases, cu)
    with cases.case("exact"):
        exact(cases, cu, befores[1])
    with cases.case("exact switch"):
        exact_switch(cases, cu, ctx)
    with cases.case("unmapped together"):
        unmapped_together(cases, cu)
    memhook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
