"""Installing, removing and inspecting the CUDA hooks.

:func:`install` puts the hooks of the core's table (the functions :func:`status` lists) in
place with the mechanisms of a :class:`~memhook.HookMode`; :func:`uninstall`
restores every byte and GOT slot; :func:`status` says, per function, which
mechanism covers it and, where none does, why.  The work is the core's
(``memhook_hooks_install`` and friends); this module parses the mode,
serialises Python callers, marks the ranges CUDA reserved before the hooks
(:mod:`memhook._queries.preexisting`) and turns the core's table into
:class:`HookReport` / :class:`HookInfo`.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from ._binding import control as _control
from ._events import feeder as _feeder
from ._binding import hook_table as _hook_table
from ._queries import preexisting as _preexisting
from ._binding.core import ffi, lib
from ._values.modes import HookMode
from ._queries.query import process_cache
from .events import EventKind

__all__ = ["HookInfo", "HookReport", "QueueStats", "hook_index", "install", "status", "uninstall"]

_log = logging.getLogger("memhook")

@dataclass(frozen=True)
class HookInfo:
    """One function of the hook table.

    ``api`` is ``"driver"`` or ``"runtime"``; ``mechanism`` the mechanisms
    covering it now (``HookMode.NONE`` when nothing does); ``installed`` is
    True when some mechanism covers it; ``reason`` says why it is not covered
    (or why bistro refused it while reloc covers it), "" otherwise.
    ``present`` is True when the loaded library exports the function,
    ``bistro_jump`` the size of bistro's jump (5 or 12, 0 when bistro did
    not patch it), ``index`` its place in the table (``Event`` order).
    ``bistro_overwritten`` is True when another library patched the entry
    over bistro's jump after memhook did: memhook then never takes its own
    jump out (that would erase the other's), and ``reason`` says so."""

    name: str
    api: str
    mechanism: HookMode
    installed: bool
    reason: str
    kind: EventKind
    present: bool
    bistro_jump: int
    index: int
    bistro_overwritten: bool = False


@dataclass(frozen=True)
class QueueStats:
    """The core event queue's counters (``memhook_queue_stats``)."""

    produced: int
    consumed: int
    segments_live: int
    segments_peak: int
    segment_bytes: int
    free_size_from_driver: int
    free_size_unknown: int
    lanes: int  # per-thread event lanes made so far (an exited thread's is reused)

    @property
    def pending(self) -> int:
        """Events recorded but not drained yet."""
        return self.produced - self.consumed


@dataclass(frozen=True)
class HookReport:
    """What the hooks are doing: the installed ``mode``, every table
    function (``hooks``), and whether the hooks cover every allocation entry
    point of the loaded driver (``coverage_complete``: only then is a pointer
    in no cache region answered HOST without asking the driver)."""

    mode: HookMode
    hooks: list[HookInfo]
    coverage_complete: bool
    queue: QueueStats = field(repr=False)
    #: The driver's pointer-attribute calls are answered from the cache
    #: (``install(pointer_attributes=True)``, ``MEMHOOK_POINTER_ATTRIBUTES=1``).
    pointer_attributes: bool = False

    def hook(self, name: str) -> HookInfo:
        """The entry for function ``name`` (KeyError if not in the table).

        Runtime complexity: O(h) for h functions in the table.

        >>> import memhook
        >>> info = memhook.status().hook("cudaMalloc")
        >>> info.api, info.kind
        ('runtime', <EventKind.ALLOC: 1>)
        >>> memhook.status().hook("malloc")
        Traceback (most recent call last):
            ...
        KeyError: "'malloc' is not in memhook's hook table"
        """
        for info in self.hooks:
            if info.name == name:
                return info
        raise KeyError(f"{name!r} is not in memhook's hook table")

    @property
    def uncovered(self) -> list[HookInfo]:
        """The functions the loaded libraries export that nothing covers.

        Runtime complexity: O(h) for h functions in the table.

        >>> import memhook
        >>> memhook.uninstall()
        >>> [h.name for h in memhook.status().uncovered] == [
        ...     h.name for h in memhook.status().hooks if h.present]
        True
        """
        return [h for h in self.hooks if h.present and not h.installed
                and (h.kind or self.pointer_attributes)]

    def __str__(self) -> str:
        """A table for people (``print(memhook.status())``): a summary line,
        the queue, then one row per function; the repr stays the dataclass's."""
        covered = sum(h.installed for h in self.hooks)
        present = sum(h.present for h in self.hooks)
        lines = [f"memhook hooks: mode {self.mode}; {covered} of {len(self.hooks)} functions "
                 f"covered, {present} present in the loaded libraries; coverage "
                 f"{'complete' if self.coverage_complete else 'not complete'}"
                 f"{'; pointer attributes answered' if self.pointer_attributes else ''}"]
        q = self.queue
        lines.append(f"event queue: {q.pending} pending ({q.produced} produced, {q.consumed} "
                     f"drained), {q.lanes} thread lanes")
        reasons = {h.reason for h in self.hooks}
        shared = reasons.pop() if len(reasons) == 1 else ""
        if shared:  # e.g. mode none: one reason for every row
            lines.append(f"every function: {shared}")
        header = ("function", "api", "kind", "present", "mechanism", "jump", "reason")
        rows = [(h.name, h.api, h.kind.name or str(h.kind), "yes" if h.present else "no",
                 str(h.mechanism), str(h.bistro_jump) if h.bistro_jump else "-",
                 "" if shared else h.reason) for h in self.hooks]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
        for row in [header, *rows]:
            cells = [c.ljust(w) for c, w in zip(row, widths)] + [row[-1]]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)


_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


_POINTER_ATTRIBUTES_ENV = "MEMHOOK_POINTER_ATTRIBUTES"


def _pointer_attributes(value: object) -> bool:
    """install()'s ``pointer_attributes``: a bool, or None for the
    environment (``MEMHOOK_POINTER_ATTRIBUTES``: ``1``, ``0`` or unset)."""
    if value is None:
        text = os.environ.get(_POINTER_ATTRIBUTES_ENV, "").strip()
        if text not in ("", "0", "1"):
            raise ValueError(f"{_POINTER_ATTRIBUTES_ENV}={text!r}: valid values are 1 (answer "
                             f"the driver's pointer-attribute calls from the cache) and 0 "
                             f"(the default)")
        return text == "1"
    if not isinstance(value, bool):
        raise TypeError(f"pointer_attributes must be True, False or None (the environment's "
                        f"{_POINTER_ATTRIBUTES_ENV}), not {value!r}")
    return value


def install(mode: str | int | HookMode | None = None, *,
            pointer_attributes: bool | None = None) -> HookReport:
    """Install the hooks with the mechanisms of ``mode`` and return
    :func:`status`.

    ``mode``: a :class:`HookMode`, its text (``"bistro,reloc"``) or 0-3; None
    reads ``MEMHOOK_CUDA_MODE``, then the default ``bistro,reloc``
    (:meth:`HookMode.parse`).  A bad mode raises ValueError and installs
    nothing.  Idempotent; a different mode replaces the installed one
    (``"none"`` removes the hooks).

    ``pointer_attributes`` (keyword only): True routes the driver's
    ``cuPointerGetAttribute(s)`` and ``cudaPointerGetAttributes`` through
    memhook, which answers from the cache the attributes it knows exactly
    and passes the rest to the driver, with the driver's answers and return
    codes (docs/design/pointer-attributes.md); False leaves them to the
    driver; None (the default) reads ``MEMHOOK_POINTER_ATTRIBUTES`` (``1``;
    unset or ``0``: off).  A value that is not a bool raises TypeError, a
    bad environment value ValueError, and nothing is installed.

    A function a mechanism cannot hook is not an error (:func:`status` says
    why); a whole mechanism that fails raises OSError with the core's
    reason.  Ranges CUDA had reserved before (driver loaded and initialised)
    are marked UNKNOWN in the cache, so lookups there ask the driver.
    Thread-safe: calls are serialised, and other threads may call CUDA while
    the hooks go in (bistro's int3 protocol: no thread runs a torn
    instruction).  O(h + s) for h table functions and s GOT slots.

    >>> import ctypes, memhook, memhook.sim
    >>> cuda = memhook.sim.activate()           # the simulated driver: no GPU needed
    >>> memhook.install("bistro,reloc").hook("cuMemAlloc_v2").installed
    True
    >>> ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
    >>> cuda.cuInit(0), cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), cuda.cuCtxSetCurrent(ctx)
    (0, 0, 0)
    >>> cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
    0
    >>> memhook.memory_type(ptr.value)          # from the cache: no driver query
    <MemoryType.CUDA: 1>
    >>> memhook.uninstall()
    """
    parsed = HookMode.parse(mode)
    answers = _pointer_attributes(pointer_attributes)
    with _lock:
        lib.memhook_hooks_set_pointer_attributes(int(answers))
        # With the GIL held (memhook._binding.control says why): this call is long.
        rc, reason = _control.install(int(parsed))
        if rc != 0:
            raise OSError(rc, f"memhook: installing the hooks with mode {parsed} failed: "
                              f"{reason or os.strerror(rc)}")
        _log.info("memhook: hooks installed, mode %s", parsed)
        if parsed:
            _feeder.start()  # a backlog nobody queries is drained in the background
        if parsed and _preexisting.driver_initialised():
            # Not drained first (a drain may wait for another thread): marking
            # may then cover an allocation whose ALLOC is still pending, and
            # the ALLOC, applied later, replaces the UNKNOWN - which only ever
            # sends a query to the driver, which knows.
            _preexisting.mark_preexisting(process_cache())
    return status()


def uninstall() -> None:
    """Remove every hook: restore every byte and GOT slot they changed -
    except where that would break another library: an entry another patcher
    wrote over since (memhook's jump stays under its patch), and, beside
    UCX's libucm that memhook fed, the feed-only hooks that keep UCX's
    memory-type events coming when UCX cannot install its own CUDA hooks
    (they record nothing; :func:`install` takes them out).  :func:`status`
    names each such entry and why.  Pending events still reach the cache
    and the subscribers (the next query, flush() or the background feeder
    applies them); uninstall() itself never waits for another thread.
    Idempotent.

    Runtime complexity: O(h + s), as for :func:`install`.

    >>> import memhook
    >>> memhook.uninstall()
    >>> memhook.status().mode
    <HookMode.NONE: 0>
    >>> memhook.uninstall()                     # again: nothing to do
    """
    with _lock:
        rc = _control.uninstall()  # (the GIL held: memhook._binding.control)
        if rc != 0:
            raise OSError(rc, f"memhook: removing the hooks failed: {os.strerror(rc)}")
    _log.info("memhook: hooks removed")


def _queue_stats() -> QueueStats:
    raw = ffi.new("memhook_queue_stats *")
    _control.queue_stats(raw)
    return QueueStats(int(raw.produced), int(raw.consumed), int(raw.segments_live),
                      int(raw.segments_peak), int(raw.segment_bytes),
                      int(raw.free_size_from_driver), int(raw.free_size_unknown),
                      int(raw.lanes))


def _hook_info(row: _hook_table.Row) -> HookInfo:
    mechanism = HookMode(row.mechanisms & int(HookMode.BISTRO | HookMode.RELOC))
    return HookInfo(name=row.name, api=row.api, mechanism=mechanism, installed=bool(mechanism),
                    reason=row.reason, kind=EventKind(row.kind), present=row.present,
                    bistro_jump=row.bistro_jump, index=row.index,
                    bistro_overwritten=row.bistro_overwritten)


def status() -> HookReport:
    """The installed mode, and per table function its API, the mechanism
    covering it (or none) and why not; whether the hooks cover every
    allocation entry point of the loaded driver; the event queue's counters.
    A snapshot: later installs do not change a report already returned.

    Runtime complexity: O(h) for h table functions.

    >>> import memhook
    >>> report = memhook.status()
    >>> report.hook("cuMemFree_v2").kind
    <EventKind.FREE: 2>
    >>> sorted({h.api for h in report.hooks})
    ['driver', 'runtime']
    >>> report.queue.pending >= 0
    True
    """
    hooks = [_hook_info(row) for row in _hook_table.rows()]
    return HookReport(mode=HookMode(int(lib.memhook_hooks_mode())), hooks=hooks,
                      coverage_complete=_control.coverage_complete(), queue=_queue_stats(),
                      pointer_attributes=bool(lib.memhook_hooks_pointer_attributes()))


def hook_index(name: str) -> int | None:
    """The table index of function ``name``, or None.

    Runtime complexity: O(h) for h table functions.

    >>> import memhook
    >>> from memhook.hooks import hook_index
    >>> hook_index("cuMemAlloc_v2") == memhook.status().hook("cuMemAlloc_v2").index
    True
    >>> hook_index("malloc") is None
    True
    """
    index = int(lib.memhook_hook_index(name.encode()))
    return None if index < 0 else index

