"""Every hooked driver entry point of the simulator, in one mode:

    python driver_api.py MODE IPC_CHILD_SCRIPT

For each API: allocations of 64 B, 1 MiB and 256 MiB freed in allocation
order and in reverse (one ALLOC and one FREE each, right name, size, type,
device; memory_type() right while allocated and HOST after), a free of NULL
(no event) and a failed allocation (one ALLOC with the error, address 0,
nothing cached).  IPC opens happen in a child process (the simulator, like
the driver, refuses to open a handle in the process that exported it).
See hkchild.py for how outcomes are reported.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import subprocess
import sys

from hkchild import (
    SIZES,
    Cases,
    CUipcMemHandle,
    CUmemAccessDesc,
    CUmemAllocationProp,
    CUmemPoolProps,
    MiB,
    Recorder,
    alloc_free_v2,
    byref,
    c_size_t,
    c_uint,
    c_uint64,
    c_void_p,
    check_install,
    expect_none,
    expect_one,
    expect_type,
    fmt_all,
    install,
    load_driver,
    mode_arg,
    primary_context,
    run_api_rounds,
    run_failure,
    run_null_free,
)

import memhook
from memhook import EventKind, MemoryType

HUGE = 1 << 50  # more than any simulated device or host has
MT = MemoryType


def main() -> int:
    mode = mode_arg()
    ipc_child = sys.argv[2]
    cases = Cases()
    with cases.case("install"):
        report = install(mode)
        check_install(cases, mode, report)
    rec = Recorder()
    cu = load_driver()
    ctx = primary_context(cu)
    with cases.case("coverage"):
        cases.check(memhook.status().coverage_complete,
                    f"coverage is not complete: {memhook.status().uncovered}")
    u32, u64, vp, sz = ctypes.c_uint32, c_uint64, c_void_p, c_size_t

    # ---- device memory, 64-bit ABI ----
    alloc_v2, free_v2 = alloc_free_v2(cu)

    with cases.case("cuMemAlloc_v2"):
        run_api_rounds(cases, rec, alloc=alloc_v2, free=free_v2, alloc_name="cuMemAlloc_v2",
                       free_name="cuMemFree_v2", ev_type=MT.CUDA, query_type=MT.CUDA, device=0)
        run_null_free(cases, rec, call=lambda: cu.cuMemFree_v2(0), what="cuMemFree_v2(0)")
        run_failure(cases, rec, call=lambda: cu.cuMemAlloc_v2(byref(u64()), HUGE),
                    name="cuMemAlloc_v2", size=HUGE, what="cuMemAlloc_v2(2^50)")
        run_failure(cases, rec, call=lambda: cu.cuMemAlloc_v2(byref(u64()), 0),
                    name="cuMemAlloc_v2", size=0, what="cuMemAlloc_v2(0)")

    with cases.case("original entry"):
        # memhook_hooks_original: what the wrapper calls, bypassing the hook
        # (bench/hooks/hook_bench.c times it against the hooked entry).
        from memhook._binding.core import ffi, lib
        orig_alloc = lib.memhook_hooks_original(b"cuMemAlloc_v2")
        orig_free = lib.memhook_hooks_original(b"cuMemFree_v2")
        cases.check(orig_alloc != ffi.NULL and orig_free != ffi.NULL,
                    "memhook_hooks_original has no answer for cuMemAlloc_v2/cuMemFree_v2")
        cases.check(lib.memhook_hooks_original(b"cuNoSuchFunction") == ffi.NULL,
                    "an answer for a name outside the hook table")
        rec.take()
        if orig_alloc != ffi.NULL and orig_free != ffi.NULL:
            a = ffi.cast("int (*)(uint64_t *, size_t)", orig_alloc)
            f = ffi.cast("int (*)(uint64_t)", orig_free)
            ptr = ffi.new("uint64_t *")
            cases.check(a(ptr, 4096) == 0 and ptr[0] != 0, "the original cuMemAlloc_v2 failed")
            cases.check(cu.cuMemGetAddressRange_v2(None, byref(u64()), ptr[0]) == 0,
                        "the driver does not know the original's allocation")
            cases.check(f(ptr[0]) == 0, "the original cuMemFree_v2 failed")
            evs = rec.take()
            cases.check(not evs, f"calls through the originals made events: {fmt_all(evs)}")
            p, _ = alloc_v2(4096)  # and the hooked entry still records
            free_v2(p)
            kinds = [e.kind for e in rec.take()]
            cases.check(kinds == [EventKind.ALLOC, EventKind.FREE],
                        f"the hooked entry after the originals: {kinds}")

    def alloc_pitch_v2(size):
        width, height = (64, 1) if size == 64 else (1024, size // 1024)
        p, pitch = u64(), sz()
        assert cu.cuMemAllocPitch_v2(byref(p), byref(pitch), width, height, 4) == 0
        return p.value, pitch.value * height

    with cases.case("cuMemAllocPitch_v2"):
        run_api_rounds(cases, rec, alloc=alloc_pitch_v2, free=free_v2,
                       alloc_name="cuMemAllocPitch_v2", free_name="cuMemFree_v2",
                       ev_type=MT.CUDA, query_type=MT.CUDA, device=0)
        run_failure(cases, rec, call=lambda: cu.cuMemAllocPitch_v2(
            byref(u64()), byref(sz()), 1 << 20, 1 << 30, 4), name="cuMemAllocPitch_v2",
            size=(1 << 20) * (1 << 30), what="cuMemAllocPitch_v2(1 MiB x 2^30)")
        run_failure(cases, rec, call=lambda: cu.cuMemAllocPitch_v2(
            byref(u64()), byref(sz()), 64, 4, 3), name="cuMemAllocPitch_v2", size=256,
            what="cuMemAllocPitch_v2(element size 3)")

    def alloc_managed(size):
        p = u64()
        assert cu.cuMemAllocManaged(byref(p), size, 1) == 0
        return p.value, size

    with cases.case("cuMemAllocManaged"):
        run_api_rounds(cases, rec, alloc=alloc_managed, free=free_v2,
                       alloc_name="cuMemAllocManaged", free_name="cuMemFree_v2",
                       ev_type=MT.CUDA_MANAGED, query_type=MT.CUDA_MANAGED, device=0)
        run_failure(cases, rec, call=lambda: cu.cuMemAllocManaged(byref(u64()), HUGE, 1),
                    name="cuMemAllocManaged", size=HUGE, what="cuMemAllocManaged(2^50)")
        run_failure(cases, rec, call=lambda: cu.cuMemAllocManaged(byref(u64()), 64, 7),
                    name="cuMemAllocManaged", size=64, what="cuMemAllocManaged(flags 7)")

    # ---- page-locked host memory ----
    def alloc_host_v2(size):
        p = vp()
        assert cu.cuMemAllocHost_v2(byref(p), size) == 0
        return p.value, size

    def alloc_host_alloc(size):
        p = vp()
        assert cu.cuMemHostAlloc(byref(p), size, 0) == 0
        return p.value, size

    def free_host(p):
        assert cu.cuMemFreeHost(p) == 0

    with cases.case("cuMemAllocHost_v2"):
        run_api_rounds(cases, rec, alloc=alloc_host_v2, free=free_host,
                       alloc_name="cuMemAllocHost_v2", free_name="cuMemFreeHost",
                       ev_type=MT.CUDA_HOST, query_type=MT.CUDA_HOST, device=0)
        run_null_free(cases, rec, call=lambda: cu.cuMemFreeHost(None), what="cuMemFreeHost(NULL)")
        run_failure(cases, rec, call=lambda: cu.cuMemAllocHost_v2(byref(vp()), HUGE),
                    name="cuMemAllocHost_v2", size=HUGE, what="cuMemAllocHost_v2(2^50)")

    with cases.case("cuMemHostAlloc"):
        run_api_rounds(cases, rec, alloc=alloc_host_alloc, free=free_host,
                       alloc_name="cuMemHostAlloc", free_name="cuMemFreeHost",
                       ev_type=MT.CUDA_HOST, query_type=MT.CUDA_HOST, device=0)
        run_failure(cases, rec, call=lambda: cu.cuMemHostAlloc(byref(vp()), HUGE, 0),
                    name="cuMemHostAlloc", size=HUGE, what="cuMemHostAlloc(2^50)")
        run_failure(cases, rec, call=lambda: cu.cuMemHostAlloc(byref(vp()), 64, 0x100),
                    name="cuMemHostAlloc", size=64, what="cuMemHostAlloc(bad flags)")

    # host registration: ranges of one anonymous mapping, at distinct offsets
    arena_size = 2 * 256 * MiB
    arena = mmap.mmap(-1, arena_size)
    arena_base = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    offsets = {64: 0, MiB: 4096, 256 * MiB: 4096 + MiB}

    for reg in ("cuMemHostRegister", "cuMemHostRegister_v2"):
        def alloc_register(size, reg=reg):
            p = arena_base + offsets[size]
            assert getattr(cu, reg)(p, size, 0) == 0
            return p, size

        def unregister(p):
            assert cu.cuMemHostUnregister(p) == 0

        with cases.case(reg):
            run_api_rounds(cases, rec, alloc=alloc_register, free=unregister, alloc_name=reg,
                           free_name="cuMemHostUnregister", ev_type=MT.CUDA_HOST,
                           query_type=MT.CUDA_HOST, device=0)
            run_null_free(cases, rec, call=lambda: cu.cuMemHostUnregister(None),
                          what="cuMemHostUnregister(NULL)")
            run_failure(cases, rec, call=lambda reg=reg: getattr(cu, reg)(arena_base, 0, 0),
                        name=reg, size=0, what=f"{reg}(size 0)")
            # the same range twice: HOST_MEMORY_ALREADY_REGISTERED
            assert getattr(cu, reg)(arena_base, 4096, 0) == 0
            rec.take()
            run_failure(cases, rec, call=lambda reg=reg: getattr(cu, reg)(arena_base, 4096, 0),
                        name=reg, size=4096, what=f"{reg} twice")
            assert cu.cuMemHostUnregister(arena_base) == 0
            rec.take()

    # ---- virtual memory management: a map is an allocation of its range,
    # typed by where its handle's memory lives ----
    def location_prop(location_type):
        prop = CUmemAllocationProp()
        prop.type = 1                          # CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = location_type     # 1 DEVICE, 2 HOST
        prop.location.id = 0
        return prop

    dev_prop, host_prop = location_prop(1), location_prop(2)
    gran = sz()
    assert cu.cuMemGetAllocationGranularity(byref(gran), byref(dev_prop), 0) == 0
    vmm: dict[int, tuple[int, int]] = {}

    def vmm_map(size, prop):
        msize = -(-size // gran.value) * gran.value
        h, va = u64(), u64()
        assert cu.cuMemCreate(byref(h), msize, byref(prop), 0) == 0
        assert cu.cuMemAddressReserve(byref(va), msize, 0, 0, 0) == 0
        assert cu.cuMemMap(va, msize, 0, h, 0) == 0
        desc = CUmemAccessDesc()
        desc.location.type, desc.location.id, desc.flags = prop.location.type, 0, 3
        assert cu.cuMemSetAccess(va, msize, byref(desc), 1) == 0
        vmm[va.value] = (h.value, msize)
        return va.value, msize

    def vmm_unmap(va):
        h, msize = vmm.pop(va)
        assert cu.cuMemUnmap(va, msize) == 0
        assert cu.cuMemRelease(h) == 0
        assert cu.cuMemAddressFree(va, msize) == 0

    with cases.case("cuMemMap"):
        run_api_rounds(cases, rec, alloc=lambda n: vmm_map(n, dev_prop), free=vmm_unmap,
                       alloc_name="cuMemMap", free_name="cuMemUnmap", ev_type=MT.CUDA,
                       query_type=MT.CUDA, device=0)
        run_null_free(cases, rec, call=lambda: cu.cuMemUnmap(0, gran.value),
                      what="cuMemUnmap(0)")
        va = u64()
        assert cu.cuMemAddressReserve(byref(va), gran.value, 0, 0, 0) == 0
        run_failure(cases, rec, call=lambda: cu.cuMemMap(va, gran.value, 0, 0, 0),
                    name="cuMemMap", size=gran.value, what="cuMemMap(handle 0)")
        assert cu.cuMemAddressFree(va, gran.value) == 0

    with cases.case("cuMemMap (host memory)"):
        run_api_rounds(cases, rec, alloc=lambda n: vmm_map(n, host_prop), free=vmm_unmap,
                       alloc_name="cuMemMap", free_name="cuMemUnmap", ev_type=MT.CUDA_HOST,
                       query_type=MT.CUDA_HOST, device=-1)

    # ---- stream-ordered allocation ----
    for suffix in ("", "_ptsz"):
        alloc_async_name, free_async_name = "cuMemAllocAsync" + suffix, "cuMemFreeAsync" + suffix

        def alloc_async(size, name=alloc_async_name):
            p = u64()
            assert getattr(cu, name)(byref(p), size, None) == 0
            return p.value, size

        def free_async(p, name=free_async_name):
            assert getattr(cu, name)(p, None) == 0

        with cases.case(alloc_async_name):
            run_api_rounds(cases, rec, alloc=alloc_async, free=free_async,
                           alloc_name=alloc_async_name, free_name=free_async_name,
                           ev_type=MT.CUDA, query_type=MT.CUDA, device=0)
            run_null_free(cases, rec, call=lambda n=free_async_name: getattr(cu, n)(0, None),
                          what=f"{free_async_name}(0)")
            run_failure(cases, rec,
                        call=lambda n=alloc_async_name: getattr(cu, n)(byref(u64()), HUGE, None),
                        name=alloc_async_name, size=HUGE, what=f"{alloc_async_name}(2^50)")

    pool = vp()
    pprops = CUmemPoolProps()
    pprops.allocType = 1
    pprops.location.type, pprops.location.id = 1, 0
    assert cu.cuMemPoolCreate(byref(pool), byref(pprops)) == 0
    for suffix in ("", "_ptsz"):
        alloc_pool_name, free_async_name = ("cuMemAllocFromPoolAsync" + suffix,
                                            "cuMemFreeAsync" + suffix)

        def alloc_pool(size, name=alloc_pool_name):
            p = u64()
            assert getattr(cu, name)(byref(p), size, pool, None) == 0
            return p.value, size

        def free_pool(p, name=free_async_name):
            assert getattr(cu, name)(p, None) == 0

        with cases.case(alloc_pool_name):
            # an explicit pool may be host-located: UNKNOWN in the event,
            # memory_type() asks the driver (this pool is on the device)
            run_api_rounds(cases, rec, alloc=alloc_pool, free=free_pool,
                           alloc_name=alloc_pool_name, free_name=free_async_name,
                           ev_type=MT.UNKNOWN, query_type=MT.CUDA, device=(-1, 0))
            run_failure(cases, rec, call=lambda n=alloc_pool_name: getattr(cu, n)(
                byref(u64()), HUGE, pool, None), name=alloc_pool_name, size=HUGE,
                what=f"{alloc_pool_name}(2^50)")
    assert cu.cuStreamSynchronize(None) == 0
    assert cu.cuMemPoolDestroy(pool) == 0

    # ---- IPC: opened in a child process ----
    exported, owned = [], []
    for size in SIZES:
        p = u64()
        assert cu.cuMemAlloc_v2(byref(p), size) == 0
        h = CUipcMemHandle()
        assert cu.cuIpcGetMemHandle(byref(h), p) == 0
        exported.append((bytes(h).hex(), size))
        owned.append(p.value)
    rec.take()
    with cases.case("cuIpcOpenMemHandle_v2 (exporting process)"):
        run_failure(cases, rec, call=lambda: cu.cuIpcOpenMemHandle_v2(byref(u64()), h, 1),
                    name="cuIpcOpenMemHandle_v2", size=None,
                    what="cuIpcOpenMemHandle_v2 of this process's own handle")
    child = subprocess.run([sys.executable, ipc_child, sys.argv[1], json.dumps(exported)],
                           capture_output=True, text=True, timeout=120, check=False)
    _relay_child(cases, child)
    for p in owned:
        assert cu.cuMemFree_v2(p) == 0
    rec.take()

    # ---- the 32-bit v1 ABI: needs a context made by the v1 cuCtxCreate ----
    legacy = vp()
    assert cu.cuCtxCreate(byref(legacy), 0, 0) == 0
    rec.take()

    def alloc_v1(size):
        p = u32()
        assert cu.cuMemAlloc(byref(p), size) == 0
        return p.value, size

    def free_v1(p):
        assert cu.cuMemFree(p) == 0

    # The legacy window below 4 GiB is 256 MiB in all: the three sizes live
    # at once need 64 B + 1 MiB + the rest; 256 MiB itself is allocated alone.
    v1_sizes = (64, MiB, 254 * MiB)
    with cases.case("cuMemAlloc"):
        run_api_rounds(cases, rec, alloc=alloc_v1, free=free_v1, alloc_name="cuMemAlloc",
                       free_name="cuMemFree", ev_type=MT.CUDA, query_type=MT.CUDA, device=0,
                       sizes=v1_sizes)
        run_api_rounds(cases, rec, alloc=alloc_v1, free=free_v1, alloc_name="cuMemAlloc",
                       free_name="cuMemFree", ev_type=MT.CUDA, query_type=MT.CUDA, device=0,
                       sizes=(256 * MiB,))
        run_null_free(cases, rec, call=lambda: cu.cuMemFree(0), what="cuMemFree(0)")
        run_failure(cases, rec, call=lambda: cu.cuMemAlloc(byref(u32()), 0xFFFFF000),
                    name="cuMemAlloc", size=0xFFFFF000, what="cuMemAlloc(4 GiB - 4 KiB)")

    def alloc_pitch_v1(size):
        width, height = (64, 1) if size == 64 else (1024, size // 1024)
        p, pitch = u32(), c_uint()
        assert cu.cuMemAllocPitch(byref(p), byref(pitch), width, height, 4) == 0
        return p.value, pitch.value * height

    with cases.case("cuMemAllocPitch"):
        run_api_rounds(cases, rec, alloc=alloc_pitch_v1, free=free_v1,
                       alloc_name="cuMemAllocPitch", free_name="cuMemFree", ev_type=MT.CUDA,
                       query_type=MT.CUDA, device=0, sizes=v1_sizes)
        run_api_rounds(cases, rec, alloc=alloc_pitch_v1, free=free_v1,
                       alloc_name="cuMemAllocPitch", free_name="cuMemFree", ev_type=MT.CUDA,
                       query_type=MT.CUDA, device=0, sizes=(256 * MiB,))
        run_failure(cases, rec, call=lambda: cu.cuMemAllocPitch(
            byref(u32()), byref(c_uint()), 1 << 16, 1 << 16, 4), name="cuMemAllocPitch",
            size=1 << 32, what="cuMemAllocPitch(64 KiB x 64 Ki)")

    def alloc_host_v1(size):
        p = vp()
        assert cu.cuMemAllocHost(byref(p), size) == 0
        return p.value, size

    with cases.case("cuMemAllocHost"):
        run_api_rounds(cases, rec, alloc=alloc_host_v1, free=free_host,
                       alloc_name="cuMemAllocHost", free_name="cuMemFreeHost",
                       ev_type=MT.CUDA_HOST, query_type=MT.CUDA_HOST, device=0)
        run_failure(cases, rec, call=lambda: cu.cuMemAllocHost(byref(vp()), 0),
                    name="cuMemAllocHost", size=0, what="cuMemAllocHost(0)")
    assert cu.cuCtxDestroy_v2(legacy) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    rec.take()

    # ---- module and library globals (last: nothing frees them in the cache) ----
    image = (b"MEMHOOK-SIM-MODULE 1\n"
             b"global g64 64\nglobal g1m 1048576\nglobal g256m 268435456\n"
             b"managed m64 64\nmanaged m1m 1048576\nmanaged m256m 268435456\n")
    gnames = {64: b"g64", MiB: b"g1m", 256 * MiB: b"g256m"}
    mnames = {64: b"m64", MiB: b"m1m", 256 * MiB: b"m256m"}
    with cases.case("cuModuleGetGlobal_v2"):
        mod = vp()
        assert cu.cuModuleLoadData(byref(mod), image) == 0
        for size in SIZES:
            p, n = u64(), sz()
            rec.take()
            assert cu.cuModuleGetGlobal_v2(byref(p), byref(n), mod, gnames[size]) == 0
            expect_one(cases, rec.take(), f"cuModuleGetGlobal_v2({size})",
                       kind=EventKind.ALLOC, function="cuModuleGetGlobal_v2", address=p.value,
                       size=size, mem_type=MT.CUDA, device=0)
            expect_type(cases, p.value, size, MT.CUDA, f"module global of {size}")
        # the caller need not ask for the size: the event still has it
        p = u64()
        assert cu.cuModuleGetGlobal_v2(byref(p), None, mod, b"g1m") == 0
        expect_one(cases, rec.take(), "cuModuleGetGlobal_v2(bytes=NULL)", kind=EventKind.ALLOC,
                   function="cuModuleGetGlobal_v2", address=p.value, size=MiB, mem_type=MT.CUDA)
        run_failure(cases, rec, call=lambda: cu.cuModuleGetGlobal_v2(
            byref(u64()), byref(sz()), mod, b"nope"), name="cuModuleGetGlobal_v2", size=None,
            what="cuModuleGetGlobal_v2(no such global)")
        # a size-only query hands out no pointer: no ALLOC (and no crash)
        n = sz()
        rc = cu.cuModuleGetGlobal_v2(None, byref(n), mod, b"g64")
        cases.check(rc == 0 and n.value == 64, f"size-only query: rc {rc}, size {n.value}")
        expect_none(cases, rec.take(), "cuModuleGetGlobal_v2(dptr=NULL)")
        assert cu.cuModuleUnload(mod) == 0
        rec.take()
        # unloading is not hooked (DESIGN section 3: "if you track them"):
        # say what the cache answers for a global of an unloaded module
        cases.note(f"after cuModuleUnload, memory_type(global) is "
                   f"{memhook.memory_type(p.value).name}")

    with cases.case("cuModuleGetGlobal"):
        # v1: module globals live above 4 GiB, so asking for the address
        # fails (INVALID_VALUE); asking for the size alone works
        mod = vp()
        assert cu.cuModuleLoadData(byref(mod), image) == 0
        assert cu.cuCtxCreate(byref(legacy), 0, 0) == 0
        rec.take()
        run_failure(cases, rec, call=lambda: cu.cuModuleGetGlobal(
            byref(u32()), None, mod, b"g64"), name="cuModuleGetGlobal", size=None,
            what="cuModuleGetGlobal(64-bit global)")
        n = c_uint()
        rc = cu.cuModuleGetGlobal(None, byref(n), mod, b"g1m")
        cases.check(rc == 0 and n.value == MiB, f"v1 size-only query: rc {rc}, size {n.value}")
        expect_none(cases, rec.take(), "cuModuleGetGlobal(dptr=NULL)")
        assert cu.cuCtxDestroy_v2(legacy) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
        assert cu.cuModuleUnload(mod) == 0
        rec.take()

    for getter, names, mt in (("cuLibraryGetGlobal", gnames, MT.CUDA),
                              ("cuLibraryGetManaged", mnames, MT.CUDA_MANAGED)):
        with cases.case(getter):
            lib = vp()
            assert cu.cuLibraryLoadData(byref(lib), image, None, None, 0, None, None, 0) == 0
            for size in SIZES:
                p, n = u64(), sz()
                rec.take()
                assert getattr(cu, getter)(byref(p), byref(n), lib, names[size]) == 0
                expect_one(cases, rec.take(), f"{getter}({size})", kind=EventKind.ALLOC,
                           function=getter, address=p.value, size=size, mem_type=mt, device=0)
                expect_type(cases, p.value, size, mt, f"library global of {size}")
            run_failure(cases, rec, call=lambda g=getter, lib=lib: getattr(cu, g)(
                byref(u64()), byref(sz()), lib, b"nope"), name=getter, size=None,
                what=f"{getter}(no such global)")
            n = sz()
            rc = getattr(cu, getter)(None, byref(n), lib, names[64])
            cases.check(rc == 0 and n.value == 64, f"size-only query: rc {rc}, size {n.value}")
            expect_none(cases, rec.take(), f"{getter}(dptr=NULL)")
            assert cu.cuLibraryUnload(lib) == 0
            rec.take()
    return 0


def _relay_child(cases: Cases, child: subprocess.CompletedProcess) -> None:
    seen = False
    for line in child.stdout.splitlines():
        if line.startswith(("HKCASE ", "HKSTART ")):
            print(line, flush=True)
            seen = seen or line.startswith("HKCASE ")
    if child.returncode != 0 or not seen:
        with cases.case("ipc child"):
            cases.check(False, f"the IPC child exited {child.returncode}\n--- stdout ---\n"
                               f"{child.stdout}\n--- stderr ---\n{child.stderr}")


if __name__ == "__main__":
    sys.exit(main())
