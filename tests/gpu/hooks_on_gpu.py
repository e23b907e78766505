#!/usr/bin/env python3
"""memhook's CUDA hooks on a real GPU, in every mode, for the device tool:

    . tools/gpu/device_setup.sh && python3 tests/gpu/hooks_on_gpu.py [--modes M,..] [--cases C,..]

(device_setup.sh installs the carried .whl/ wheels - cffi - and builds memhook
in place; carry .whl.)  Without a GPU, `--sim` runs the same script on
memhook's simulator (the driver, runtime and cudart cases), as a dry run.

Modes: bistro, reloc, bistro+reloc (install(mode="bistro,reloc")), and
bistro with MEMHOOK_BISTRO_FAR_JUMP=1 (bistro-far).  Cases:

  driver      cuda.bindings.driver: cuMemAlloc/cuMemFree, cuMemAllocAsync/
              cuMemFreeAsync, cuMemAllocHost/cuMemFreeHost, cuMemAllocManaged,
              cuMemHostRegister/cuMemHostUnregister at 64 B, 1 MiB, 256 MiB;
              cuMemFree(0); a failed cuMemAlloc
  runtime     cuda.bindings.runtime: cudaMalloc/cudaFree, cudaMallocAsync/
              cudaFreeAsync, cudaMallocHost/cudaFreeHost, cudaHostAlloc,
              cudaMallocManaged, cudaMallocPitch, cudaHostRegister/Unregister
  cudart      NVIDIA's libcudart.so.13 itself through ctypes: cudaMalloc/cudaFree,
              cudaMallocAsync/cudaFreeAsync, cudaMallocHost/cudaFreeHost
  torch       torch.empty(..., device="cuda") through the caching allocator
  torch-vmm   the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  cupy        CuPy arrays, default memory pool
  cupy-async  CuPy arrays with cupy.cuda.MemoryAsyncPool

Each (mode, case) runs in a fresh subprocess that calls memhook.install(mode)
before anything touches CUDA, subscribes to the events, runs the case and
checks, per allocation: memhook.memory_type(ptr, size) (and of the tensor or
array object itself) is the expected type (CUDA for every tensor and array);
an ALLOC event covers it; for direct API calls, exactly one ALLOC per call
with the right address and size, one FREE with the address, and HOST after
the free.  A failing check, an exception or a crashed child is reported and
the run goes on.  One line per case per mode, counts of events per function,
and a JSON summary in $OUT/hooks_on_gpu.json (or --json PATH).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import mmap
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
SIZES = (64, MiB, 256 * MiB)
HUGE = 1 << 50

MODES: dict[str, tuple[str, dict[str, str]]] = {
    "bistro": ("bistro", {}),
    "reloc": ("reloc", {}),
    "bistro+reloc": ("bistro,reloc", {}),
    "bistro-far": ("bistro", {"MEMHOOK_BISTRO_FAR_JUMP": "1"}),
}
CASE_ENV: dict[str, dict[str, str]] = {
    "torch-vmm": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
}
CASES = ("driver", "runtime", "cudart", "torch", "torch-vmm", "torch-mempool", "cupy",
         "cupy-async", "library", "ipc", "threads16", "late-install", "nvcc-static",
         "nvcc-shared")
# Cases that install the hooks themselves, after CUDA is in use.
LATE_CASES = ("late-install",)
# Cases run under `memhook trace` (LD_PRELOAD) rather than install() in Python.
TRACE_CASES = ("nvcc-static", "nvcc-shared")
# Cases that need the nvcc-built programs and module (tools/gpu/cuda/).
NVCC_CASES = ("library", "nvcc-static", "nvcc-shared")


# ---------------------------------------------------------------- child side

class Checker:
    """Collects the checks of one case.  Events arrive through a memhook
    subscription; ``take()`` flushes and returns the ones since the last
    take."""

    def __init__(self, memhook: Any) -> None:
        self.mh = memhook
        self.events: list[Any] = []
        self._taken = 0
        self.checks: list[dict[str, Any]] = []
        self.sub = memhook.subscribe(self.events.append)

    def take(self) -> list[Any]:
        self.mh.flush()
        new = self.events[self._taken:]
        self._taken = len(self.events)
        return new

    def check(self, label: str, ok: bool, detail: str = "", strict: bool = True) -> bool:
        self.checks.append({"label": label, "ok": bool(ok), "detail": detail, "strict": strict})
        return bool(ok)

    def covering(self, ptr: int, size: int) -> Any:
        """The latest ALLOC event seen whose range holds [ptr, ptr+size); or,
        when no single one does, the first of adjacent ALLOC events whose
        ranges together hold it (VMM: a tensor of expandable segments is
        mapped piece by piece, one cuMemMap each)."""
        allocs = [e for e in self.events if int(e.kind) & 1 and e.result == 0]
        for e in reversed(allocs):
            if e.address <= ptr and ptr + size <= e.address + e.size:
                return e
        pieces = sorted((e for e in allocs
                         if e.address < ptr + size and ptr < e.address + e.size),
                        key=lambda e: e.address)
        reach = ptr
        for e in pieces:
            if e.address > reach:
                return None
            reach = max(reach, e.address + e.size)
            if reach >= ptr + size:
                return pieces[0]
        return None

    def expect_type(self, label: str, ptr: int, size: int, expected: Any,
                    obj: Any = None) -> None:
        """memory_type right, of the pointer and (if given) the object, and
        an ALLOC event that covers the range."""
        self.mh.flush()
        got = self.mh.memory_type(ptr, size)
        self.check(f"{label}: memory_type", got == expected,
                   f"0x{ptr:x}+{size}: {got.name}, expected {expected.name}")
        if obj is not None:
            got_obj = self.mh.memory_type(obj)
            self.check(f"{label}: memory_type(object)", got_obj == expected,
                       f"{type(obj).__name__}: {got_obj.name}, expected {expected.name}")
        ev = self.covering(ptr, size)
        self.check(f"{label}: covered by an ALLOC event", ev is not None,
                   f"by {ev.function} 0x{ev.address:x}+{ev.size} ({ev.mem_type.name})"
                   if ev is not None else f"no ALLOC event covers 0x{ptr:x}+{size}")

    def expect_one_alloc(self, label: str, evs: list[Any], ptr: int, size: int) -> None:
        allocs = [e for e in evs if int(e.kind) & 1]
        frees = [e for e in evs if int(e.kind) & 2]
        ok = (len(allocs) == 1 and not frees and allocs[0].address == ptr
              and allocs[0].size == size and allocs[0].result == 0)
        self.check(f"{label}: one ALLOC", ok,
                   "; ".join(f"{e.kind.name} {e.function} 0x{e.address:x}+{e.size} r={e.result}"
                             for e in evs) or "no event")

    def expect_one_free(self, label: str, evs: list[Any], ptr: int) -> None:
        frees = [e for e in evs if int(e.kind) & 2]
        ok = len(frees) == 1 and len(evs) == 1 and frees[0].address == ptr
        self.check(f"{label}: one FREE", ok,
                   "; ".join(f"{e.kind.name} {e.function} 0x{e.address:x}+{e.size}"
                             for e in evs) or "no event")

    def api_rounds(self, name: str, alloc: Callable[[int], tuple[int, int]],
                   free: Callable[[int], None], expected: Any, host_after: bool = True) -> None:
        """Allocations of 64 B, 1 MiB, 256 MiB, freed in allocation order and
        then in reverse: one ALLOC each with the right address and size,
        memory_type right while allocated, one FREE each, HOST after.
        ``alloc(size)`` returns (ptr, size the event must carry)."""
        for order in ("in order", "reverse"):
            live = []
            for size in SIZES:
                self.take()
                ptr, ev_size = alloc(size)
                label = f"{name}({size}) {order}"
                self.expect_one_alloc(label, self.take(), ptr, ev_size)
                self.expect_type(label, ptr, ev_size, expected)
                live.append((ptr, ev_size, label))
            for ptr, ev_size, label in (live if order == "in order" else live[::-1]):
                self.take()
                free(ptr)
                self.expect_one_free(label, self.take(), ptr)
                after = self.mh.memory_type(ptr, 1)
                # Pool memory (stream-ordered) stays mapped after the free,
                # so a driver asked about it may still say CUDA: not a
                # failure of the hooks, reported only.
                self.check(f"{label}: HOST after the free", after.name == "HOST",
                           after.name, strict=host_after)

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for e in self.events:
            out[e.function]["alloc" if int(e.kind) & 1 else "free"] += 1
            if e.result != 0:
                out[e.function]["failed"] += 1
        return {k: dict(v) for k, v in sorted(out.items())}


def host_spots() -> tuple[mmap.mmap, Callable[[int], int]]:
    """Page-aligned host memory to register, one spot per round size (64 B,
    1 MiB, 256 MiB) that never overlaps another: the mapping (keep it alive)
    and spot(size) -> address."""
    arena = mmap.mmap(-1, 2 * 256 * MiB + 8 * MiB)
    base = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    offsets = {64: 0, MiB: 4096, 256 * MiB: 4096 + 2 * MiB}
    return arena, lambda n: base + offsets[n]


def _loaded(fragment: str) -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if fragment in line and "/" in line})


def case_driver(c: Checker) -> None:
    import memhook
    MT = memhook.MemoryType
    cu, ok, _ = _cu_init()
    R = cu.CUresult
    c.take()

    def plain(call: Callable[[int], Any]) -> Callable[[int], tuple[int, int]]:
        return lambda n: (int(ok(call(n))), n)

    c.api_rounds("cuMemAlloc", plain(cu.cuMemAlloc), lambda p: ok(cu.cuMemFree(p)), MT.CUDA)
    c.take()
    ok(cu.cuMemFree(0))
    evs = c.take()
    c.check("cuMemFree(0): no event", not evs, f"{len(evs)} events")
    err, _ = cu.cuMemAlloc(HUGE)
    evs = c.take()
    c.check("cuMemAlloc(2^50) fails with one ALLOC carrying the error",
            err != R.CUDA_SUCCESS and len(evs) == 1 and evs[0].result == int(err)
            and evs[0].address == 0, f"{err!r}; {[(e.function, e.result) for e in evs]}")
    stream = ok(cu.cuStreamCreate(0))
    c.api_rounds("cuMemAllocAsync", plain(lambda n: cu.cuMemAllocAsync(n, stream)),
                 lambda p: ok(cu.cuMemFreeAsync(p, stream)), MT.CUDA, host_after=False)
    ok(cu.cuStreamSynchronize(stream))
    c.api_rounds("cuMemAllocHost", plain(cu.cuMemAllocHost), lambda p: ok(cu.cuMemFreeHost(p)),
                 MT.CUDA_HOST)
    c.api_rounds("cuMemAllocManaged",
                 plain(lambda n: cu.cuMemAllocManaged(
                     n, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value)),
                 lambda p: ok(cu.cuMemFree(p)), MT.CUDA_MANAGED)
    _arena, spot = host_spots()  # (kept alive while registered)

    def register(n: int) -> tuple[int, int]:
        ok(cu.cuMemHostRegister(spot(n), n, 0))
        return spot(n), n

    c.api_rounds("cuMemHostRegister", register, lambda p: ok(cu.cuMemHostUnregister(p)),
                 MT.CUDA_HOST)
    ok(cu.cuStreamDestroy(stream))


def case_runtime(c: Checker) -> None:
    from cuda.bindings import runtime as rt

    import memhook
    MT = memhook.MemoryType

    def ok(result: Any) -> Any:
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != rt.cudaError_t.cudaSuccess:
            raise RuntimeError(f"expected cudaSuccess, got {err!r}")
        return values[0] if len(values) == 1 else tuple(values)

    ok(rt.cudaSetDevice(0))
    ok(rt.cudaFree(0))  # the runtime's context, made now (not inside the first case)
    c.check("runtime library", True, ", ".join(_loaded("libcudart")) or
            "no libcudart mapped: cuda.bindings carries the runtime statically")
    c.take()

    def plain(call: Callable[[int], Any]) -> Callable[[int], tuple[int, int]]:
        return lambda n: (int(ok(call(n))), n)

    c.api_rounds("cudaMalloc", plain(rt.cudaMalloc), lambda p: ok(rt.cudaFree(p)), MT.CUDA)
    stream = ok(rt.cudaStreamCreate())
    c.api_rounds("cudaMallocAsync", plain(lambda n: rt.cudaMallocAsync(n, stream)),
                 lambda p: ok(rt.cudaFreeAsync(p, stream)), MT.CUDA, host_after=False)
    ok(rt.cudaStreamSynchronize(stream))
    c.api_rounds("cudaMallocHost", plain(rt.cudaMallocHost), lambda p: ok(rt.cudaFreeHost(p)),
                 MT.CUDA_HOST)
    c.api_rounds("cudaHostAlloc", plain(lambda n: rt.cudaHostAlloc(n, 0)),
                 lambda p: ok(rt.cudaFreeHost(p)), MT.CUDA_HOST)
    c.api_rounds("cudaMallocManaged", plain(lambda n: rt.cudaMallocManaged(n, 1)),
                 lambda p: ok(rt.cudaFree(p)), MT.CUDA_MANAGED)

    def pitch(n: int) -> tuple[int, int]:
        width, height = (64, 1) if n == 64 else (1024, n // 1024)
        p, pitch_ = ok(rt.cudaMallocPitch(width, height))
        return int(p), int(pitch_) * height

    c.api_rounds("cudaMallocPitch", pitch, lambda p: ok(rt.cudaFree(p)), MT.CUDA)
    _arena, spot = host_spots()  # (kept alive while registered)

    def register(n: int) -> tuple[int, int]:
        ok(rt.cudaHostRegister(spot(n), n, 0))
        return spot(n), n

    c.api_rounds("cudaHostRegister", register, lambda p: ok(rt.cudaHostUnregister(p)),
                 MT.CUDA_HOST)
    ok(rt.cudaStreamDestroy(stream))


def _find_cudart() -> str:
    import glob
    import site
    if os.environ.get("HOOKS_ON_GPU_CUDART"):
        return os.environ["HOOKS_ON_GPU_CUDART"]
    for base in [*site.getsitepackages(), site.getusersitepackages()]:
        hits = sorted(glob.glob(base + "/nvidia/**/libcudart.so.13", recursive=True))
        if hits:
            return hits[0]
    return "libcudart.so.13"


def case_cudart(c: Checker) -> None:
    import memhook
    MT = memhook.MemoryType
    path = _find_cudart()
    lib = ctypes.CDLL(path)
    c.check("runtime library", True, path)
    vp, sz = ctypes.c_void_p, ctypes.c_size_t

    def ok(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    ok(lib.cudaSetDevice(0), "cudaSetDevice")
    ok(lib.cudaFree(vp(0)), "cudaFree(0)")
    c.take()

    def malloc(n: int) -> tuple[int, int]:
        p = vp()
        ok(lib.cudaMalloc(ctypes.byref(p), sz(n)), "cudaMalloc")
        return int(p.value or 0), n

    c.api_rounds("cudaMalloc", malloc, lambda p: ok(lib.cudaFree(vp(p)), "cudaFree"), MT.CUDA)
    stream = vp()
    ok(lib.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")

    def malloc_async(n: int) -> tuple[int, int]:
        p = vp()
        ok(lib.cudaMallocAsync(ctypes.byref(p), sz(n), stream), "cudaMallocAsync")
        return int(p.value or 0), n

    c.api_rounds("cudaMallocAsync", malloc_async,
                 lambda p: ok(lib.cudaFreeAsync(vp(p), stream), "cudaFreeAsync"), MT.CUDA,
                 host_after=False)
    ok(lib.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def malloc_host(n: int) -> tuple[int, int]:
        p = vp()
        ok(lib.cudaMallocHost(ctypes.byref(p), sz(n)), "cudaMallocHost")
        return int(p.value or 0), n

    c.api_rounds("cudaMallocHost", malloc_host,
                 lambda p: ok(lib.cudaFreeHost(vp(p)), "cudaFreeHost"), MT.CUDA_HOST)
    ok(lib.cudaStreamDestroy(stream), "cudaStreamDestroy")


def _tensor_sizes() -> list[tuple[str, int]]:
    return [("64 B", 64), ("4 KiB", 4096), ("1 MiB", MiB), ("3 MiB+1", 3 * MiB + 1),
            ("64 MiB", 64 * MiB), ("256 MiB", 256 * MiB), ("1 GiB", 1 << 30)]


def case_torch(c: Checker) -> None:
    import torch

    import memhook
    MT = memhook.MemoryType
    c.check("torch", torch.cuda.is_available(),
            f"torch {torch.__version__}, PYTORCH_CUDA_ALLOC_CONF="
            f"{os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}")
    keep = []
    for label, n in _tensor_sizes():
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        keep.append(t)
        c.expect_type(f"torch.empty({label})", t.data_ptr(), t.nbytes, MT.CUDA, obj=t)
    x = torch.randn(1024, 1024, device="cuda")
    y = x @ x
    torch.cuda.synchronize()
    for label, t in (("randn 1024x1024 float32", x), ("matmul result", y),
                     ("a view (x[100:200])", x[100:200])):
        c.expect_type(label, t.data_ptr(), t.numel() * t.element_size(), MT.CUDA, obj=t)
    del keep, x, y, t
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    c.take()
    frees = sum(1 for e in c.events if int(e.kind) & 2)
    c.check("empty_cache() gave FREE events", frees > 0, f"{frees} FREE events", strict=False)


def case_cupy(c: Checker, async_pool: bool = False) -> None:
    import cupy

    import memhook
    MT = memhook.MemoryType
    if async_pool:
        pool = cupy.cuda.MemoryAsyncPool()
        cupy.cuda.set_allocator(pool.malloc)
    c.check("cupy", True, f"cupy {cupy.__version__}, allocator "
            f"{'MemoryAsyncPool' if async_pool else 'default MemoryPool'}")
    keep = []
    for label, n in _tensor_sizes():
        a = cupy.empty(n, dtype=cupy.uint8)
        keep.append(a)
        c.expect_type(f"cupy.empty({label})", int(a.data.ptr), int(a.nbytes), MT.CUDA, obj=a)
    b = cupy.arange(1 << 20, dtype=cupy.float32)
    s = b[1000:5000]
    cupy.cuda.Device().synchronize()
    for label, a in (("arange(2^20) float32", b), ("a slice", s)):
        c.expect_type(label, int(a.data.ptr), int(a.nbytes), MT.CUDA, obj=a)
    del keep, a, b, s
    cupy.cuda.Device().synchronize()
    if async_pool:
        pool.free_all_blocks()
    else:
        cupy.get_default_memory_pool().free_all_blocks()
    cupy.cuda.Device().synchronize()
    c.take()
    frees = sum(1 for e in c.events if int(e.kind) & 2)
    c.check("free_all_blocks() gave FREE events", frees > 0, f"{frees} FREE events",
            strict=False)


# ----------------------------------------------------- nvcc-built artefacts

def build_dir() -> Path:
    return Path(os.environ.get("HOOKS_ON_GPU_BUILD", "/tmp/memhook-gpu-build"))


def ensure_built() -> Path:
    """Build tools/gpu/cuda/ with nvcc once (a file lock makes concurrent
    callers - pytest-xdist workers - wait for the first): static_app_static
    (-cudart static), static_app_shared (-cudart shared) and module.cubin."""
    import fcntl
    out = build_dir()
    out.mkdir(parents=True, exist_ok=True)
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = os.path.join(cuda, "bin", "nvcc")
    arch = os.environ.get("HOOKS_ON_GPU_ARCH", "sm_90")
    src = ROOT / "tools" / "gpu" / "cuda"
    jobs = [
        ("static_app_static", [nvcc, f"-arch={arch}", "-cudart", "static",
                               str(src / "static_app.cu"), "-o"]),
        ("static_app_shared", [nvcc, f"-arch={arch}", "-cudart", "shared",
                               f"-Xlinker=-rpath={cuda}/lib64",
                               str(src / "static_app.cu"), "-o"]),
        ("module.cubin", [nvcc, f"-arch={arch}", "-cubin", str(src / "module.cu"), "-o"]),
    ]
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, cmd in jobs:
            if (out / name).exists():
                continue
            proc = subprocess.run([*cmd, str(out / (name + ".tmp"))], capture_output=True,
                                  text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
            os.replace(out / (name + ".tmp"), out / name)
    return out


def _cu_init() -> tuple[Any, Callable[[Any], Any], Any]:
    from cuda.bindings import driver as cu
    R = cu.CUresult

    def ok(result: Any) -> Any:
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != R.CUDA_SUCCESS:
            raise RuntimeError(f"expected CUDA_SUCCESS, got {err!r}")
        return values[0] if len(values) == 1 else tuple(values)

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    return cu, ok, ctx


def case_library(c: Checker) -> None:
    """A real __device__ (and __managed__) variable of a module built with
    `nvcc -cubin`: cuLibraryLoadData, cuLibraryGetGlobal, cuLibraryGetManaged,
    cuLibraryUnload; then cuModuleLoadData, cuModuleGetGlobal, cuModuleUnload."""
    import memhook
    MT = memhook.MemoryType
    cu, ok, _ = _cu_init()
    cubin = (build_dir() / "module.cubin").read_bytes()
    c.take()
    lib = ok(cu.cuLibraryLoadData(cubin, [], [], 0, [], [], 0))
    evs = c.take()
    c.check("cuLibraryLoadData: no ALLOC event of its own", not evs,
            "; ".join(f"{e.function} 0x{e.address:x}+{e.size}" for e in evs))
    dptr, size = ok(cu.cuLibraryGetGlobal(lib, b"memhook_global"))
    dptr, size = int(dptr), int(size)
    c.check("cuLibraryGetGlobal: the variable's size", size == 4000, str(size))
    c.expect_one_alloc("cuLibraryGetGlobal(memhook_global)", c.take(), dptr, size)
    c.expect_type("cuLibraryGetGlobal(memhook_global)", dptr, size, MT.CUDA)
    mptr, msize = ok(cu.cuLibraryGetManaged(lib, b"memhook_managed"))
    mptr, msize = int(mptr), int(msize)
    c.expect_one_alloc("cuLibraryGetManaged(memhook_managed)", c.take(), mptr, msize)
    c.expect_type("cuLibraryGetManaged(memhook_managed)", mptr, msize, MT.CUDA_MANAGED)
    ok(cu.cuLibraryUnload(lib))
    evs = c.take()
    after = memhook.memory_type(dptr, 1)
    # Known limit (README): cuLibraryUnload does not take its globals out of
    # the cache; reported, not failed.
    c.check("cuLibraryUnload: global's memory_type after the unload", after.name == "HOST",
            f"{after.name}; events at unload: {[(e.kind.name, e.function) for e in evs]}",
            strict=False)
    mod = ok(cu.cuModuleLoadData(cubin))
    c.take()
    gptr, gsize = ok(cu.cuModuleGetGlobal(mod, b"memhook_global"))
    gptr, gsize = int(gptr), int(gsize)
    c.expect_one_alloc("cuModuleGetGlobal(memhook_global)", c.take(), gptr, gsize)
    c.expect_type("cuModuleGetGlobal(memhook_global)", gptr, gsize, MT.CUDA)
    ok(cu.cuModuleUnload(mod))
    c.take()


IPC_BYTES = 8 * MiB


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def _ctypes_cuda() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    for rc in (lib.cuInit(0), lib.cuDeviceGet(ctypes.byref(dev), 0),
               lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
               lib.cuCtxSetCurrent(ctx)):
        if rc != 0:
            raise RuntimeError(f"CUDA initialisation through ctypes returned {rc}")
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_IpcHandle), ctypes.c_uint64]
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcHandle,
                                          ctypes.c_uint]
    lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
    lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    lib._memhook_ctx = ctx
    return lib


def ipc_exporter() -> int:
    """The exporting process (no memhook): allocate, export the handle on
    stdout, wait for a line on stdin, free."""
    lib = _ctypes_cuda()
    p = ctypes.c_uint64()
    if lib.cuMemAlloc_v2(ctypes.byref(p), IPC_BYTES) != 0:
        return 1
    h = _IpcHandle()
    if lib.cuIpcGetMemHandle(ctypes.byref(h), p.value) != 0:
        return 2
    print(f"HANDLE {bytes(h).hex()} 0x{p.value:x}", flush=True)
    sys.stdin.readline()
    lib.cuMemFree_v2(p.value)
    return 0


def case_ipc(c: Checker) -> None:
    """One process exports with cuIpcGetMemHandle, this one (hooked) opens it:
    one ALLOC of the allocation's size, CUDA memory, then one FREE at the
    close and HOST after."""
    import memhook
    MT = memhook.MemoryType
    lib = _ctypes_cuda()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHOOK")}
    exporter = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--ipc-export"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = exporter.stdout.readline() if exporter.stdout else ""
        if not line.startswith("HANDLE "):
            raise RuntimeError(f"exporter said {line!r}")
        raw = bytes.fromhex(line.split()[1])
        h = _IpcHandle.from_buffer_copy(raw)
        c.take()
        p = ctypes.c_uint64()
        rc = lib.cuIpcOpenMemHandle_v2(ctypes.byref(p), h, 1)  # LAZY_ENABLE_PEER_ACCESS
        if rc != 0:
            raise RuntimeError(f"cuIpcOpenMemHandle_v2 returned {rc}")
        label = "cuIpcOpenMemHandle"
        c.expect_one_alloc(label, c.take(), p.value, IPC_BYTES)
        c.expect_type(label, p.value, IPC_BYTES, MT.CUDA)
        rc = lib.cuIpcCloseMemHandle(p.value)
        if rc != 0:
            raise RuntimeError(f"cuIpcCloseMemHandle returned {rc}")
        c.expect_one_free("cuIpcCloseMemHandle", c.take(), p.value)
        after = memhook.memory_type(p.value, 1)
        c.check("cuIpcCloseMemHandle: HOST after the close", after.name == "HOST", after.name)
    finally:
        if exporter.stdin:
            exporter.stdin.write("done\n")
            exporter.stdin.close()
        exporter.wait(timeout=60)


def case_threads16(c: Checker) -> None:
    """16 threads allocate (cuMemAlloc_v2 through ctypes, which lets go of the
    GIL) at once, each size unique; every allocation must come back as one
    ALLOC with its address and size, CUDA while live, one FREE each."""
    import threading

    import memhook
    MT = memhook.MemoryType
    lib = _ctypes_cuda()
    threads, per = 16, 64
    live: dict[int, list[tuple[int, int]]] = {t: [] for t in range(threads)}
    errors: list[str] = []
    start, mid = threading.Barrier(threads + 1), threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)

    def work(t: int) -> None:
        try:
            lib.cuCtxSetCurrent(lib._memhook_ctx)
            start.wait()
            for i in range(per):
                size = 256 * (t * per + i + 1) + 8
                p = ctypes.c_uint64()
                rc = lib.cuMemAlloc_v2(ctypes.byref(p), size)
                if rc != 0:
                    errors.append(f"thread {t}: cuMemAlloc_v2 returned {rc}")
                    return
                live[t].append((p.value, size))
        except Exception as exc:  # noqa: BLE001
            errors.append(f"thread {t}: {exc!r}")
        finally:
            mid.wait()
            done.wait()
            for p, _ in live[t]:
                lib.cuMemFree_v2(p)

    c.take()
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in ts:
        th.start()
    start.wait()
    mid.wait()
    evs = c.take()
    allocs = {(e.address, e.size) for e in evs if int(e.kind) & 1 and e.result == 0}
    want = {pair for t in live for pair in live[t]}
    c.check("16 threads: no error", not errors, "; ".join(errors[:5]))
    c.check("16 threads: one ALLOC per call, exact address and size",
            len(evs) == threads * per and allocs == want,
            f"{len(evs)} events, {len(allocs & want)}/{len(want)} allocations matched")
    tids = {e.tid for e in evs}
    c.check("16 threads: events from 16 threads", len(tids) == threads, f"{len(tids)} tids")
    wrong = [(p, s) for p, s in want if memhook.memory_type(p, s) != MT.CUDA]
    c.check("16 threads: memory_type CUDA for every live allocation", not wrong,
            f"{len(wrong)} wrong, e.g. {wrong[:3]}")
    done.wait()
    for th in ts:
        th.join()
    evs = c.take()
    frees = sorted(e.address for e in evs if int(e.kind) & 2)
    c.check("16 threads: one FREE each", frees == sorted(p for p, _ in want),
            f"{len(frees)} FREE events for {len(want)} allocations")
    still = [p for p, _ in want if memhook.memory_type(p, 1) != MT.HOST]
    c.check("16 threads: HOST after the frees", not still, f"{len(still)} not HOST")


def late_pre() -> dict[str, Any]:
    """CUDA in use before install(): device, pinned host and managed memory
    through the driver API, and a PyTorch tensor."""
    cu, ok, _ = _cu_init()
    state: dict[str, Any] = {
        "device": int(ok(cu.cuMemAlloc(MiB))),
        "host": int(ok(cu.cuMemAllocHost(MiB))),
        "managed": int(ok(cu.cuMemAllocManaged(MiB, 1))),
    }
    try:
        import torch
        state["tensor"] = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    except ImportError:
        pass
    return state


def case_late(c: Checker, state: dict[str, Any]) -> None:
    """After install(): what CUDA allocated before must still be typed right
    (pre-existing ranges marked UNKNOWN, verified with the driver); new calls
    and the frees of the old allocations give events.  The calls after
    install go through ctypes (symbols looked up now): cuda.bindings resolved
    its driver entry points through cuGetProcAddress before install, and
    pointers a library took before install are not reloc's to see (bistro
    patches the entries themselves, so it sees them too)."""
    import memhook
    MT = memhook.MemoryType
    lib = _ctypes_cuda()
    lib.cuMemFreeHost.argtypes = [ctypes.c_void_p]

    def typed(label: str, ptr: int, size: int, want: Any) -> None:
        got = memhook.memory_type(ptr, size)
        c.check(f"{label}: memory_type", got == want,
                f"0x{ptr:x}+{size}: {got.name}, expected {want.name}")

    typed("device memory from before install", state["device"], MiB, MT.CUDA)
    typed("inside it", state["device"] + 1000, 24, MT.CUDA)
    typed("pinned host memory from before install", state["host"], MiB, MT.CUDA_HOST)
    typed("managed memory from before install", state["managed"], MiB, MT.CUDA_MANAGED)
    if "tensor" in state:
        t = state["tensor"]
        typed("torch tensor from before install", t.data_ptr(), t.nbytes, MT.CUDA)
        got = memhook.memory_type(t)
        c.check("torch tensor from before install: memory_type(object)", got == MT.CUDA, got.name)
    buf = ctypes.create_string_buffer(4096)
    typed("a plain host buffer", ctypes.addressof(buf), 4096, MT.HOST)
    arena = mmap.mmap(-1, 4 * MiB)
    typed("a fresh anonymous mapping", ctypes.addressof(ctypes.c_char.from_buffer(arena)),
          4 * MiB, MT.HOST)
    c.take()
    q = ctypes.c_uint64()
    if lib.cuMemAlloc_v2(ctypes.byref(q), MiB) != 0:
        raise RuntimeError("cuMemAlloc_v2 failed")
    p = q.value
    c.expect_one_alloc("cuMemAlloc after install", c.take(), p, MiB)
    c.expect_type("cuMemAlloc after install", p, MiB, MT.CUDA)
    for name, ptr, free in (("device", state["device"], lib.cuMemFree_v2),
                            ("host", state["host"], lib.cuMemFreeHost),
                            ("managed", state["managed"], lib.cuMemFree_v2),
                            ("after-install", p, lib.cuMemFree_v2)):
        rc = free(ptr)
        if rc != 0:
            raise RuntimeError(f"free of {name} memory returned {rc}")
        evs = c.take()
        frees = [e for e in evs if int(e.kind) & 2]
        c.check(f"free of {name} memory: one FREE of 1 MiB",
                len(evs) == 1 and len(frees) == 1 and frees[0].address == ptr
                and frees[0].size == MiB,
                "; ".join(f"{e.kind.name} {e.function} 0x{e.address:x}+{e.size}" for e in evs))
        typed(f"{name} memory after its free", ptr, 1, MT.HOST)


def case_torch_mempool(c: Checker) -> None:
    import torch

    import memhook
    MT = memhook.MemoryType
    if not hasattr(torch.cuda, "MemPool"):
        c.check("torch.cuda.MemPool", True, f"absent in torch {torch.__version__}: nothing to do")
        return
    pool = torch.cuda.MemPool()
    c.check("torch", True, f"torch {torch.__version__}, torch.cuda.MemPool")
    keep = []
    with torch.cuda.use_mem_pool(pool):
        for label, n in _tensor_sizes():
            t = torch.empty(n, dtype=torch.uint8, device="cuda")
            keep.append(t)
            c.expect_type(f"MemPool torch.empty({label})", t.data_ptr(), t.nbytes, MT.CUDA, obj=t)
    del keep, t
    torch.cuda.synchronize()
    del pool
    torch.cuda.empty_cache()
    c.take()


# ------------------------------------------------------ cases run by trace

def run_trace_case(mode_label: str, case: str, timeout: float) -> dict[str, Any]:
    """The nvcc-built program under `memhook trace -m MODE -f jsonl` (core in
    LD_PRELOAD, installed before the program's runtime starts): every
    allocation and free it prints, and its cudaGetSymbolAddress, must be
    matched by an event with the exact address (and size)."""
    import tempfile
    t0 = time.monotonic()
    result: dict[str, Any] = {"mode": mode_label, "case": case, "status": "ERROR", "checks": [],
                              "events": {}, "error": None}
    checks: list[dict[str, Any]] = []

    def check(label: str, ok: bool, detail: str = "", strict: bool = True) -> None:
        checks.append({"label": label, "ok": bool(ok), "detail": detail, "strict": strict})

    try:
        app = ensure_built() / ("static_app_static" if case == "nvcc-static"
                                else "static_app_shared")
        env = dict(os.environ)
        env.update(MODES[mode_label][1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT))
                                            if p)
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "trace.jsonl"
            proc = subprocess.run([sys.executable, "-m", "memhook", "trace", "-m",
                                   MODES[mode_label][0], "-f", "jsonl", "-o", str(trace), "--",
                                   str(app)], env=env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
            events = [e for e in (json.loads(line) for line in trace.read_text().splitlines()
                                  if line.strip()) if e["kind"] in ("alloc", "free")] \
                if trace.exists() else []
        check("program ran to the end", proc.returncode == 0 and "DONE" in proc.stdout,
              f"exit {proc.returncode}; stderr: {proc.stderr[-800:]}")
        counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for e in events:
            counts[e["function"]][e["kind"]] += 1
        result["events"] = {k: dict(v) for k, v in sorted(counts.items())}
        allocs = [e for e in events if e["kind"] == "alloc" and e["result"] == 0]
        frees = [e for e in events if e["kind"] == "free"]
        printed = [line.split() for line in proc.stdout.splitlines()
                   if line.split()[:1] in (["ALLOC"], ["FREE"], ["SYMBOL"])]
        for what, fn, addr, *rest in printed:
            a = int(addr, 16)
            if what in ("ALLOC", "SYMBOL"):
                size = int(rest[0])
                hits = [e for e in allocs if e["address"] == a and e["size"] == size]
                check(f"{fn}({size}) -> 0x{a:x}: one ALLOC, exact address and size",
                      len(hits) == 1,
                      f"{len(hits)} matching; by {sorted({e['function'] for e in hits})}"
                      if hits else "no matching ALLOC event")
            else:
                hits = [e for e in frees if e["address"] == a]
                check(f"{fn}(0x{a:x}): one FREE", len(hits) == 1, f"{len(hits)} matching")
        check("every call printed", len(printed) == 11, f"{len(printed)} lines")
        check("no event beyond the program's calls", len(events) == len(printed),
              f"{len(events)} events for {len(printed)} calls: "
              + "; ".join(f"{e['kind']} {e['function']} 0x{e['address']:x}+{e['size']}"
                          for e in events[:14]), strict=False)
        result["status"] = "OK" if all(ch["ok"] for ch in checks if ch["strict"]) else "FAIL"
    except subprocess.TimeoutExpired:
        result["status"] = "TIMEOUT"
        result["error"] = f"no answer in {timeout:.0f} s"
    except Exception:  # noqa: BLE001
        result["error"] = traceback.format_exc()
    result["checks"] = checks
    result["seconds"] = round(time.monotonic() - t0, 2)
    return result


CASE_FUNCS: dict[str, Callable[[Checker], None]] = {
    "driver": case_driver,
    "runtime": case_runtime,
    "cudart": case_cudart,
    "torch": case_torch,
    "torch-vmm": case_torch,
    "cupy": case_cupy,
    "cupy-async": lambda c: case_cupy(c, async_pool=True),
    "torch-mempool": case_torch_mempool,
    "library": case_library,
    "ipc": case_ipc,
    "threads16": case_threads16,
    "late-install": lambda c: None,  # see child(): late_pre, install, case_late
    "nvcc-static": lambda c: None,   # run_trace_case
    "nvcc-shared": lambda c: None,   # run_trace_case
}


def child(mode_label: str, case: str) -> int:
    result: dict[str, Any] = {"mode": mode_label, "case": case, "status": "ERROR",
                              "checks": [], "events": {}, "error": None}
    t0 = time.monotonic()
    checker = None
    try:
        try:
            import memhook
        except ImportError:
            sys.path.insert(0, str(ROOT))
            import memhook
        state = late_pre() if case in LATE_CASES else None
        t_install = time.perf_counter()
        report = memhook.install(MODES[mode_label][0])
        result["install_ms"] = round((time.perf_counter() - t_install) * 1e3, 2)
        jumps = collections.Counter(h.bistro_jump for h in report.hooks if h.bistro_jump)
        result["install"] = {"mode": str(report.mode), "bistro_jumps": dict(jumps),
                             "library": memhook.library_path()}
        checker = Checker(memhook)
        if case in LATE_CASES:
            case_late(checker, state)
        else:
            CASE_FUNCS[case](checker)
        checker.take()
        st = memhook.status()
        result["coverage_complete"] = st.coverage_complete
        result["uncovered"] = [h.name for h in st.uncovered]
        seen = {e.function for e in checker.events}
        result["mechanisms"] = {h.name: str(h.mechanism) for h in st.hooks if h.name in seen}
        result["queue"] = {"produced": st.queue.produced, "consumed": st.queue.consumed,
                           "segments_peak": st.queue.segments_peak,
                           "free_size_from_driver": st.queue.free_size_from_driver,
                           "free_size_unknown": st.queue.free_size_unknown}
        strict_fail = [ch for ch in checker.checks if ch["strict"] and not ch["ok"]]
        result["status"] = "OK" if not strict_fail else "FAIL"
    except Exception:  # noqa: BLE001 - any failure is this case's result, not the run's
        result["error"] = traceback.format_exc()
    if checker is not None:
        result["checks"] = checker.checks
        result["events"] = checker.counts()
    result["seconds"] = round(time.monotonic() - t0, 2)
    print("RESULT-JSON " + json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------- parent side

def run_case(mode_label: str, case: str, timeout: float, sim: bool) -> dict[str, Any]:
    if case in NVCC_CASES and not sim:
        try:
            ensure_built()
        except Exception:  # noqa: BLE001
            return {"mode": mode_label, "case": case, "status": "ERROR", "checks": [],
                    "events": {}, "error": traceback.format_exc()}
    if case in TRACE_CASES:
        return run_trace_case(mode_label, case, timeout)
    env = dict(os.environ)
    if sim:  # a dry run of this script on the simulator (no GPU here)
        sys.path.insert(0, str(ROOT))
        import memhook.sim
        env = memhook.sim.environ(env)
        env["HOOKS_ON_GPU_CUDART"] = str(Path(memhook.sim.library_dir()) / "libcudart.so.13")
    env.update(MODES[mode_label][1])
    env.update(CASE_ENV.get(case, {}))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT)) if p)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode_label, case]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        return {"mode": mode_label, "case": case, "status": "TIMEOUT", "checks": [],
                "events": {}, "error": f"no answer in {timeout:.0f} s",
                "stderr": (exc.stderr or b"")[-2000:].decode(errors="replace")
                if isinstance(exc.stderr, bytes) else str(exc.stderr or "")[-2000:]}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT-JSON "):
            res: dict[str, Any] = json.loads(line[len("RESULT-JSON "):])
            if proc.stderr.strip():
                res["stderr"] = proc.stderr[-2000:]
            return res
    return {"mode": mode_label, "case": case, "status": "CRASH", "checks": [], "events": {},
            "error": f"child exited with {proc.returncode} before reporting",
            "stderr": proc.stderr[-3000:], "stdout": proc.stdout[-2000:]}


def line_of(res: dict[str, Any]) -> str:
    checks = res.get("checks", [])
    strict = [ch for ch in checks if ch["strict"]]
    passed = sum(1 for ch in strict if ch["ok"])
    events = ", ".join(f"{fn} " + "/".join(f"{k}={v}" for k, v in counts.items())
                       for fn, counts in res.get("events", {}).items()) or "no events"
    head = (f"{res['mode']:<13} {res['case']:<11} {res['status']:<7} "
            f"checks {passed}/{len(strict)}  events: {events}")
    extra = []
    for ch in checks:
        if not ch["ok"]:
            extra.append(f"    {'FAIL' if ch['strict'] else 'note'}: {ch['label']}: "
                         f"{ch['detail']}")
    for ch in checks:
        if ch["label"] in ("runtime library", "torch", "cupy"):
            extra.append(f"    {ch['label']}: {ch['detail']}")
    if res.get("install", {}).get("bistro_jumps"):
        extra.append(f"    bistro jumps (size: functions): {res['install']['bistro_jumps']}")
    if res.get("error"):
        extra.append("    " + res["error"].strip().replace("\n", "\n    "))
    if res.get("status") in ("CRASH", "TIMEOUT") and res.get("stderr"):
        extra.append("    stderr: " + res["stderr"].strip().replace("\n", "\n    "))
    return "\n".join([head, *extra[:40]])


def versions() -> dict[str, str]:
    from importlib import metadata
    out = {"python": sys.version.split()[0]}
    for name in ("torch", "cupy-cuda13x", "cuda-bindings", "nvidia-cuda-runtime"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30, check=False)
        out["gpu"] = smi.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out["gpu"] = "nvidia-smi not found"
    return out


def summarize(path: Path) -> int:
    """A (case x mode) table of the JSON lines tests/gpu/test_hooks_gpu.py
    appends (HOOKS_ON_GPU_RESULTS): status and strict checks passed."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cell = {}
    for r in rows:
        strict = [ch for ch in r.get("checks", []) if ch["strict"]]
        cell[(r["case"], r["mode"])] = (f"{r['status']} {sum(ch['ok'] for ch in strict)}"
                                        f"/{len(strict)}")
    print("| case | " + " | ".join(MODES) + " |")
    print("| --- |" + " --- |" * len(MODES))
    for case in CASES:
        print(f"| {case} | " + " | ".join(cell.get((case, m), "-") for m in MODES) + " |")
    for r in rows:
        if r["status"] != "OK":
            print(line_of(r))
    return 0 if rows and all(r["status"] == "OK" for r in rows) else 1


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 2 and sys.argv[1] == "--ipc-export":
        return ipc_exporter()
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":
        return summarize(Path(sys.argv[2]))
    if len(sys.argv) == 2 and sys.argv[1] == "--build":
        print(ensure_built())
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per (mode, case)")
    ap.add_argument("--sim", action="store_true",
                    help="run on memhook's simulator (a dry run of this script without a GPU)")
    ap.add_argument("--json", type=Path, help="summary file (default: $OUT/hooks_on_gpu.json)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    cases = [c for c in args.cases.split(",") if c]
    bad = [m for m in modes if m not in MODES] + [c for c in cases if c not in CASE_FUNCS]
    if bad:
        ap.error(f"unknown mode or case {bad}; modes: {list(MODES)}, cases: {list(CASES)}")
    info = versions()
    if args.sim:
        info["gpu"] = "none: --sim, memhook's simulator"
    print("hooks_on_gpu: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    results = []
    for mode in modes:
        for case in cases:
            res = run_case(mode, case, args.timeout, args.sim)
            results.append(res)
            print(line_of(res), flush=True)
    print("\nsummary (mode x case):")
    print(f"{'':13} " + " ".join(f"{c:<10}" for c in cases))
    for mode in modes:
        row = {r["case"]: r["status"] for r in results if r["mode"] == mode}
        print(f"{mode:<13} " + " ".join(f"{row.get(c, '-'):<10}" for c in cases))
    out = args.json or (Path(os.environ["OUT"]) / "hooks_on_gpu.json" if os.environ.get("OUT")
                        else None)
    if out is not None:
        out.write_text(json.dumps({"versions": info, "results": results}, indent=1))
        print(f"summary written to {out}")
    return 0 if all(r["status"] == "OK" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
