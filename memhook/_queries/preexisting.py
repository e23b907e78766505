"""At ``install()``: mark the VA ranges CUDA had reserved already as UNKNOWN.

Why: the hooks only see calls made after they are installed.  Memory the
driver handed out before that is in no cache region, and once the hooks
vouch for complete coverage a pointer in no region is answered HOST without
asking the driver - wrong for those allocations.  UCX's memtype cache has
the same problem and the same cure: every range where CUDA may have put
memory is recorded as UNKNOWN, and :func:`memhook.memory_type` resolves
UNKNOWN through the driver (and remembers the answer).

Where CUDA puts memory, as ``/proc/self/maps`` shows it:

* anonymous no-access mappings (``---p``, no path): the driver reserves its
  unified VA window this way and maps device memory into pieces of it;
* mappings of ``/dev/nvidia*`` (``nvidiactl``, ``nvidia-uvm``,
  ``nvidia0``...): device, UVM and pinned memory the driver mapped;
* the simulator (``memhook.sim``, csrc/sim/driver/vaspace.c): one PROT_NONE
  anonymous reservation (caught by the first rule), into which allocated
  "device" memory is mapped read-write from a memfd named
  ``memhook-sim-gpu`` (shown as ``/memfd:memhook-sim-gpu (deleted)``).

This over-approximates on purpose: other no-access mappings (thread stack
guards, malloc arena reserves) are marked too, and a query there costs one
driver call - correct, just slower.  Only ranges not in the cache already are
marked, so regions the hooks recorded keep their types.  And nothing is
marked unless the process has a driver loaded *and initialised* before
install: a driver that was never initialised has handed out nothing, so the
no-access mappings in the process are not CUDA's.
"""

from __future__ import annotations

import ctypes
import logging
import os

from .._objects.procmaps import Mapping, parse_maps, read_maps_text
from .._objects.sonames import LIBCUDA_SONAME
from .._values.types import MemoryType
from ..cache import MemtypeCache

__all__ = ["SIM_MEMFD_PREFIX", "cuda_reserved", "cuda_reserved_ranges", "driver_initialised",
           "mark_preexisting"]

_log = logging.getLogger("memhook")

SIM_MEMFD_PREFIX = "/memfd:memhook-sim-gpu"
"""How /proc/self/maps names the simulator's device-memory memfd."""

_NVIDIA_PREFIX = "/dev/nvidia"


def cuda_reserved(m: Mapping) -> bool:
    """True for a range where CUDA may hold memory (see the module docstring)."""
    if not m.path:
        return not any(c in m.perms[:3] for c in "rwx")
    return m.path.startswith(_NVIDIA_PREFIX) or m.path.startswith(SIM_MEMFD_PREFIX)


def cuda_reserved_ranges(maps_text: str | None = None) -> list[tuple[int, int]]:
    """``(start, end)`` of the CUDA-reserved ranges, touching ones merged,
    in address order (``maps_text``: default this process's maps).

    This process's own maps are walked by the core in one call
    (``memhook_cuda_reserved_ranges``, the same rule over the same lines):
    the kernel hands the file out a page per read, and each of Python's
    reads would release the GIL (memhook._binding.control says what that costs in a
    busy process)."""
    if maps_text is None:
        from .._binding import control as _control

        found = _control.cuda_reserved_ranges()
        if found is not None:
            return found
    text = read_maps_text() if maps_text is None else maps_text
    ranges: list[tuple[int, int]] = []
    for m in sorted(parse_maps(text), key=lambda m: m.start):
        if not cuda_reserved(m):
            continue
        if ranges and m.start <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], m.end))
        else:
            ranges.append((m.start, m.end))
    return ranges


def mark_preexisting(cache: MemtypeCache, maps_text: str | None = None) \
        -> list[tuple[int, int]]:
    """Record the CUDA-reserved ranges that no cache region covers as UNKNOWN
    in ``cache``.  Returns the ``(start, end)`` ranges it marked."""
    regions = [(r.start, r.end) for r in cache.regions()]
    marked: list[tuple[int, int]] = []
    i = 0
    for start, end in cuda_reserved_ranges(maps_text):
        while i < len(regions) and regions[i][1] <= start:
            i += 1
        cur = start
        j = i
        while cur < end:
            if j < len(regions) and regions[j][0] < end:
                r_start, r_end = regions[j]
                if r_start > cur:
                    marked.append((cur, r_start))
                cur = max(cur, r_end)
                j += 1
            else:
                marked.append((cur, end))
                cur = end
    for start, end in marked:
        cache.update(start, end - start, MemoryType.UNKNOWN, -1)
    if marked:
        _log.debug("memhook: marked %d pre-existing CUDA-reserved ranges UNKNOWN (%d bytes)",
                   len(marked), sum(e - s for s, e in marked))
    return marked


_CUDA_SUCCESS = 0


_initialised_seen = False
"""A driver once initialised stays so (until unloaded, which marks the
cache afresh anyway): the answer is kept, so a busy process's install()
makes no ctypes call for it (each releases the GIL)."""


def driver_initialised() -> bool:
    """True when libcuda.so.1 is loaded in this process and initialised
    (``cuDeviceGetCount`` succeeds: before ``cuInit`` it answers
    CUDA_ERROR_NOT_INITIALIZED).  Never loads or initialises a driver."""
    global _initialised_seen
    if _initialised_seen:
        return True
    _initialised_seen = _ask_initialised()
    return _initialised_seen


def _ask_initialised() -> bool:
    try:
        driver = ctypes.CDLL(LIBCUDA_SONAME, mode=os.RTLD_NOW | os.RTLD_NOLOAD)
    except OSError:
        return False
    try:
        fn = driver.cuDeviceGetCount
    except AttributeError:
        return False
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
    count = ctypes.c_int(0)
    return fn(ctypes.byref(count)) == _CUDA_SUCCESS


def _after_fork_in_child() -> None:
    global _initialised_seen
    _initialised_seen = False  # (CUDA does not survive fork: the child asks again)


os.register_at_fork(after_in_child=_after_fork_in_child)
