"""The cffi declarations (memhook/_ffi_build.py) list every function the core
declares - its C API (memhook.h) and what it exports for memhook's own use
(memhook_internal/api.h) - and the extension exposes them."""

from __future__ import annotations

import re
import runpy

from memhook_testing import ROOT

HEADER = ROOT / "csrc" / "include" / "memhook" / "memhook.h"
INTERNAL = ROOT / "csrc" / "include" / "memhook_internal" / "api.h"
FFI_BUILD = ROOT / "memhook" / "_ffi_build.py"


def _header_functions() -> set[str]:
    text = re.sub(r"/\*.*?\*/", " ", HEADER.read_text() + INTERNAL.read_text(), flags=re.DOTALL)
    return set(re.findall(r"MEMHOOK_API\b[^;(]*?\b(memhook_\w+)\s*\(", text))


def _cdef() -> str:
    return runpy.run_path(str(FFI_BUILD), run_name="memhook_cdef_check")["CDEF"]


def test_cdef_declares_every_c_api_function() -> None:
    declared = _header_functions()
    assert len(declared) >= 30 and "memhook_events_drain" in declared
    cdef_functions = set(re.findall(r"\b(memhook_\w+)\s*\(", _cdef()))
    assert sorted(declared - cdef_functions) == []
    assert sorted(cdef_functions - declared) == []


def test_cdef_has_the_hook_layer_constants() -> None:
    text = HEADER.read_text()
    wanted = set(re.findall(r"#define (MEMHOOK_(?:MODE|EVENT|MEM|API)_\w+)", text))
    wanted.discard("MEMHOOK_API")
    got = set(re.findall(r"#define (MEMHOOK_\w+) \.\.\.", _cdef()))
    assert sorted(wanted - got) == []


def test_the_extension_exposes_them() -> None:
    from memhook._binding.core import lib

    missing = [name for name in sorted(_header_functions()) if not hasattr(lib, name)]
    assert missing == []
