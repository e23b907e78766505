"""A host that forbids writable+executable code (seccomp, see
fixtures/wx_filter.c):

    python wx.py bistro,reloc WX_FIXTURE
    python wx.py bistro WX_FIXTURE

bistro,reloc: bistro fails on every driver entry point, cleanly, with the
errno's text in status(); reloc covers every function, so the driver and
the shared runtime are seen (one event per call, reloc's names) and
coverage is complete.  bistro alone: install() raises OSError(EACCES) that
says bistro could not patch any driver entry point and why, and changes
nothing - the mode installed before stays (none, or reloc, which keeps
recording), status() gives bistro's reason per function, no driver byte
changed.  Either way no mapping of the process is writable+executable.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

from hkchild import (
    Cases,
    MiB,
    Recorder,
    alloc_free_v2,
    byref,
    c_size_t,
    c_uint64,
    c_void_p,
    code_changes,
    expect_one,
    load_driver,
    primary_context,
    run_api_rounds,
    wx_mappings,
)

import memhook
from memhook import EventKind, HookMode
from memhook import MemoryType as MT

EACCES_TEXT = os.strerror(errno.EACCES)  # "Permission denied"


def main() -> int:
    mode, fixture = sys.argv[1], sys.argv[2]
    cases = Cases()
    wx = ctypes.CDLL(fixture)
    with cases.case("the host forbids W+X"):
        cases.check(wx.hk_wx_filter() == 0, "the seccomp filter could not be installed")
        probe = wx.hk_wx_probe()
        cases.check(probe == errno.EACCES, f"mmap(RWX) gives errno {probe}, want EACCES")
    if mode == "bistro":
        return bistro_alone(cases)
    with cases.case("install bistro,reloc"):
        report = memhook.install("bistro,reloc")
        cases.check(report.mode == HookMode.BISTRO | HookMode.RELOC, f"mode {report.mode!r}")
        for h in (h for h in report.hooks if h.kind):  # (kind 0: not asked for)
            cases.check(h.mechanism == HookMode.RELOC and h.installed,
                        f"{h.name}: covered by {h.mechanism!r}, want reloc alone")
            if h.api == "driver" and h.present:
                cases.check("bistro" in h.reason and EACCES_TEXT in h.reason,
                            f"{h.name}: the reason does not say why bistro failed: {h.reason!r}")
                cases.check(h.bistro_jump == 0, f"{h.name}: bistro jump {h.bistro_jump}")
        cases.check(report.coverage_complete, f"coverage incomplete: {report.uncovered}")
    rec = Recorder()
    cu = load_driver()
    primary_context(cu)
    with cases.case("no driver code changed"):
        names = [h.name for h in memhook.status().hooks if h.api == "driver"]
        changed = code_changes("libcuda.so.1", names)
        cases.check(not changed, f"driver code changed at {changed}")

    alloc_v2, free_v2 = alloc_free_v2(cu)

    with cases.case("driver calls through reloc"):
        run_api_rounds(cases, rec, alloc=alloc_v2, free=free_v2, alloc_name="cuMemAlloc_v2",
                       free_name="cuMemFree_v2", ev_type=MT.CUDA, query_type=MT.CUDA, device=0)

        def alloc_host(size):
            p = c_void_p()
            assert cu.cuMemHostAlloc(byref(p), size, 0) == 0
            return p.value, size

        run_api_rounds(cases, rec, alloc=alloc_host, free=lambda p: cu.cuMemFreeHost(p),
                       alloc_name="cuMemHostAlloc", free_name="cuMemFreeHost",
                       ev_type=MT.CUDA_HOST, query_type=MT.CUDA_HOST, device=0)

    with cases.case("shared runtime through reloc"):
        rt = ctypes.CDLL("libcudart.so.13")
        rt.cudaMalloc.argtypes = (ctypes.POINTER(c_void_p), c_size_t)
        rt.cudaFree.argtypes = (c_void_p,)
        rec.take()
        d = c_void_p()
        assert rt.cudaMalloc(byref(d), MiB) == 0
        expect_one(cases, rec.take(), "cudaMalloc", kind=EventKind.ALLOC, function="cudaMalloc",
                   address=d.value, size=MiB, mem_type=MT.CUDA, device=0)
        assert rt.cudaFree(d) == 0
        expect_one(cases, rec.take(), "cudaFree", kind=EventKind.FREE, function="cudaFree",
                   address=d.value, size=MiB, mem_type=MT.CUDA, device=0)

    with cases.case("no W+X mapping"):
        cases.check(not wx_mappings(), f"writable+executable mappings: {wx_mappings()}")
    return 0


def bistro_alone(cases: Cases) -> int:
    def failing_install(what: str) -> None:
        try:
            memhook.install("bistro")
        except OSError as exc:
            cases.check(exc.errno == errno.EACCES, f"{what}: errno {exc.errno}, want EACCES")
            text = str(exc)
            cases.check("bistro could not patch any driver entry point" in text,
                        f"{what}: the message does not say bistro patched nothing: {text!r}")
            cases.check(EACCES_TEXT in text, f"{what}: the message does not say why: {text!r}")
            cases.note(text)
        else:
            cases.check(False, f"{what}: install('bistro') on a W^X host did not raise")

    with cases.case("install bistro fails clearly"):
        failing_install("from mode none")
    with cases.case("after the failed install"):
        # nothing changed: still mode none, and status() says why bistro
        # covers nothing
        report = memhook.status()
        cases.check(report.mode == HookMode.NONE, f"mode {report.mode!r}, want none")
        covered = [h.name for h in report.hooks if h.mechanism]
        cases.check(not covered, f"status() says something covers {covered}")
        # (kind 0: the pointer-attribute calls, not asked for)
        driver = [h for h in report.hooks if h.api == "driver" and h.present and h.kind]
        cases.check(driver, "status() lists no driver function present")
        for h in driver:
            cases.check(not h.installed and "bistro" in h.reason and EACCES_TEXT in h.reason,
                        f"{h.name}: installed={h.installed}, reason {h.reason!r}")
        cases.check(not report.coverage_complete, "coverage_complete with nothing covered")
        names = [h.name for h in report.hooks if h.api == "driver"]
        changed = code_changes("libcuda.so.1", names)
        cases.check(not changed, f"driver code changed at {changed}")
        cases.check(not wx_mappings(), f"writable+executable mappings: {wx_mappings()}")
    with cases.case("a failed switch keeps the installed mode"):
        report = memhook.install("reloc")
        cases.check(report.mode == HookMode.RELOC, f"install('reloc'): mode {report.mode!r}")
        rec = Recorder()
        cu = load_driver()
        primary_context(cu)
        failing_install("from mode reloc")
        report = memhook.status()
        cases.check(report.mode == HookMode.RELOC, f"mode {report.mode!r}, want reloc still")
        lost = [h.name for h in report.hooks if h.kind and h.mechanism != HookMode.RELOC]
        cases.check(not lost, f"not covered by reloc any more: {lost}")
        rec.take()
        p = c_uint64()
        assert cu.cuMemAlloc_v2(byref(p), MiB) == 0
        expect_one(cases, rec.take(), "cuMemAlloc_v2 after the failed switch",
                   kind=EventKind.ALLOC, function="cuMemAlloc_v2", address=p.value, size=MiB,
                   mem_type=MT.CUDA, device=0)
        assert cu.cuMemFree_v2(p) == 0
        cases.check(not wx_mappings(), f"writable+executable mappings: {wx_mappings()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
