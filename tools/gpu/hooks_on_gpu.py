#!/usr/bin/env python3
"""memhook's CUDA hooks on a real GPU, in every mode, for the device tool:

    . tools/gpu/device_setup.sh && python3 tools/gpu/hooks_on_gpu.py [--modes M,..] [--cases C,..]

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
CASES = ("driver", "runtime", "cudart", "torch", "torch-vmm", "cupy", "cupy-async")


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


def _loaded(fragment: str) -> list[str]:
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if fragment in line and "/" in line})


def case_driver(c: Checker) -> None:
    from cuda.bindings import driver as cu

    import memhook
    MT = memhook.MemoryType
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
    arena = mmap.mmap(-1, 2 * 256 * MiB + 8 * MiB)
    base = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    offsets = {64: 0, MiB: 4096, 256 * MiB: 4096 + 2 * MiB}

    def register(n: int) -> tuple[int, int]:
        ok(cu.cuMemHostRegister(base + offsets[n], n, 0))
        return base + offsets[n], n

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
    arena = mmap.mmap(-1, 2 * 256 * MiB + 8 * MiB)
    base = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    offsets = {64: 0, MiB: 4096, 256 * MiB: 4096 + 2 * MiB}

    def register(n: int) -> tuple[int, int]:
        ok(rt.cudaHostRegister(base + offsets[n], n, 0))
        return base + offsets[n], n

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


CASE_FUNCS: dict[str, Callable[[Checker], None]] = {
    "driver": case_driver,
    "runtime": case_runtime,
    "cudart": case_cudart,
    "torch": case_torch,
    "torch-vmm": case_torch,
    "cupy": case_cupy,
    "cupy-async": lambda c: case_cupy(c, async_pool=True),
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
        report = memhook.install(MODES[mode_label][0])
        jumps = collections.Counter(h.bistro_jump for h in report.hooks if h.bistro_jump)
        result["install"] = {"mode": str(report.mode), "bistro_jumps": dict(jumps),
                             "library": memhook.library_path()}
        checker = Checker(memhook)
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


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
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
