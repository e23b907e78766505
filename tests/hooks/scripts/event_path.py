"""The event path when the hooks come and go (issue 15):

    python event_path.py MODE

Cases:
  stale size   an allocation freed while uninstalled must not lend its size
               to a later allocation at the same address: allocate 1 MiB
               under the hooks, uninstall, free it and allocate 4 KiB (the
               simulator's first-fit puts it at the same address), reinstall,
               allocate a neighbour inside the old 1 MiB, free the 4 KiB: the
               FREE carries 4096 and the neighbour stays CUDA.
"""

from __future__ import annotations

import sys

from hkchild import (Cases, Recorder, alloc_free_v2, check_install, fmt_all, install,
                     load_driver, mode_arg, primary_context)

import memhook
from memhook import EventKind, MemoryType

MiB = 1 << 20


def stale_size(cases: Cases, mode: str, cu) -> None:
    alloc, free = alloc_free_v2(cu)
    cu.cuMemFree_v2  # looked up now, while reloc's dlsym answers with the wrapper
    rec = Recorder()
    big, _ = alloc(MiB)
    rec.take()
    memhook.uninstall()
    free(big)
    small, _ = alloc(4096)
    if not cases.check(small == big, f"the simulator put 4 KiB at {small:#x}, not {big:#x}"):
        return
    install(mode)
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


def main() -> int:
    mode = mode_arg()
    cases = Cases()
    with cases.case("install"):
        check_install(cases, mode, install(mode))
    cu = load_driver()
    primary_context(cu)
    with cases.case("stale size"):
        stale_size(cases, mode, cu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
