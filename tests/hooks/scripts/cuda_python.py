"""cuda-python's cuda.bindings.driver on the simulator, in one mode:

    python cuda_python.py MODE

cuda.bindings resolves every driver entry point through dlopen + dlsym +
cuGetProcAddress when it is first used, so with install() first every
allocation it makes is seen: one event per call, named after the driver
variant it resolved (cuMemAlloc -> cuMemAlloc_v2), with the right sizes and
types, memory_type() right while allocated and HOST after the free.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

from cuda.bindings import driver as cu
from hkchild import (
    Cases,
    MiB,
    Recorder,
    check_install,
    expect_one,
    expect_type,
    install,
    mode_arg,
    run_api_rounds,
    run_failure,
    run_null_free,
)

import memhook
from memhook import EventKind
from memhook import MemoryType as MT

R = cu.CUresult
HUGE = 1 << 50


def ok(result):
    err, *values = result if isinstance(result, tuple) else (result,)
    assert err == R.CUDA_SUCCESS, f"expected CUDA_SUCCESS, got {err!r}"
    return values[0] if len(values) == 1 else tuple(values)


def rc(result) -> int:
    err = result[0] if isinstance(result, tuple) else result
    return int(err)


def main() -> int:
    mode = mode_arg()
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    rec = Recorder()
    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    rec.take()
    with cases.case("coverage"):
        cases.check(memhook.status().coverage_complete,
                    f"coverage is not complete: {memhook.status().uncovered}")

    def plain(call):
        def alloc(size):
            return int(ok(call(size))), size
        return alloc

    def free_with(call):
        def free(p):
            ok(call(p))
        return free

    with cases.case("cuMemAlloc"):
        run_api_rounds(cases, rec, alloc=plain(cu.cuMemAlloc), free=free_with(cu.cuMemFree),
                       alloc_name="cuMemAlloc_v2", free_name="cuMemFree_v2", ev_type=MT.CUDA,
                       query_type=MT.CUDA, device=0)
        run_null_free(cases, rec, call=lambda: cu.cuMemFree(0), what="cuMemFree(0)")
        run_failure(cases, rec, call=lambda: rc(cu.cuMemAlloc(HUGE)), name="cuMemAlloc_v2",
                    size=HUGE, what="cuMemAlloc(2^50)")

    def alloc_pitch(size):
        width, height = (64, 1) if size == 64 else (1024, size // 1024)
        p, pitch = ok(cu.cuMemAllocPitch(width, height, 4))
        return int(p), int(pitch) * height

    with cases.case("cuMemAllocPitch"):
        run_api_rounds(cases, rec, alloc=alloc_pitch, free=free_with(cu.cuMemFree),
                       alloc_name="cuMemAllocPitch_v2", free_name="cuMemFree_v2",
                       ev_type=MT.CUDA, query_type=MT.CUDA, device=0)

    with cases.case("cuMemAllocManaged"):
        run_api_rounds(cases, rec, alloc=plain(lambda n: cu.cuMemAllocManaged(n, 1)),
                       free=free_with(cu.cuMemFree), alloc_name="cuMemAllocManaged",
                       free_name="cuMemFree_v2", ev_type=MT.CUDA_MANAGED,
                       query_type=MT.CUDA_MANAGED, device=0)

    with cases.case("cuMemAllocHost"):
        run_api_rounds(cases, rec, alloc=plain(cu.cuMemAllocHost),
                       free=free_with(cu.cuMemFreeHost), alloc_name="cuMemAllocHost_v2",
                       free_name="cuMemFreeHost", ev_type=MT.CUDA_HOST,
                       query_type=MT.CUDA_HOST, device=0)

    with cases.case("cuMemHostAlloc"):
        run_api_rounds(cases, rec, alloc=plain(lambda n: cu.cuMemHostAlloc(n, 0)),
                       free=free_with(cu.cuMemFreeHost), alloc_name="cuMemHostAlloc",
                       free_name="cuMemFreeHost", ev_type=MT.CUDA_HOST,
                       query_type=MT.CUDA_HOST, device=0)

    arena = mmap.mmap(-1, 2 * 256 * MiB)
    arena_base = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    offsets = {64: 0, MiB: 4096, 256 * MiB: 4096 + MiB}

    def register(size):
        p = arena_base + offsets[size]
        ok(cu.cuMemHostRegister(p, size, 0))
        return p, size

    with cases.case("cuMemHostRegister"):
        run_api_rounds(cases, rec, alloc=register, free=free_with(cu.cuMemHostUnregister),
                       alloc_name="cuMemHostRegister_v2", free_name="cuMemHostUnregister",
                       ev_type=MT.CUDA_HOST, query_type=MT.CUDA_HOST, device=0)

    stream = ok(cu.cuStreamCreate(0))
    with cases.case("cuMemAllocAsync"):
        run_api_rounds(cases, rec, alloc=plain(lambda n: cu.cuMemAllocAsync(n, stream)),
                       free=free_with(lambda p: cu.cuMemFreeAsync(p, stream)),
                       alloc_name="cuMemAllocAsync", free_name="cuMemFreeAsync",
                       ev_type=MT.CUDA, query_type=MT.CUDA, device=0)

    pool = ok(cu.cuDeviceGetDefaultMemPool(dev))
    with cases.case("cuMemAllocFromPoolAsync"):
        run_api_rounds(cases, rec,
                       alloc=plain(lambda n: cu.cuMemAllocFromPoolAsync(n, pool, stream)),
                       free=free_with(lambda p: cu.cuMemFreeAsync(p, stream)),
                       alloc_name="cuMemAllocFromPoolAsync", free_name="cuMemFreeAsync",
                       ev_type=MT.UNKNOWN, query_type=MT.CUDA, device=(-1, 0))
    ok(cu.cuStreamSynchronize(stream))
    ok(cu.cuStreamDestroy(stream))
    rec.take()

    with cases.case("cuModuleGetGlobal"):
        image = b"MEMHOOK-SIM-MODULE 1\nglobal g64 64\nglobal g1m 1048576\n\0"
        mod = ok(cu.cuModuleLoadData(image))
        for gname, size in ((b"g64", 64), (b"g1m", MiB)):
            p, _ = ok(cu.cuModuleGetGlobal(mod, gname))
            expect_one(cases, rec.take(), f"cuModuleGetGlobal({gname})", kind=EventKind.ALLOC,
                       function="cuModuleGetGlobal_v2", address=int(p), size=size,
                       mem_type=MT.CUDA, device=0)
            expect_type(cases, int(p), size, MT.CUDA, f"cuModuleGetGlobal({gname})")
        ok(cu.cuModuleUnload(mod))
    return 0


if __name__ == "__main__":
    sys.exit(main())
