"""One reader of the core's hook table (memhook/_binding/hook_table.py) serves
status(), the drain's event names and (through the same module) the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import memhook
from memhook._events import drain as _drain
from memhook._binding import hook_table as _hook_table

PACKAGE = Path(memhook.__file__).resolve().parent


def test_fixed_columns_match_status() -> None:
    hooks = memhook.status().hooks
    assert len(hooks) >= 40
    assert _hook_table.names() == tuple(h.name for h in hooks)
    assert _hook_table.runtime_flags() == tuple(h.api == "runtime" for h in hooks)
    assert [h.index for h in hooks] == list(range(len(hooks)))
    assert _drain.function_names() == _hook_table.names()


def test_rows_carry_the_live_state() -> None:
    rows = _hook_table.rows()
    by_name = {r.name: r for r in rows}
    alloc = by_name["cuMemAlloc_v2"]
    assert (alloc.api, alloc.kind) == ("driver", memhook.EventKind.ALLOC)
    assert by_name["cudaFree"].api == "runtime"
    assert by_name["cudaFree"].kind == memhook.EventKind.FREE
    status = memhook.status().hook("cuMemAlloc_v2")
    assert (alloc.present, alloc.bistro_jump, alloc.reason) == (
        status.present, status.bistro_jump, status.reason)


def test_function_name_outside_the_table() -> None:
    n = len(_hook_table.names())
    assert _hook_table.function_name(0) == _hook_table.names()[0]
    assert _hook_table.function_name(n) == f"function#{n}"
    assert _hook_table.function_name(-1) == "function#-1"
    assert _drain.function_name(n + 7) == f"function#{n + 7}"


def test_only_the_reader_walks_the_table() -> None:
    """memhook_hook_get(_range) is called in one place: _binding/hook_table.py (the
    range reader through memhook._binding.control, which binds it with the GIL
    held; _ffi_build.py declares them)."""
    readers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if (re.search(r"\bmemhook_hook_get(_range)?\s*\(", p.read_text())
                         or re.search(r"\b_control\.hook_rows\s*\(", p.read_text()))
                     and str(p.relative_to(PACKAGE)) not in ("_ffi_build.py",
                                                             "_binding/control.py"))
    assert readers == ["_binding/hook_table.py"], readers


def test_the_range_reader_answers_as_the_row_reader() -> None:
    """memhook_hook_get_range (one call: what status() uses) gives each row
    as memhook_hook_get does, and cuts a range at the end of the table."""
    from memhook._binding.core import ffi, lib

    n = int(lib.memhook_hook_count())
    table = ffi.new("memhook_hook_info[]", n + 3)
    assert lib.memhook_hook_get_range(0, n + 3, table) == n
    one = ffi.new("memhook_hook_info *")
    for i in range(n):
        assert lib.memhook_hook_get(i, one) == 0
        a, b = table[i], one[0]
        assert (ffi.string(a.name), a.api, a.kind, a.present, a.mechanisms, a.bistro_jump,
                ffi.string(a.reason)) == (ffi.string(b.name), b.api, b.kind, b.present,
                                          b.mechanisms, b.bistro_jump, ffi.string(b.reason))
    assert lib.memhook_hook_get_range(n - 2, 10, table) == 2
    assert ffi.string(table[1].name) == ffi.string(one.name)  # the last row
    assert lib.memhook_hook_get_range(n, 1, table) == 0
    assert lib.memhook_hook_get(n, one) != 0
