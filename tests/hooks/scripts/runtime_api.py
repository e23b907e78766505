"""Every hooked runtime entry point of the simulated runtime, in one mode:

    python runtime_api.py MODE shared
    python runtime_api.py MODE static LIBRARY

shared: libcudart.so.13, loaded through ctypes after install().  static: a
library linked with libcudart_static.a and the runtime's symbols hidden
(fixtures/static_runtime.c), whose runtime functions are called directly.

One event per runtime call, never two: named after the runtime function
where reloc can see the call (the shared runtime, in a mode with reloc),
else after the driver entry point the runtime reaches (the static runtime,
or bistro alone), with the runtime's sizes, types and devices, and with
memory_type() right while allocated and HOST after the free.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

from hkchild import (
    SIZES,
    Cases,
    MiB,
    Recorder,
    byref,
    c_int,
    c_size_t,
    c_uint,
    c_void_p,
    check_install,
    expect_one,
    expect_type,
    install,
    mode_arg,
    run_api_rounds,
    run_failure,
    run_null_free,
    uses_reloc,
)

import memhook
from memhook import EventKind
from memhook import MemoryType as MT

HUGE = 1 << 50
P = ctypes.POINTER

SIGS = {
    "cudaMalloc": (P(c_void_p), c_size_t),
    "cudaMallocManaged": (P(c_void_p), c_size_t, c_uint),
    "cudaMallocPitch": (P(c_void_p), P(c_size_t), c_size_t, c_size_t),
    "cudaMallocHost": (P(c_void_p), c_size_t),
    "cudaHostAlloc": (P(c_void_p), c_size_t, c_uint),
    "cudaFree": (c_void_p,),
    "cudaFreeHost": (c_void_p,),
    "cudaHostRegister": (c_void_p, c_size_t, c_uint),
    "cudaHostUnregister": (c_void_p,),
    "cudaMallocAsync": (P(c_void_p), c_size_t, c_void_p),
    "cudaMallocAsync_ptsz": (P(c_void_p), c_size_t, c_void_p),
    "cudaFreeAsync": (c_void_p, c_void_p),
    "cudaFreeAsync_ptsz": (c_void_p, c_void_p),
    "cudaMallocFromPoolAsync": (P(c_void_p), c_size_t, c_void_p, c_void_p),
    "cudaMallocFromPoolAsync_ptsz": (P(c_void_p), c_size_t, c_void_p, c_void_p),
    "cudaDeviceGetDefaultMemPool": (P(c_void_p), c_int),
    "cudaStreamSynchronize": (c_void_p,),
    "cudaGetSymbolAddress": (P(c_void_p), c_void_p),
    "cudaGetSymbolSize": (P(c_size_t), c_void_p),
    "cudaSetDevice": (c_int,),
    "__cudaRegisterFatBinary": (c_void_p,),
    "__cudaRegisterFatBinaryEnd": (c_void_p,),
    "__cudaRegisterVar": (c_void_p, c_void_p, c_void_p, ctypes.c_char_p, c_int, c_size_t,
                          c_int, c_int),
    "__cudaRegisterManagedVar": (c_void_p, c_void_p, c_void_p, ctypes.c_char_p, c_int,
                                 c_size_t, c_int, c_int),
}

# runtime function -> the driver entry point the simulated runtime calls
DRIVER_OF = {
    "cudaMalloc": "cuMemAlloc_v2", "cudaMallocManaged": "cuMemAllocManaged",
    "cudaMallocPitch": "cuMemAllocPitch_v2", "cudaMallocHost": "cuMemHostAlloc",
    "cudaHostAlloc": "cuMemHostAlloc", "cudaFree": "cuMemFree_v2",
    "cudaFreeHost": "cuMemFreeHost", "cudaHostRegister": "cuMemHostRegister_v2",
    "cudaHostUnregister": "cuMemHostUnregister", "cudaMallocAsync": "cuMemAllocAsync",
    "cudaMallocAsync_ptsz": "cuMemAllocAsync_ptsz", "cudaFreeAsync": "cuMemFreeAsync",
    "cudaFreeAsync_ptsz": "cuMemFreeAsync_ptsz",
    "cudaMallocFromPoolAsync": "cuMemAllocFromPoolAsync",
    "cudaMallocFromPoolAsync_ptsz": "cuMemAllocFromPoolAsync_ptsz",
}


class Runtime:
    """The runtime's functions with their argument types: from the shared
    library (through dlsym), or from the static fixture's hk_rt_fn."""

    def __init__(self, kind: str, path: str = "") -> None:
        self.kind = kind
        if kind == "shared":
            self._lib = ctypes.CDLL("libcudart.so.13")
        else:
            self._lib = ctypes.CDLL(path)
            self._lib.hk_rt_fn.restype = c_void_p
            self._lib.hk_rt_fn.argtypes = (ctypes.c_char_p,)
        self._fns: dict = {}

    def __getattr__(self, name: str):
        fn = self._fns.get(name)
        if fn is None:
            restype = c_void_p if name == "__cudaRegisterFatBinary" else (
                None if name.startswith("__cuda") else c_int)
            if self.kind == "shared":
                fn = getattr(self._lib, name)
                fn.restype, fn.argtypes = restype, SIGS[name]
            else:
                addr = self._lib.hk_rt_fn(name.encode())
                assert addr, f"the static fixture has no {name}"
                fn = ctypes.CFUNCTYPE(restype, *SIGS[name])(addr)
            self._fns[name] = fn
        return fn


def main() -> int:
    mode = mode_arg()
    kind = sys.argv[2]
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    rec = Recorder()
    rt = Runtime(kind, sys.argv[3] if kind == "static" else "")
    # Which layer the events are named after: the runtime's own name when
    # reloc can see the call (a GOT slot or dlsym answer for the shared
    # runtime), else the driver entry point the runtime reaches.
    runtime_visible = kind == "shared" and uses_reloc(mode)

    def name(fn: str, driver: str = "") -> str:
        return fn if runtime_visible else (driver or DRIVER_OF[fn])

    assert rt.cudaSetDevice(0) == 0
    rec.take()
    with cases.case("coverage"):
        cases.check(memhook.status().coverage_complete,
                    f"coverage is not complete: {memhook.status().uncovered}")

    def out_ptr(call):
        def alloc(size):
            p = c_void_p()
            rc = call(byref(p), size)
            assert rc == 0, f"rc {rc}"
            return p.value, size
        return alloc

    def checked(fn):
        def free(p):
            rc = fn(p)
            assert rc == 0, f"rc {rc}"
        return free

    with cases.case("cudaMalloc"):
        run_api_rounds(cases, rec, alloc=out_ptr(rt.cudaMalloc), free=checked(rt.cudaFree),
                       alloc_name=name("cudaMalloc"), free_name=name("cudaFree"),
                       ev_type=MT.CUDA, query_type=MT.CUDA, device=0)
        run_null_free(cases, rec, call=lambda: rt.cudaFree(None), what="cudaFree(NULL)")
        run_failure(cases, rec, call=lambda: rt.cudaMalloc(byref(c_void_p()), HUGE),
                    name=name("cudaMalloc"), size=HUGE, what="cudaMalloc(2^50)")

    with cases.case("cudaMallocManaged"):
        run_api_rounds(cases, rec, alloc=out_ptr(lambda pp, n: rt.cudaMallocManaged(pp, n, 1)),
                       free=checked(rt.cudaFree), alloc_name=name("cudaMallocManaged"),
                       free_name=name("cudaFree"), ev_type=MT.CUDA_MANAGED,
                       query_type=MT.CUDA_MANAGED, device=0)
        run_failure(cases, rec, call=lambda: rt.cudaMallocManaged(byref(c_void_p()), HUGE, 1),
                    name=name("cudaMallocManaged"), size=HUGE, what="cudaMallocManaged(2^50)")

    def alloc_pitch(size):
        width, height = (64, 1) if size == 64 else (1024, size // 1024)
        p, pitch = c_void_p(), c_size_t()
        assert rt.cudaMallocPitch(byref(p), byref(pitch), width, height) == 0
        return p.value, pitch.value * height

    with cases.case("cudaMallocPitch"):
        run_api_rounds(cases, rec, alloc=alloc_pitch, free=checked(rt.cudaFree),
                       alloc_name=name("cudaMallocPitch"), free_name=name("cudaFree"),
                       ev_type=MT.CUDA, query_type=MT.CUDA, device=0)

    for fn, call in (("cudaMallocHost", lambda pp, n: rt.cudaMallocHost(pp, n)),
                     ("cudaHostAlloc", lambda pp, n: rt.cudaHostAlloc(pp, n, 0))):
        with cases.case(fn):
            run_api_rounds(cases, rec, alloc=out_ptr(call), free=checked(rt.cudaFreeHost),
                           alloc_name=name(fn), free_name=name("cudaFreeHost"),
                           ev_type=MT.CUDA_HOST, query_type=MT.CUDA_HOST, device=0)
            run_null_free(cases, rec, call=lambda: rt.cudaFreeHost(None),
                          what="cudaFreeHost(NULL)")
            run_failure(cases, rec, call=lambda c=call: c(byref(c_void_p()), HUGE),
                        name=name(fn), size=HUGE, what=f"{fn}(2^50)")

    arena = mmap.mmap(-1, 2 * 256 * MiB)
    arena_base = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    offsets = {64: 0, MiB: 4096, 256 * MiB: 4096 + MiB}

    def register(size):
        p = arena_base + offsets[size]
        assert rt.cudaHostRegister(p, size, 0) == 0
        return p, size

    with cases.case("cudaHostRegister"):
        run_api_rounds(cases, rec, alloc=register, free=checked(rt.cudaHostUnregister),
                       alloc_name=name("cudaHostRegister"), free_name=name("cudaHostUnregister"),
                       ev_type=MT.CUDA_HOST, query_type=MT.CUDA_HOST, device=0)
        run_null_free(cases, rec, call=lambda: rt.cudaHostUnregister(None),
                      what="cudaHostUnregister(NULL)")

    for suffix in ("", "_ptsz"):
        fa, ff = "cudaMallocAsync" + suffix, "cudaFreeAsync" + suffix
        with cases.case(fa):
            run_api_rounds(cases, rec,
                           alloc=out_ptr(lambda pp, n, fa=fa: getattr(rt, fa)(pp, n, None)),
                           free=checked(lambda p, ff=ff: getattr(rt, ff)(p, None)),
                           alloc_name=name(fa), free_name=name(ff), ev_type=MT.CUDA,
                           query_type=MT.CUDA, device=0)
            run_null_free(cases, rec, call=lambda ff=ff: getattr(rt, ff)(None, None),
                          what=f"{ff}(NULL)")
            run_failure(cases, rec,
                        call=lambda fa=fa: getattr(rt, fa)(byref(c_void_p()), HUGE, None),
                        name=name(fa), size=HUGE, what=f"{fa}(2^50)")

    pool = c_void_p()
    assert rt.cudaDeviceGetDefaultMemPool(byref(pool), 0) == 0
    for suffix in ("", "_ptsz"):
        fa, ff = "cudaMallocFromPoolAsync" + suffix, "cudaFreeAsync" + suffix
        with cases.case(fa):
            run_api_rounds(cases, rec,
                           alloc=out_ptr(lambda pp, n, fa=fa: getattr(rt, fa)(pp, n, pool, None)),
                           free=checked(lambda p, ff=ff: getattr(rt, ff)(p, None)),
                           alloc_name=name(fa), free_name=name(ff), ev_type=MT.UNKNOWN,
                           query_type=MT.CUDA, device=(-1, 0))
    assert rt.cudaStreamSynchronize(None) == 0
    rec.take()

    # __device__ and __managed__ variables, registered as nvcc's host code
    # does; each cudaGetSymbolAddress is one ALLOC of the variable's size
    fatbin = ctypes.create_string_buffer(64)
    handle = rt.__cudaRegisterFatBinary(ctypes.addressof(fatbin))
    shadows = {size: ctypes.create_string_buffer(8) for size in SIZES}
    slots = {size: c_void_p() for size in SIZES}
    names = {}
    for size in SIZES:
        gname, mname = f"g{size}".encode(), f"m{size}".encode()
        names[size] = (gname, mname)
        rt.__cudaRegisterVar(handle, ctypes.addressof(shadows[size]), gname, gname, 0, size, 0, 0)
        rt.__cudaRegisterManagedVar(handle, ctypes.addressof(slots[size]), mname, mname, 0,
                                    size, 0, 0)
    rt.__cudaRegisterFatBinaryEnd(handle)
    for label, key, mt, driver in (
            ("cudaGetSymbolAddress", lambda s: ctypes.addressof(shadows[s]), MT.CUDA,
             "cuLibraryGetGlobal"),
            ("cudaGetSymbolAddress (managed)", lambda s: ctypes.addressof(slots[s]),
             MT.CUDA_MANAGED, "cuLibraryGetManaged")):
        with cases.case(label):
            for size in SIZES:
                p = c_void_p()
                rec.take()
                rc = rt.cudaGetSymbolAddress(byref(p), key(size))
                assert rc == 0, f"cudaGetSymbolAddress rc {rc}"
                expect_one(cases, rec.take(), f"{label}({size})", kind=EventKind.ALLOC,
                           function=name("cudaGetSymbolAddress", driver), address=p.value,
                           size=size, mem_type=mt, device=0)
                expect_type(cases, p.value, size, mt, f"{label}({size})")
            rec.take()
            rc = rt.cudaGetSymbolAddress(byref(c_void_p()), ctypes.addressof(fatbin))
            events = rec.take()
            cases.check(rc != 0, "cudaGetSymbolAddress of an unregistered address succeeded")
            # the runtime refuses it before reaching the driver: an event
            # only where reloc sees the runtime call itself
            if runtime_visible:
                cases.check(len(events) == 1 and events[0].result == rc
                            and events[0].address == 0, f"unknown symbol: {events}")
            else:
                cases.check(not events, f"unknown symbol: {events}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
