"""Fixtures for the bistro patch-engine tests.

The session builds tests/bistro/fixtures/{prologues.S,hooks.c} into
libbistro_fixtures.so, and the C drivers (stress, W^X) against it and the
core library.  `bistro` gives a ctypes view of both libraries in this
process: patch a fixture, call it, read its bytes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bistro_testing import FIXTURES, Bistro


def _cc(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"compile failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


@pytest.fixture(scope="session")
def fixture_lib(native, c_test_dir: Path) -> Path:
    out = c_test_dir / "libbistro_fixtures.so"
    _cc(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror",
         str(FIXTURES / "prologues.S"), str(FIXTURES / "hooks.c"), "-o", str(out),
         "-Wl,-z,now", "-Wl,-z,noexecstack"])
    return out


@pytest.fixture(scope="session")
def build_driver(native, fixture_lib: Path, c_test_dir: Path):
    """Compile tests/bistro/fixtures/<name>.c against libmemhook + fixtures
    (once per session: several tests run the same driver)."""
    built: dict[str, Path] = {}

    def build(name: str) -> Path:
        if name not in built:
            out = c_test_dir / name
            core_dir = native.core.parent
            built[name] = native.compile(FIXTURES / f"{name}.c", out, extra=[
                f"-L{core_dir}", "-lmemhook", str(fixture_lib),
                f"-Wl,-rpath,{core_dir}", f"-Wl,-rpath,{fixture_lib.parent}", "-lpthread"])
        return built[name]
    return build


@pytest.fixture(scope="session")
def _bistro_session(native, fixture_lib: Path) -> Bistro:
    return Bistro(native.core, fixture_lib)


@pytest.fixture
def bistro(_bistro_session: Bistro):
    yield _bistro_session
    _bistro_session.remove_all()


