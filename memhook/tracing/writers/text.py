# %-formatting builds the per-event lines: cheaper than f-strings here (docs/performance.md).
# ruff: noqa: UP031
"""``memhook trace -f text``: one line per event, written as it arrives,
then the summary."""

from __future__ import annotations

import time
from typing import IO, Any

from ..._values.printable import printable
from ..ledger import ALLOC, Ledger, Process, human_size, mem_type_name
from ..._objects.symbolize import Caller
from ..pyframes import PyStack
from ..sites import binding_name, python_caller
from .base import Writer, Padded

__all__ = ["TextWriter"]

SIZE_UNKNOWN = 0x1


class TextWriter(Writer):
    """``  0.012345 [pid/tid] alloc cuMemAlloc_v2  0x... 1 MiB  CUDA  dev 0  ok``

    Behind a :class:`~memhook.tracing.reorder.Reorder` in ``memhook trace``, so
    the lines of all processes come in timestamp order."""

    def _rel(self, ns: int) -> str:
        d = max(ns - self.t0_ns, 0)
        return "%4d.%06d" % (d // 1000000000, d % 1000000000 // 1000)

    def process_started(self, proc: Process) -> None:
        h = proc.hello
        if h is None:
            return
        how = "forked" if h.forked else "started"
        hooks = ("hooks failed: " + (h.why or f"errno {h.install_rc}")) if h.install_rc \
            else f"hooks {_mode_name(h.mode)}"
        ns = f"pid {proc.own_pid} in its PID namespace; " if proc.own_pid is not None else ""
        self.out.write(f"{self._rel(h.start_ns)} [{proc.pid}] process {how} ({ns}ppid {h.ppid}; "
                       f"{printable(hooks)}): {printable(h.command)}\n")
        self.out.flush()

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int) -> None:
        super().__init__(out, ledger, t0_ns)
        self._names = Padded(ledger.function_name, 28)
        self._types = Padded(mem_type_name, 12)
        self._sizes = Padded(human_size, 10, right=True)
        # The program's names, escaped (see memhook._values.printable) once each.
        self._libraries = Padded(printable, 0)
        self._whos: dict = {}  # (id of a PyStack, caller) -> (that stack, the line's end)

    def _who(self, caller: Caller | None, python: PyStack) -> str:
        """The line's end with --python, cached by stack and caller."""
        key = (id(python), caller)
        held = self._whos.get(key)
        if held is None or held[0] is not python:
            held = (python, _python_text(caller, python))
            if len(self._whos) > 10_000:
                self._whos.clear()
            self._whos[key] = held
        return held[1]

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        ledger = self.ledger
        t0 = self.t0_ns
        names, types, sizes, libraries = self._names, self._types, self._sizes, self._libraries
        whos = self._who
        lines: list[str] = []
        append = lines.append
        for _, address, size, ts, kind, fn, mem_type, device, pid, tid, result, flags, caller, \
                _, python in rows:
            # %-formatting: the cheapest way CPython has to build these lines.
            d = ts - t0 if ts > t0 else 0
            append("%4d.%06d [%d/%d] %s %s %#014x %s  %s dev %2d  %s  from %s%s\n" % (
                d // 1000000000, d % 1000000000 // 1000, pid, tid, _KIND_TEXT.get(kind, "?    "),
                names[fn], address,
                "         ?" if (flags & SIZE_UNKNOWN and not size) else sizes[size],
                types[mem_type], device,
                "%s (%d)" % (ledger.error_name(fn, result), result) if result else "ok",
                (libraries[caller.library] if caller is not None else "?") if python is None
                else whos(caller, python), ""))
        self.out.write("".join(lines))
        self.out.flush()

    def process_ended(self, proc: Process, changes: list[tuple],
                      ts_ns: int | None = None) -> None:
        if proc.hello is None:
            return
        when = time.monotonic_ns() if ts_ns is None else ts_ns
        self.out.write(f"{self._rel(when)} [{proc.pid}] process "
                       f"{proc.how_ended} ({proc.events} events)\n")
        self.out.flush()

    @property
    def summary_inline(self) -> bool:
        return True

    def close(self, summary_text: str) -> None:
        self.out.write(summary_text)
        self.out.flush()


_KIND_TEXT = {ALLOC: "alloc", 2: "free "}


def _python_text(caller: Caller | None, python: PyStack) -> str:
    """What follows ``from`` with --python.  Where the caller is a binding
    layer, the Python frame that called through it, the binding beside it
    (then the program's own frame, where that is another); else the native
    library, then the innermost user frame."""
    f = python.user_frame
    library = caller.library if caller is not None else "?"
    if f is None:
        return printable("%s  (no Python: %s)" % (library, python.why))
    through = python_caller(caller, python)
    if through is None:
        return printable("%s  at %s in %s" % (library, f.location, f.function))
    text = "%s in %s  via %s (%s)" % (through.location, through.function,
                                      binding_name(caller), library)
    if through != f:
        text += "  at %s in %s" % (f.location, f.function)
    return printable(text)


def _mode_name(mode: int) -> str:
    names = [n for bit, n in ((1, "bistro"), (2, "reloc")) if mode & bit]
    return ",".join(names) if names else "none"
