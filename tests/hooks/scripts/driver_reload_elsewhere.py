"""The driver unloaded and loaded again at ANOTHER address (reloc):

    python driver_reload_elsewhere.py reloc

reloc learns the definition of each hooked name once; after the driver is
dlclosed, memory mapped since may sit where it was (here: an anonymous
mapping put exactly there), and the driver loaded again lands elsewhere.
The definitions of the old driver must be forgotten at its dlclose: the
reloaded driver's ALLOC is seen, answers CUDA, and its free is seen too.
(A definition kept would point into that mapping: the wrapper would call
it, or reloc would leave the new driver's slots alone.)
"""

from __future__ import annotations

import ctypes
import mmap
import os

from hkchild import Cases, Lib, Recorder, _SIGS, alloc_free_v2, check_install, fmt_all, install, \
    mode_arg, primary_context

import memhook
from memhook import EventKind, MemoryType


def driver_span() -> tuple[int, int] | None:
    """(first, end) of libcuda.so.1's mappings."""
    lo = hi = None
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "libcuda.so" in line:
                a, b = (int(x, 16) for x in line.split()[0].split("-"))
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
    return None if lo is None else (lo, hi)


def main() -> int:
    import _ctypes

    mode = mode_arg()
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    with cases.case("reload elsewhere"):
        cu = Lib(ctypes.CDLL("libcuda.so.1"), _SIGS)
        primary_context(cu)
        alloc, _ = alloc_free_v2(cu)
        alloc(4096)
        span = driver_span()
        handle = cu._h._handle
        del cu, alloc
        _ctypes.dlclose(handle)
        cases.check(driver_span() is None, "libcuda.so.1 is still mapped after dlclose")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long)
        fixed_noreplace = 0x100000
        assert span is not None
        got = libc.mmap(span[0], span[1] - span[0], mmap.PROT_READ,
                        mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | fixed_noreplace, -1, 0)
        cases.check(got == span[0],
                    f"could not map the old driver's place: {os.strerror(ctypes.get_errno())}")
        rec = Recorder()
        cu = Lib(ctypes.CDLL("libcuda.so.1"), _SIGS)
        again = driver_span()
        cases.check(again is not None and (again[0] >= span[1] or again[1] <= span[0]),
                    f"the driver came back at {again}, inside its old place {span}")
        primary_context(cu)
        alloc, free = alloc_free_v2(cu)
        new, _ = alloc(4096)
        evs = rec.take()
        allocs = [e for e in evs if e.kind == EventKind.ALLOC and e.address == new]
        cases.check(len(allocs) == 1, f"the reloaded driver's ALLOC: {fmt_all(evs)}")
        got_type = memhook.memory_type(new)
        cases.check(got_type == MemoryType.CUDA,
                    f"an allocation after the reload answers {got_type}")
        free(new)
        frees = [e for e in rec.take() if e.kind == EventKind.FREE and e.address == new]
        cases.check(len(frees) == 1, "the reloaded driver's FREE was not seen")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
