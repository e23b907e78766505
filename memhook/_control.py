"""The core's control calls that run long, made with the GIL held.

cffi releases the GIL around every call into C.  For a short call that
costs nothing; for one that runs long - installing or removing the hooks
(bistro's live-write protocol, reloc's walk over every loaded object),
reading the whole hook table, walking /proc/self/maps, taking a batch of
events out of the queue - another Python
thread takes the GIL meanwhile, and in a process whose threads keep it busy
the caller then waits its turn when the call returns: one such release cost
a median of 16 ms and a p99 of 220 ms beside 4 spinning and 4 allocating
Python threads on a loaded 2-core box (issue 23), and an install/uninstall
cycle made a dozen of them.  Called through ``ctypes.PyDLL`` on the same
loaded library, the same functions run with the GIL held: other Python
threads wait for the call (milliseconds at most), and the caller never waits
for them, so install() and uninstall() release the GIL a bounded number of
times (none of their own).

Why that is safe: none of these functions waits for anything a Python
thread holds.  They take the core's own locks, which only C code holds, and
that code needs no GIL to finish; and the loader's lock (dlopen, dladdr,
dl_iterate_phdr), which a Python thread holds only inside a dlopen or
dlclose, where CPython keeps the GIL anyway (an import, ctypes).  Nothing
they call runs Python.  The one way left to deadlock: a library whose
constructor or destructor runs Python, loaded or unloaded by a call that
released the GIL (reloc's dlclose wrapper holds its lock across the real
dlclose), while one of these waits for that lock - nothing in memhook does
that, and such a library would deadlock against any extension that holds
the GIL across a dlopen.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ._core import _core_handle, ffi

__all__ = ["coverage_complete", "cuda_reserved_ranges", "events_drain", "events_drain_into",
           "hook_rows", "install", "queue_stats", "uninstall"]

_held = ctypes.PyDLL(None, handle=_core_handle._handle)


def _function(name: str, argtypes: list[Any], restype: Any) -> Any:
    """One of the core's functions, called with the GIL held."""
    fn = getattr(_held, name)
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


_install = _function("memhook_hooks_install", [ctypes.c_uint, ctypes.c_char_p, ctypes.c_size_t],
                     ctypes.c_int)
_uninstall = _function("memhook_hooks_uninstall", [], ctypes.c_int)
_rows = _function("memhook_hook_get_range", [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p],
                  ctypes.c_size_t)
_coverage = _function("memhook_hooks_coverage_complete", [], ctypes.c_int)
_queue_stats = _function("memhook_queue_stats_get", [ctypes.c_void_p], None)
_drain = _function("memhook_events_drain_bounded",
                   [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], ctypes.c_size_t)
_drain_into = _function("memhook_events_drain_into",
                        [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p],
                        ctypes.c_size_t)
_reserved = _function("memhook_cuda_reserved_ranges",
                      [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t], ctypes.c_longlong)


def install(mode: int) -> tuple[int, str]:
    """``memhook_hooks_install(mode)``: (its return code, its reason)."""
    why = ctypes.create_string_buffer(512)
    rc = int(_install(mode, why, len(why)))
    return rc, why.value.decode(errors="replace")


def uninstall() -> int:
    """``memhook_hooks_uninstall()``."""
    return int(_uninstall())


def coverage_complete() -> bool:
    """``memhook_hooks_coverage_complete()`` (a dlopen and a dlsym per
    driver function: asked after every install)."""
    return bool(_coverage())


def queue_stats(out: Any) -> None:
    """``memhook_queue_stats_get`` into a cffi ``memhook_queue_stats *``
    (it waits for the drain under way in another thread, if any)."""
    _queue_stats(int(ffi.cast("uintptr_t", out)))


def events_drain(out: Any, capacity: int, mark: Any) -> int:
    """``memhook_events_drain_bounded`` into a cffi ``memhook_event[]``
    with a cffi ``uint64_t *`` mark: a bounded call (a batch of events, a
    fraction of a millisecond), made by the drain's queries and its feeder
    alike, so that a query that drains never gives up the GIL doing so."""
    return int(_drain(int(ffi.cast("uintptr_t", out)), capacity, int(ffi.cast("uintptr_t", mark))))


def events_drain_into(out: Any, capacity: int, mark: Any, filled: Any) -> int:
    """``memhook_events_drain_into``: as :func:`events_drain`, into
    ``out[filled[0]:capacity]``, with the core adding what it took to the
    cffi ``uint64_t *`` ``filled`` before it returns (an exception that
    lands as the call returns loses the return value, not the events)."""
    return int(_drain_into(int(ffi.cast("uintptr_t", out)), capacity,
                           int(ffi.cast("uintptr_t", mark)), int(ffi.cast("uintptr_t", filled))))


def hook_rows(table: Any, count: int) -> int:
    """``memhook_hook_get_range(0, count, table)`` into a cffi
    ``memhook_hook_info[count]``; returns how many rows it filled."""
    return int(_rows(0, count, int(ffi.cast("uintptr_t", table))))


def cuda_reserved_ranges() -> list[tuple[int, int]] | None:
    """``memhook_cuda_reserved_ranges``: this process's CUDA-reserved VA
    ranges as ``(start, end)``, in address order; None when the maps cannot
    be read."""
    cap = 256
    while True:
        pairs = (ctypes.c_uint64 * (2 * cap))()
        n = int(_reserved(pairs, cap))
        if n < 0:
            return None
        if n <= cap:
            flat = pairs[:2 * n]
            return list(zip(flat[0::2], flat[1::2]))
        cap = n + 64  # (mappings came and went between the two walks: room to spare)
