"""The OOM report of ``memhook trace``: what was live on a device when an
allocation there failed for lack of memory.

The :class:`~memhook.tracing.ledger.Ledger` builds a report (:func:`report`)
the moment it accounts for the failed ALLOC, from its live sets as they
stand then - not at the end of the trace - so the report is the same
however the program ends right after (an uncaught exception, ``abort``,
SIGKILL: the failed event is in its trace area, which the collector reads
to its end).  The failing process's own allocations are exact at that
moment (its events are accounted in its own order); another process's on
the same device are those the collector had read by then, made no later
than the failure.

A failure for lack of memory is an ALLOC whose result is 2: the driver's
``CUDA_ERROR_OUT_OF_MEMORY`` and the runtime's ``cudaErrorMemoryAllocation``
(every allocation entry point, the async and pool forms included).  The
device's free and total memory at the failure are not recorded: the
collector cannot ask the traced process's driver, and the traced process
does not ask it at the failure.

Bounded: the first :data:`REPORTS_MAX` failures get a report (the jsonl
``oom`` record of each); later ones are counted.  Only the first report
keeps its whole live set, for ``--oom-snapshot``; the others keep their
aggregates and the :data:`TOP` largest allocations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from .._objects.symbolize import Caller
from .pyframes import PyStack

__all__ = ["OOM_RESULT", "REPORTS_MAX", "TOP", "LiveAlloc", "OomReport", "report"]

OOM_RESULT = 2
"""CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation."""
REPORTS_MAX = 16
TOP = 10


@dataclasses.dataclass(frozen=True)
class LiveAlloc:
    """One allocation live at the failure (or the failed request itself,
    with address 0)."""

    pid: int
    address: int
    size: int
    device: int          # the ledger's device key (HOST_KEY for pinned host memory)
    function: int
    library: str
    site: str | None     # the Python call site (--python), else None
    ts_ns: int
    tid: int
    caller: Caller | None
    stack: tuple | None  # --stacks frames (Callers), innermost first
    python: PyStack | None


@dataclasses.dataclass
class OomReport:
    """What :func:`report` found (the text and jsonl forms: the ledger's
    :meth:`~memhook.tracing.ledger.Ledger.summary` and :meth:`as_json`)."""

    request: LiveAlloc
    result: int
    live_bytes: int
    live_count: int
    processes: int                          # processes holding memory there
    by_library: list[tuple[str, int, int]]  # (library, count, bytes), largest first
    by_site: list[tuple[str, int, int]]     # (Python call site, count, bytes); [] without --python
    largest: list[LiveAlloc]
    allocations: list[LiveAlloc] | None     # the whole live set (the first report only)

    def as_json(self, function_name: Callable[[int], str], error: str,
                device_label: Callable[[int], str]) -> dict[str, Any]:
        """The jsonl ``oom`` record (``"kind": "oom"``)."""
        r = self.request
        return {
            "kind": "oom", "function": function_name(r.function), "size": r.size,
            "device": r.device if r.device >= 0 else -1, "device_name": device_label(r.device),
            "pid": r.pid, "tid": r.tid, "ts_ns": r.ts_ns, "result": self.result,
            "error": error, "caller": _frame_json(r.caller), **_python_json(r.python),
            "device_free": None, "device_total": None,
            "live_bytes": self.live_bytes, "live_count": self.live_count,
            "processes": self.processes,
            "by_library": [{"library": lib, "count": n, "bytes": b}
                           for lib, n, b in self.by_library],
            "by_python_site": [{"site": s, "count": n, "bytes": b} for s, n, b in self.by_site],
            "largest": [{"address": a.address, "size": a.size,
                         "function": function_name(a.function), "pid": a.pid, "tid": a.tid,
                         "ts_ns": a.ts_ns, "caller": _frame_json(a.caller),
                         **({"stack": [_frame_json(c) for c in a.stack]} if a.stack else {}),
                         **_python_json(a.python)}
                        for a in self.largest],
        }


def report(request: LiveAlloc, result: int, live: Iterable[LiveAlloc],
           keep_all: bool) -> OomReport:
    """The report of ``request``'s failure, given what was live on its device."""
    held = list(live)
    by_lib: dict[str, list[int]] = {}
    by_site: dict[str, list[int]] = {}
    total = 0
    for a in held:
        total += a.size
        entry = by_lib.setdefault(a.library, [0, 0])
        entry[0] += 1
        entry[1] += a.size
        if a.site is not None:
            entry = by_site.setdefault(a.site, [0, 0])
            entry[0] += 1
            entry[1] += a.size
    largest = sorted(held, key=lambda a: (-a.size, a.ts_ns))[:TOP]
    return OomReport(
        request=request, result=result, live_bytes=total, live_count=len(held),
        processes=len({a.pid for a in held}),
        by_library=_ranked(by_lib), by_site=_ranked(by_site), largest=largest,
        allocations=held if keep_all else None)


def _ranked(table: dict[str, list[int]]) -> list[tuple[str, int, int]]:
    return [(k, n, b) for k, (n, b) in sorted(table.items(), key=lambda kv: (-kv[1][1], kv[0]))]


def _frame_json(c: Caller | None) -> dict | None:
    if c is None:
        return None
    return {"object": c.object, "symbol": c.symbol, "offset": c.offset, "address": c.address}


def _python_json(python: PyStack | None) -> dict[str, Any]:
    if python is None:
        return {}
    return {"python": [{"file": f.file, "line": f.line, "function": f.function}
                       for f in python.frames]}
