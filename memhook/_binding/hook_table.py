"""The one reader of the core's hook table (``memhook_hook_get``).

The table lists the hooked functions in a fixed order - an event's
``function`` is an index into it - with, for each, its API and event kind
(fixed) and its present/installed state (changes with each install).
:func:`rows` reads the whole table now; :func:`names` and
:func:`runtime_flags` are the fixed columns, read once.  hooks.py
(``status()``), the drain (event function names) and the trace CLI (its
ledger) all read the table here, so none of them reaches into the
extension's ``memhook_hook_info`` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import control as _control
from .core import ffi, lib

__all__ = ["Row", "function_name", "names", "rows", "runtime_flags"]

_API_NAMES = {int(lib.MEMHOOK_API_DRIVER): "driver", int(lib.MEMHOOK_API_RUNTIME): "runtime"}


@dataclass(frozen=True)
class Row:
    """One function of the table, as the core reports it now.

    ``api`` is ``"driver"`` or ``"runtime"``; ``kind`` the core's event kind
    (MEMHOOK_EVENT_ALLOC or _FREE); ``mechanisms`` the MEMHOOK_MODE_* bits
    covering it; ``bistro_jump`` 5 or 12 where bistro patched it, else 0;
    ``reason`` why it is not covered (or why bistro refused it), else "";
    ``bistro_overwritten`` True where another patcher wrote its jump over
    bistro's (which then stays under it)."""

    index: int
    name: str
    api: str
    kind: int
    present: bool
    mechanisms: int
    bistro_jump: int
    reason: str
    bistro_overwritten: bool = False


def rows() -> list[Row]:
    """Every function of the table, in table order, read now - in one call
    into the core (``memhook_hook_get_range``), made with the GIL held
    (memhook._binding.control says why)."""
    count = int(lib.memhook_hook_count())
    table = ffi.new("memhook_hook_info[]", count)
    filled = _control.hook_rows(table, count)  # (memhook_hook_get_range, the GIL held)
    out = []
    for i in range(filled):
        raw = table[i]
        out.append(Row(
            index=i,
            name=ffi.string(raw.name).decode(),
            api=_API_NAMES.get(int(raw.api), f"api#{int(raw.api)}"),
            kind=int(raw.kind),
            present=bool(raw.present),
            mechanisms=int(raw.mechanisms),
            bistro_jump=int(raw.bistro_jump),
            reason=ffi.string(raw.reason).decode(errors="replace"),
            bistro_overwritten=bool(raw.bistro_overwritten),
        ))
    return out


# The fixed columns, read at first use.  Benign race: two threads may both
# read them, and store equal tuples.
_names: tuple[str, ...] | None = None
_runtime: tuple[bool, ...] | None = None


def _fixed() -> tuple[tuple[str, ...], tuple[bool, ...]]:
    global _names, _runtime
    names, runtime = _names, _runtime
    if names is None or runtime is None:
        table = rows()
        names = tuple(r.name for r in table)
        runtime = tuple(r.api == "runtime" for r in table)
        _names, _runtime = names, runtime
    return names, runtime


def names() -> tuple[str, ...]:
    """The functions' names, by table index."""
    return _fixed()[0]


def runtime_flags() -> tuple[bool, ...]:
    """Per table index: True for a runtime API function, False for the driver's."""
    return _fixed()[1]


def function_name(index: int) -> str:
    """The name of table function ``index``; ``"function#N"`` for an index
    outside the table (a native recorder's own events)."""
    table = names()
    return table[index] if 0 <= index < len(table) else f"function#{index}"
