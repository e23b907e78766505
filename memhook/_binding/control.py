"""The core's control calls that run long, made with the GIL held.

cffi releases the GIL around every call into C.  For a short call that
costs nothing; for one that runs long - installing or removing the hooks
(bistro's live-write protocol, reloc's walk over every loaded object),
reading the whole hook table, walking /proc/self/maps, taking a batch of
events out of the queue - another Python thread takes the GIL meanwhile,
and in a process whose threads keep it busy the caller then waits its turn
for each release, on a loaded box far longer than the call itself took
(docs/performance.md, "Costs behind the code's choices").  These calls
are therefore builtins of the extension (csrc/pyext/control.c) that keep
the GIL: other Python threads wait for the call (milliseconds at most),
and the caller never waits for them, so install() and uninstall() release
the GIL a bounded number of times (none of their own).  The extension is
memhook's one binding of the core: cffi's functions for the short calls,
its own builtins for these and for the queries (csrc/pyext/query.c).

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

from typing import Any

from .core import ffi

try:  # (after memhook._binding.core, which binds the core first)
    from .._native import (control_coverage_complete,  # type: ignore[import-not-found]
                          control_cuda_reserved_ranges, control_events_drain,
                          control_events_drain_into, control_hook_rows, control_install,
                          control_queue_stats, control_uninstall)
except ImportError as exc:  # pragma: no cover - an extension built by another cffi
    raise ImportError("memhook's extension memhook._native lacks its control builtins "
                      f"(csrc/pyext/control.c; {exc}): rebuild it with `pip install .`") from exc

__all__ = ["coverage_complete", "cuda_reserved_ranges", "events_drain", "events_drain_into",
           "hook_rows", "install", "queue_stats", "uninstall"]

_VIEWS_MAX = 16
_views: dict[int, tuple[Any, Any]] = {}


def _view(cdata: Any) -> Any:
    """``ffi.buffer(cdata)``, made once per array: the drain passes the same
    few arrays on every call.  (Each entry keeps its array alive, so an id
    is never another array's.)"""
    got = _views.get(id(cdata))
    if got is None or got[0] is not cdata:
        got = (cdata, ffi.buffer(cdata))
        if len(_views) >= _VIEWS_MAX:
            _views.clear()
        _views[id(cdata)] = got
    return got[1]


def install(mode: int) -> tuple[int, str]:
    """``memhook_hooks_install(mode)``: (its return code, its reason)."""
    rc, why = control_install(mode)
    return int(rc), str(why)


def uninstall() -> int:
    """``memhook_hooks_uninstall()``."""
    return int(control_uninstall())


def coverage_complete() -> bool:
    """``memhook_hooks_coverage_complete()`` (a dlopen and a dlsym per
    driver function: asked after every install)."""
    return bool(control_coverage_complete())


def queue_stats(out: Any) -> None:
    """``memhook_queue_stats_get`` into a cffi ``memhook_queue_stats *``
    (it waits for the drain under way in another thread, if any)."""
    control_queue_stats(ffi.buffer(out))


def events_drain(out: Any, capacity: int, mark: Any) -> int:
    """``memhook_events_drain_bounded`` into a cffi ``memhook_event[]``
    with a cffi ``uint64_t *`` mark: a bounded call (a batch of events, a
    fraction of a millisecond), made with the GIL held so that a query that
    drains never gives it up doing so."""
    return int(control_events_drain(_view(out), capacity, _view(mark)))


def events_drain_into(out: Any, capacity: int, mark: Any, filled: Any) -> int:
    """``memhook_events_drain_into``: as :func:`events_drain`, into
    ``out[filled[0]:capacity]``, with the core adding what it took to the
    cffi ``uint64_t *`` ``filled`` before it returns (an exception that
    lands as the call returns loses the return value, not the events)."""
    return int(control_events_drain_into(_view(out), capacity, _view(mark), _view(filled)))


def hook_rows(table: Any, count: int) -> int:
    """``memhook_hook_get_range(0, count, table)`` into a cffi
    ``memhook_hook_info[count]``; returns how many rows it filled."""
    return int(control_hook_rows(ffi.buffer(table), count))


def cuda_reserved_ranges() -> list[tuple[int, int]] | None:
    """``memhook_cuda_reserved_ranges``: this process's CUDA-reserved VA
    ranges as ``(start, end)``, in address order; None when the maps cannot
    be read."""
    return control_cuda_reserved_ranges()  # type: ignore[no-any-return]
