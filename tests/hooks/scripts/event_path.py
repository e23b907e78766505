"""The event path when the hooks come and go (issue 15):

    python event_path.py MODE

Cases:
  stale size   an allocation freed while uninstalled must not lend its size
               to a later allocation at the same address: allocate 1 MiB
               under the hooks, uninstall, free it and allocate 4 KiB (the
               simulator's first-fit puts it at the same address), reinstall,
               allocate a neighbour inside the old 1 MiB, free the 4 KiB: the
               FREE a subscriber with exact sizes gets carries 4096 and the
               neighbour stays CUDA.
  stale size asked
               the same, with a subscriber that did not ask for exact sizes
               and a query of the 4 KiB after reinstall: its FREE carries
               4096, the size of the driver's answer the cache remembered,
               not the old ALLOC's 1 MiB (without the query: size unknown).

    python event_path.py MODE unload

  driver unload  load the simulated driver, allocate, dlclose it: with reloc
               alone the driver is unmapped and its pointer no longer answers
               CUDA (the dlclose wrapper puts an unload marker in the event
               order; the cache forgets every region before it); with bistro
               the driver stays loaded (bistro's reference) and memhook agrees
               with the driver that the allocation lives.  Then load it again
               and allocate: the ALLOC is seen and answers CUDA, coverage is
               complete.
"""

from __future__ import annotations

import sys

from hkchild import (Cases, Recorder, alloc_free_v2, check_install, fmt_all, install,
                     load_driver, mode_arg, primary_context, uses_bistro)

import memhook
from memhook import EventKind, MemoryType

MiB = 1 << 20


def stale_size(cases: Cases, mode: str, cu, exact: bool) -> None:
    alloc, free = alloc_free_v2(cu)
    cu.cuMemFree_v2  # looked up now, while reloc's dlsym answers with the wrapper
    # (exact: sized in the hook, the driver's; else by the drain, from the
    # cache's record of the query's driver answer)
    rec = Recorder(exact=exact)
    big, _ = alloc(MiB)
    rec.take()
    memhook.uninstall()
    free(big)
    small, _ = alloc(4096)
    if not cases.check(small == big, f"the simulator put 4 KiB at {small:#x}, not {big:#x}"):
        return
    install(mode)
    if not exact:
        got = memhook.memory_type(small)
        cases.check(got == MemoryType.CUDA, f"the 4 KiB allocated unseen answers {got}")
    neighbour, _ = alloc(4096)
    cases.check(big < neighbour < big + MiB,
                f"the neighbour {neighbour:#x} is not inside the old 1 MiB at {big:#x}")
    rec.take()
    free(small)
    frees = [e for e in rec.take() if e.kind == EventKind.FREE]
    cases.check([e.size for e in frees] == [4096], f"the FREE of the 4 KiB: {fmt_all(frees)}")
    got = memhook.memory_type(neighbour)
    cases.check(got == MemoryType.CUDA, f"the live neighbour answers {got}")
    free(neighbour)
    rec.sub.close()


def driver_reload(cases: Cases, mode: str) -> None:
    """dlclose the simulated driver until it is unmapped, then load it again."""
    import _ctypes
    import ctypes
    import os

    from hkchild import Lib, _SIGS

    rec = Recorder()
    cu = Lib(ctypes.CDLL("libcuda.so.1"), _SIGS)
    ctx = primary_context(cu)
    alloc, free = alloc_free_v2(cu)
    old, _ = alloc(MiB)
    cases.check(memhook.memory_type(old) == MemoryType.CUDA, "the allocation is not CUDA")
    rec.take()
    handle = cu._h._handle
    del cu, alloc, free, ctx
    _ctypes.dlclose(handle)  # the only reference (memhook takes none in this mode)
    libc = ctypes.CDLL(None)
    libc.dlopen.restype = ctypes.c_void_p
    libc.dlopen.argtypes = (ctypes.c_char_p, ctypes.c_int)
    still = libc.dlopen(b"libcuda.so.1", os.RTLD_LAZY | os.RTLD_NOLOAD)
    if uses_bistro(mode):
        # bistro holds a reference on the driver it patched for the life of
        # the process (callers may hold its trampolines): the driver stays,
        # and so does its allocation - CUDA is the truth, the driver agrees.
        cases.check(still, "bistro's driver was unloaded under its patches")
    else:
        cases.check(not still, "libcuda.so.1 is still loaded after dlclose")
    cu = None
    if still:
        libc.dlclose.argtypes = (ctypes.c_void_p,)
        libc.dlclose(still)
        cu = Lib(ctypes.CDLL("libcuda.so.1"), _SIGS)
        primary_context(cu)
        base = ctypes.c_uint64()
        known = cu.cuMemGetAddressRange_v2(ctypes.byref(base), None, old) == 0
        got = memhook.memory_type(old)
        cases.check(known and got == MemoryType.CUDA,
                    f"the driver still holds the allocation ({known}); memhook says {got}")
    else:
        got = memhook.memory_type(old)
        cases.check(got != MemoryType.CUDA, f"a pointer of the unloaded driver answers {got}")
        cu = Lib(ctypes.CDLL("libcuda.so.1"), _SIGS)
        primary_context(cu)
    alloc, free = alloc_free_v2(cu)
    new, _ = alloc(4096)
    evs = rec.take()
    allocs = [e for e in evs if e.kind == EventKind.ALLOC and e.address == new]
    cases.check(len(allocs) == 1, f"the reloaded driver's ALLOC: {fmt_all(evs)}")
    got = memhook.memory_type(new)
    cases.check(got == MemoryType.CUDA, f"an allocation after the reload answers {got}")
    cases.check(memhook.status().coverage_complete, "coverage not complete after the reload")
    free(new)
    cases.check(memhook.memory_type(new) != MemoryType.CUDA, "freed, still CUDA")


def main() -> int:
    mode = mode_arg()
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    if "unload" in sys.argv[2:]:
        with cases.case("driver unload"):
            driver_reload(cases, mode)
        return 0
    cu = load_driver()
    primary_context(cu)
    with cases.case("stale size"):
        stale_size(cases, mode, cu, exact=True)
    with cases.case("stale size asked"):
        stale_size(cases, mode, cu, exact=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
