"""Mode none hooks nothing:

    python mode_none.py none STATIC_RUNTIME_FIXTURE

install("none") (and MEMHOOK_CUDA_MODE=none through install()) reports every
function uncovered, changes no byte of the driver's or the runtime's code,
leaves dlsym answering the libraries' own functions, and the allocations of
the driver, the shared runtime and a static runtime make no event at all.
Then, to show the checks can see hooks: bistro,reloc patches and records,
and switching back to none restores every byte and records nothing again.
"""

from __future__ import annotations

import ctypes
import os
import sys

from hkchild import (
    Cases,
    Recorder,
    byref,
    c_size_t,
    c_uint64,
    c_void_p,
    code_changes,
    load_driver,
    primary_context,
    resolves_to_own_code,
)

import memhook
from memhook import HookMode


def main() -> int:
    if sys.argv[1] != "none":
        raise SystemExit("usage: mode_none.py none STATIC_RUNTIME_FIXTURE")
    static_fixture = sys.argv[2]
    cases = Cases()
    os.environ["MEMHOOK_CUDA_MODE"] = "none"
    with cases.case("install none"):
        report = memhook.install()  # None: MEMHOOK_CUDA_MODE
        cases.check(report.mode == HookMode.NONE, f"mode {report.mode!r}")
        installed = [h.name for h in report.hooks if h.installed or h.mechanism]
        cases.check(not installed, f"covered in mode none: {installed}")
        cases.check(all(h.reason for h in report.hooks),
                    "a function without a reason for being uncovered")
    report = memhook.status()
    driver_names = [h.name for h in report.hooks if h.api == "driver"]
    runtime_names = [h.name for h in report.hooks if h.api == "runtime"]
    rec = Recorder()
    cu = load_driver()
    primary_context(cu)
    rt = ctypes.CDLL("libcudart.so.13")
    static = ctypes.CDLL(static_fixture)
    static.hk_rt_fn.restype = c_void_p
    static.hk_rt_fn.argtypes = (ctypes.c_char_p,)
    cuda_malloc_static = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(c_void_p), c_size_t)(
        static.hk_rt_fn(b"cudaMalloc"))
    cuda_free_static = ctypes.CFUNCTYPE(ctypes.c_int, c_void_p)(static.hk_rt_fn(b"cudaFree"))

    def workload() -> None:
        p = c_uint64()
        assert cu.cuMemAlloc_v2(byref(p), 1 << 20) == 0
        assert cu.cuMemFree_v2(p) == 0
        h = c_void_p()
        assert cu.cuMemAllocHost_v2(byref(h), 4096) == 0
        assert cu.cuMemFreeHost(h) == 0
        fresh = ctypes.CDLL("libcuda.so.1")  # a lookup made now, not a cached one
        fresh.cuMemAllocManaged.argtypes = (ctypes.POINTER(c_uint64), c_size_t, ctypes.c_uint)
        assert fresh.cuMemAllocManaged(byref(p), 4096, 1) == 0
        assert cu.cuMemFree_v2(p) == 0
        d = c_void_p()
        rt.cudaMalloc.argtypes = (ctypes.POINTER(c_void_p), c_size_t)
        assert rt.cudaMalloc(byref(d), c_size_t(1 << 20)) == 0
        assert rt.cudaFree(d) == 0
        assert cuda_malloc_static(byref(d), 1 << 20) == 0
        assert cuda_free_static(d) == 0

    def check_untouched(what: str) -> None:
        changed = code_changes("libcuda.so.1", driver_names)
        cases.check(not changed, f"{what}: driver code changed at {changed}")
        changed = code_changes("libcudart.so.13", runtime_names)
        cases.check(not changed, f"{what}: runtime code changed at {changed}")
        wrong = resolves_to_own_code("libcuda.so.1", ctypes.CDLL("libcuda.so.1"), driver_names)
        cases.check(not wrong, f"{what}: dlsym does not answer the driver's own code: {wrong}")
        wrong = resolves_to_own_code("libcudart.so.13", ctypes.CDLL("libcudart.so.13"),
                                     runtime_names)
        cases.check(not wrong, f"{what}: dlsym does not answer the runtime's own code: {wrong}")

    with cases.case("none: nothing patched, nothing recorded"):
        check_untouched("mode none")
        produced = memhook.status().queue.produced
        workload()
        evs = rec.take()
        cases.check(not evs, f"mode none recorded {len(evs)} events: {evs[:4]}")
        cases.check(memhook.status().queue.produced == produced,
                    "mode none: the event queue grew")

    with cases.case("bistro,reloc then none again"):
        report = memhook.install("bistro,reloc")
        cases.check(report.mode == HookMode.BISTRO | HookMode.RELOC, f"mode {report.mode!r}")
        patched = code_changes("libcuda.so.1", driver_names)
        cases.check(len(patched) >= 20, f"bistro,reloc patched only {patched}")
        workload()
        evs = rec.take()
        cases.check(len(evs) == 10, f"bistro,reloc: want 10 events, got {len(evs)}: {evs}")
        report = memhook.install("none")
        cases.check(report.mode == HookMode.NONE, f"mode {report.mode!r} after install('none')")
        check_untouched("switched back to none")
        workload()
        evs = rec.take()
        cases.check(not evs, f"switched back to none, recorded {evs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
