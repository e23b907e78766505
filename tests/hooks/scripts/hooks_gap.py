"""Answers across a time without hooks (uninstall, reinstall):

    python hooks_gap.py MODE

Every kind of memory the hooks see - device (cuMemAlloc_v2), managed,
pinned host (cuMemAllocHost_v2), registered host (cuMemHostRegister_v2),
pool (cuMemAllocAsync) and IPC (cuIpcOpenMemHandle_v2 of a handle another
process exported) - goes through:

  gap KIND drained|pending
      allocate 1 MiB under the hooks (its ALLOC applied before the
      uninstall, or still pending), uninstall, free it, query while
      uninstalled, reinstall, flush, query again: memory_type,
      memory_types and lookup never answer the freed range as CUDA's
      memory (the driver says it is not).

  reuse KIND smaller|same|larger
      allocate X under the hooks, uninstall, free it, allocate B at the
      same address (4 KiB, 1 MiB or 2 MiB over an X of 1 MiB, 1 MiB, 4
      KiB), reinstall, allocate a neighbour, then free B: B answers its
      type while live; its FREE reaches a subscriber (without exact
      sizes) once, with B's size (the driver's answer to those queries,
      which the cache remembered: no hook saw B's ALLOC);
      afterwards nothing of X or B answers CUDA's, and the neighbour does;
      no subscriber sees the gap markers.

The functions are looked up while the hooks are in (with reloc, the
wrappers), as a program that resolved them once would hold them.

    python hooks_gap.py MODE churn

  churn
      four threads allocate and free device memory (each its own size) as
      fast as they can while the main thread uninstalls and reinstalls the
      hooks again and again, so calls run across every switch and frees
      go by unseen: every FREE a subscriber gets carries its thread's size,
      or none (size_unknown: its ALLOC went by unseen), and once all is freed and the hooks are back, no address any thread
      had answers CUDA's.

    python hooks_gap.py none

  no hooks KIND never|none
      with install() never called, then with install("none"): allocate,
      query (the driver answers), query again, free, query: never CUDA's
      once freed - without hooks a driver answer is not remembered as
      knowledge.
"""

from __future__ import annotations

import ctypes
import mmap
import subprocess
import sys
from typing import Callable

from hkchild import (Cases, CUipcMemHandle, Recorder, byref, c_uint64, c_void_p, fmt_all,
                     install, load_driver, mode_arg, primary_context)

import memhook
from memhook import EventKind, MemoryType

KiB, MiB = 1 << 10, 1 << 20
GPU = (MemoryType.CUDA, MemoryType.CUDA_MANAGED, MemoryType.CUDA_HOST)
GAP_FLAG = 0x10  # MEMHOOK_EVENT_HOOKS_GAP: the cache's, never a subscriber's

EXPORTER = r"""
import ctypes, sys
import memhook.sim
cu = memhook.sim.activate()
assert cu.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]
for size in (4096, 1 << 20, 2 << 20):
    p = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)) == 0
    h = Handle()
    assert cu.cuIpcGetMemHandle(ctypes.byref(h), p) == 0
    print(size, bytes(h).hex(), flush=True)
sys.stdin.read()  # alive until the importer is done
"""


class Kind:
    """How to make and end one kind of memory, and the type it answers."""

    def __init__(self, name: str, alloc: Callable[[int], int], free: Callable[[int], None],
                 mem_type: MemoryType, free_name: str) -> None:
        self.name, self.alloc, self.free = name, alloc, free
        self.mem_type, self.free_name = mem_type, free_name


def kinds(cu, handles: dict[int, bytes], arena: int) -> list[Kind]:
    def out(fn: Callable[[ctypes.c_uint64], int], what: str) -> int:
        p = c_uint64()
        rc = fn(p)
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")
        return p.value

    def ok(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    def sync() -> None:
        ok(cu.cuStreamSynchronize(None), "cuStreamSynchronize")

    def pool_alloc(n: int) -> int:
        p = out(lambda p: cu.cuMemAllocAsync(byref(p), n, None), "cuMemAllocAsync")
        sync()
        return p

    def pool_free(p: int) -> None:
        ok(cu.cuMemFreeAsync(p, None), "cuMemFreeAsync")
        sync()

    def ipc_open(n: int) -> int:
        h = CUipcMemHandle.from_buffer_copy(handles[n])
        return out(lambda p: cu.cuIpcOpenMemHandle_v2(byref(p), h, 1), "cuIpcOpenMemHandle_v2")

    def register(n: int) -> int:
        ok(cu.cuMemHostRegister_v2(c_void_p(arena), n, 0), "cuMemHostRegister_v2")
        return arena

    return [
        Kind("device", lambda n: out(lambda p: cu.cuMemAlloc_v2(byref(p), n), "cuMemAlloc_v2"),
             lambda p: ok(cu.cuMemFree_v2(p), "cuMemFree_v2"), MemoryType.CUDA, "cuMemFree_v2"),
        Kind("managed",
             lambda n: out(lambda p: cu.cuMemAllocManaged(byref(p), n, 1), "cuMemAllocManaged"),
             lambda p: ok(cu.cuMemFree_v2(p), "cuMemFree_v2"), MemoryType.CUDA_MANAGED,
             "cuMemFree_v2"),
        Kind("pinned",
             lambda n: out(lambda p: cu.cuMemAllocHost_v2(ctypes.cast(byref(p), ctypes.POINTER(
                 c_void_p)), n), "cuMemAllocHost_v2"),
             lambda p: ok(cu.cuMemFreeHost(c_void_p(p)), "cuMemFreeHost"),
             MemoryType.CUDA_HOST, "cuMemFreeHost"),
        Kind("registered", register,
             lambda p: ok(cu.cuMemHostUnregister(c_void_p(p)), "cuMemHostUnregister"),
             MemoryType.CUDA_HOST, "cuMemHostUnregister"),
        Kind("pool", pool_alloc, pool_free, MemoryType.CUDA, "cuMemFreeAsync"),
        Kind("ipc", ipc_open, lambda p: ok(cu.cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle"),
             MemoryType.CUDA, "cuIpcCloseMemHandle"),
    ]


def driver_type(ptr: int) -> MemoryType:
    """What the driver itself says of ``ptr`` (HOST: it does not know it)."""
    from memhook._binding import driver as _driver

    answer = _driver.query(ptr, 1)
    return MemoryType.UNKNOWN if answer is None else answer.mem_type


def answers(ptr: int) -> dict[str, object]:
    """memhook's three answers for one byte at ``ptr``."""
    region = memhook.lookup(ptr)
    return {"memory_type": memhook.memory_type(ptr),
            "memory_types": MemoryType(int(memhook.memory_types([ptr])[0])),
            "lookup": None if region is None else region.mem_type}


def expect_gone(cases: Cases, ptr: int, what: str) -> None:
    """No query answers ``ptr`` as CUDA's memory, and the driver agrees."""
    truth = driver_type(ptr)
    cases.check(truth == MemoryType.HOST, f"{what}: the driver says {truth.name} (not freed?)")
    for name, got in answers(ptr).items():
        cases.check(got not in GPU, f"{what}: {name}({ptr:#x}) answers {got}, the driver HOST")


def expect_live(cases: Cases, ptr: int, want: MemoryType, what: str) -> None:
    for name, got in answers(ptr).items():
        cases.check(got == want, f"{what}: {name}({ptr:#x}) answers {got}, want {want.name}")


def gap(cases: Cases, mode: str, kind: Kind, drained: bool) -> None:
    install(mode)
    x = kind.alloc(MiB)
    if drained:
        memhook.flush()
        expect_live(cases, x, kind.mem_type, "before the uninstall")
    memhook.uninstall()
    kind.free(x)
    expect_gone(cases, x, "freed while uninstalled")
    expect_gone(cases, x + 64 * KiB, "freed while uninstalled (inside)")
    install(mode)
    memhook.flush()
    expect_gone(cases, x, "after the reinstall")
    expect_gone(cases, x + 64 * KiB, "after the reinstall (inside)")


REUSE = {"smaller": (MiB, 4 * KiB), "same": (MiB, MiB), "larger": (4 * KiB, 2 * MiB)}


def reuse(cases: Cases, mode: str, kind: Kind, rec: Recorder, shape: str) -> None:
    x_size, b_size = REUSE[shape]
    install(mode)
    x = kind.alloc(x_size)
    memhook.uninstall()
    kind.free(x)
    b = kind.alloc(b_size)
    if b != x:
        kind.free(b)
        cases.note(f"{kind.name}: B came at {b:#x}, not at X's {x:#x}: no reuse to test")
        return
    install(mode)
    neighbour = None
    if kind.name in ("device", "managed", "pinned", "pool"):
        neighbour = kind.alloc(4 * KiB)
    markers = [e for e in rec.take() if e.flags & GAP_FLAG or not e.kind]
    cases.check(not markers, f"a subscriber got the gap markers: {fmt_all(markers)}")
    expect_live(cases, b, kind.mem_type, "B, allocated unseen")
    expect_live(cases, b + b_size - 1, kind.mem_type, "B's last byte")
    kind.free(b)
    frees = [e for e in rec.take() if e.kind == EventKind.FREE and e.address == b]
    cases.check([(e.function, e.size) for e in frees] == [(kind.free_name, b_size)],
                f"the FREE of B ({b_size} bytes at {b:#x}): {fmt_all(frees)}")
    for off in sorted({0, 4 * KiB, x_size - 1, b_size - 1, max(x_size, b_size) - 1}):
        if neighbour is None or not neighbour <= b + off < neighbour + 4 * KiB:
            expect_gone(cases, b + off, f"{off:#x} into freed B/X")
    if neighbour is not None:
        expect_live(cases, neighbour, kind.mem_type, "the neighbour allocated after reinstall")
        kind.free(neighbour)
        rec.take()


def no_hooks(cases: Cases, kind: Kind) -> None:
    x = kind.alloc(MiB)
    for _ in range(2):  # (the second time from whatever the first left behind)
        expect_live(cases, x, kind.mem_type, "live")
        expect_live(cases, x + MiB - 1, kind.mem_type, "live, its last byte")
    kind.free(x)
    expect_gone(cases, x, "freed")
    expect_gone(cases, x + MiB - 1, "freed, its last byte")


def churn(cases: Cases, mode: str, cu, ctx: c_void_p) -> None:
    import threading
    import time

    sizes = [4 * KiB * (i + 1) for i in range(4)]
    seen: list[set[int]] = [set() for _ in sizes]
    tids: dict[int, int] = {}
    stop = threading.Event()
    errors: list[str] = []

    def work(i: int) -> None:
        tids[threading.get_native_id()] = sizes[i]
        p = c_uint64()
        try:
            if cu.cuCtxSetCurrent(ctx) != 0:
                raise RuntimeError("cuCtxSetCurrent failed")
            while not stop.is_set():
                if cu.cuMemAlloc_v2(byref(p), sizes[i]) != 0:
                    raise RuntimeError("cuMemAlloc_v2 failed")
                seen[i].add(p.value)
                if cu.cuMemFree_v2(p.value) != 0:
                    raise RuntimeError("cuMemFree_v2 failed")
        except Exception as exc:  # noqa: BLE001 - reported as the case's problem
            errors.append(f"thread {i}: {exc!r}")

    rec = Recorder()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(sizes))]
    for t in threads:
        t.start()
    try:
        for _ in range(40):
            memhook.uninstall()
            time.sleep(0.002)
            install(mode)
            time.sleep(0.002)
    finally:
        stop.set()
        for t in threads:
            t.join()
    cases.check(not errors, f"the threads failed: {errors}")
    events = rec.take()
    wrong = [e for e in events if e.kind == EventKind.FREE and e.tid in tids
             and e.size != tids[e.tid] and not (e.size_unknown and e.size == 0)]
    cases.check(not wrong, f"{len(wrong)} FREEs with another size than their thread's: "
                           f"{fmt_all(wrong[:5])}")
    frees = sum(e.kind == EventKind.FREE for e in events)
    cases.check(frees > 100, f"only {frees} FREEs seen: the threads did not churn")
    addresses = sorted(set().union(*seen))
    cases.note(f"{frees} FREEs seen, {len(addresses)} addresses")
    for p in addresses[:500]:
        got = answers(p)
        if any(t in GPU for t in got.values()):
            cases.check(False, f"{p:#x}, freed by its thread, answers {got}")
            break


def main() -> int:
    mode = mode_arg()
    if sys.argv[2:] == ["churn"]:
        cases = Cases()
        cu = load_driver()
        install(mode)
        ctx = primary_context(cu)
        cu.cuMemAlloc_v2, cu.cuMemFree_v2  # (looked up under the hooks)
        with cases.case("churn"):
            churn(cases, mode, cu, ctx)
        memhook.uninstall()
        return 0
    cases = Cases()
    exporter = subprocess.Popen([sys.executable, "-c", EXPORTER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        assert exporter.stdout is not None
        handles = {}
        for _ in range(3):
            size, hexed = exporter.stdout.readline().split()
            handles[int(size)] = bytes.fromhex(hexed)
        arena = mmap.mmap(-1, 4 * MiB)
        arena_addr = ctypes.addressof(ctypes.c_char.from_buffer(arena))
        cu = load_driver()
        if mode == "none":
            primary_context(cu)
            every = kinds(cu, handles, arena_addr)
            for how in ("never", "none"):
                if how == "none":
                    install("none")
                for kind in every:
                    with cases.case(f"no hooks {kind.name} {how}"):
                        no_hooks(cases, kind)
            return 0
        install(mode)
        primary_context(cu)
        every = kinds(cu, handles, arena_addr)
        # Looked up now, while reloc's dlsym answers with the wrappers.
        for name in ("cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocManaged", "cuMemAllocHost_v2",
                     "cuMemFreeHost", "cuMemHostRegister_v2", "cuMemHostUnregister",
                     "cuMemAllocAsync", "cuMemFreeAsync", "cuStreamSynchronize",
                     "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle"):
            getattr(cu, name)
        rec = Recorder()
        for kind in every:
            for drained in (True, False):
                with cases.case(f"gap {kind.name} {'drained' if drained else 'pending'}"):
                    gap(cases, mode, kind, drained)
            for shape in REUSE:
                with cases.case(f"reuse {kind.name} {shape}"):
                    reuse(cases, mode, kind, rec, shape)
        memhook.uninstall()
    finally:
        if exporter.stdin is not None:
            exporter.stdin.close()
        exporter.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
