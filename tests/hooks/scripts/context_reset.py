"""Context teardowns free every allocation of a context with no hooked free:

    python context_reset.py MODE

cuDevicePrimaryCtxReset, cuCtxDestroy_v2, the last of two
cuDevicePrimaryCtxRelease calls (the first frees nothing), and the
runtime's cudaDeviceReset: after each, memory_type() of an allocation the
context held is not CUDA; a subscriber sees one FREE flagged
``context_reset`` for the device, in order after the allocation's ALLOC;
an allocation of a context that is still alive stays CUDA; and a new
allocation after the teardown is CUDA again (the simulator really frees:
its driver no longer knows the old pointer).
"""

from __future__ import annotations

import ctypes
import sys

from hkchild import Cases, Recorder, byref, c_int, c_uint64, c_void_p, load_driver, mode_arg, ok

import memhook
from memhook import EventKind, MemoryType
from memhook.events import CONTEXT_RESET


def alloc(cu, size: int) -> int:  # type: ignore[no-untyped-def]
    p = c_uint64()
    ok(cu.cuMemAlloc_v2(byref(p), size), "cuMemAlloc_v2")
    return p.value


def markers(events: list[memhook.Event]) -> list[memhook.Event]:
    return [e for e in events if e.context_reset]


def main() -> int:
    mode = mode_arg()
    cases = Cases()
    cu = load_driver()
    memhook.install({"bistro-far": "bistro"}.get(mode, mode))
    ok(cu.cuInit(0), "cuInit")
    dev = c_int()
    ok(cu.cuDeviceGet(byref(dev), 0), "cuDeviceGet")
    rec = Recorder()

    def retain() -> c_void_p:
        ctx = c_void_p()
        ok(cu.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return ctx

    with cases.case("flag value"):
        cases.check(CONTEXT_RESET == int(memhook._binding.core.lib.MEMHOOK_EVENT_CONTEXT_RESET),
                    "memhook.events.CONTEXT_RESET differs from the core's flag")

    with cases.case("cuDevicePrimaryCtxReset"):
        retain()
        p = alloc(cu, 1 << 20)
        cases.check(memhook.memory_type(p) is MemoryType.CUDA, "not CUDA while allocated")
        rec.take()
        ok(cu.cuDevicePrimaryCtxReset(dev), "cuDevicePrimaryCtxReset")
        got = memhook.memory_type(p)
        cases.check(got is not MemoryType.CUDA, f"after the reset memory_type = {got!r}")
        cases.check(memhook.lookup(p) is None, f"after the reset lookup = {memhook.lookup(p)!r}")
        evs = rec.take()
        m = markers(evs)
        cases.check(len(m) == 1 and m[0].kind is EventKind.FREE and m[0].device == 0
                    and m[0].function == "cuDevicePrimaryCtxReset" and m[0].ok
                    and m[0].address == 0 and m[0].size == 0,
                    f"markers: {[(e.function, e.device, e.result) for e in m]}")
        retain()
        q = alloc(cu, 4096)
        cases.check(memhook.memory_type(q) is MemoryType.CUDA, "a new allocation is not CUDA")
        ok(cu.cuMemFree_v2(q), "cuMemFree_v2")

    with cases.case("cuCtxDestroy_v2"):
        primary = retain()
        kept = alloc(cu, 1 << 16)  # the primary context's: it stays
        ctx = c_void_p()
        ok(cu.cuCtxCreate_v2(byref(ctx), 0, dev), "cuCtxCreate_v2")
        p = alloc(cu, 1 << 20)
        cases.check(memhook.memory_type(p) is MemoryType.CUDA, "not CUDA while allocated")
        rec.take()
        ok(cu.cuCtxDestroy_v2(ctx), "cuCtxDestroy_v2")
        ok(cu.cuCtxSetCurrent(primary), "cuCtxSetCurrent")
        got = memhook.memory_type(p)
        cases.check(got is not MemoryType.CUDA, f"after the destroy memory_type = {got!r}")
        got = memhook.memory_type(kept)
        cases.check(got is MemoryType.CUDA, f"the primary context's allocation: {got!r}")
        m = markers(rec.take())
        cases.check(len(m) == 1 and m[0].function == "cuCtxDestroy_v2" and m[0].device == 0,
                    f"markers: {[(e.function, e.device) for e in m]}")
        ok(cu.cuMemFree_v2(kept), "cuMemFree_v2")

    with cases.case("the last cuDevicePrimaryCtxRelease"):
        ok(cu.cuDevicePrimaryCtxReset(dev), "cuDevicePrimaryCtxReset")  # refcount 0
        retain()
        retain()
        p = alloc(cu, 1 << 20)
        rec.take()
        ok(cu.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")  # one left
        cases.check(memhook.memory_type(p) is MemoryType.CUDA, "freed by a release not the last")
        cases.check(markers(rec.take()) == [], "a marker for a release that was not the last")
        ok(cu.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")  # the last
        got = memhook.memory_type(p)
        cases.check(got is not MemoryType.CUDA, f"after the last release memory_type = {got!r}")
        m = markers(rec.take())
        cases.check(len(m) == 1 and m[0].function.startswith("cuDevicePrimaryCtxRelease"),
                    f"markers: {[(e.function, e.device) for e in m]}")

    with cases.case("a failed teardown"):
        rec.take()
        bad = cu.cuDevicePrimaryCtxRelease(dev)  # not retained: refused
        cases.check(bad != 0, "releasing an inactive primary context succeeded")
        m = markers(rec.take())
        cases.check(len(m) == 1 and m[0].result == bad, f"markers: {[e.result for e in m]}")

    with cases.case("cudaDeviceReset"):
        rt = ctypes.CDLL("libcudart.so.13")
        ok(cu.cuCtxSetCurrent(None), "cuCtxSetCurrent")  # (the primary context: released)
        ptr = c_void_p()
        ok(rt.cudaMalloc(byref(ptr), ctypes.c_size_t(1 << 20)), "cudaMalloc")
        cases.check(memhook.memory_type(ptr.value) is MemoryType.CUDA, "not CUDA while allocated")
        rec.take()
        ok(rt.cudaDeviceReset(), "cudaDeviceReset")
        got = memhook.memory_type(ptr.value)
        cases.check(got is not MemoryType.CUDA, f"after cudaDeviceReset memory_type = {got!r}")
        cases.check(len(markers(rec.take())) >= 1, "no marker for cudaDeviceReset")
    memhook.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
