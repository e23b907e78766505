"""The test tree itself: every folder may have its own conftest.py, so no
test module may import from "conftest" (which one it gets depends on which
folders pytest collected first).  Shared helpers live in uniquely named
modules (tests/memhook_testing.py, tests/<folder>/<folder>_testing.py)."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_module_imports_from_conftest() -> None:
    offenders = [str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py")
                 if re.search(r"^\s*(from conftest import|import conftest)", p.read_text(), re.M)]
    assert not offenders, f"import shared helpers from a *_testing module instead: {offenders}"
