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


# A test folder's C programs and libraries sit in its fixtures/ folder
# (tests/fixtures/ holds those several folders share).
FIXTURE_SUFFIXES = (".c", ".S", ".h")


def misplaced_fixtures(tests: Path) -> list[str]:
    return sorted(str(p.relative_to(tests)) for p in tests.rglob("*")
                  if p.suffix in FIXTURE_SUFFIXES and p.parent.name != "fixtures")


def test_c_fixtures_are_in_fixtures_folders() -> None:
    misplaced = misplaced_fixtures(TESTS)
    assert not misplaced, f"move these into their folder's fixtures/: {misplaced}"


def test_catches_a_c_fixture_outside_fixtures(tmp_path: Path) -> None:
    for rel in ("hooks/fixtures/churn.c", "fixtures/wx_seccomp.h", "sim/c/test_cudart.c",
                "core/maps_walk.c"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert misplaced_fixtures(tmp_path) == ["core/maps_walk.c", "sim/c/test_cudart.c"]
