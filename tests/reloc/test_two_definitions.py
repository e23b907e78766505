"""Two versions of one library in a process (libcudart.so.12 and .so.13 each
with its own users, loaded RTLD_LOCAL): reloc's replacement calls one
definition, so the other version's users must keep theirs - never be routed
to the wrong library - while the users of the definition memhook calls are
hooked.  Both with the users' slots already bound and with lazy slots."""

from __future__ import annotations

from pathlib import Path

import pytest
from memhook_testing import run_checked

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def twodefs(native, c_test_dir: Path) -> Path:
    out = c_test_dir / "twodefs"
    out.mkdir(exist_ok=True)
    for n in (1, 2):
        native.compile(FIXTURES / "twodefs.c", out / f"libmhdef{n}.so", extra=[
            "-shared", "-fPIC", f"-DDEF={n}", f"-Wl,-soname,libmhdef{n}.so"])
        native.compile(FIXTURES / "twodefs.c", out / f"libmhuser{n}.so", extra=[
            "-shared", "-fPIC", f"-DUSER=user{n}", f"-Wl,-soname,libmhuser{n}.so",
            f"-L{out}", f"-lmhdef{n}", "-Wl,-rpath,$ORIGIN", "-Wl,-z,lazy"])
    core = native.core.parent
    native.compile(FIXTURES / "twodefs_driver.c", out / "twodefs_driver", extra=[
        f"-L{core}", f"-Wl,-rpath,{core}", "-lmemhook", "-ldl"])
    return out


@pytest.mark.parametrize("binding", ["now", "lazy"])
def test_each_version_keeps_its_users(native, twodefs: Path, binding: str) -> None:
    proc = run_checked([str(twodefs / "twodefs_driver"), str(twodefs), binding],
                       env=native.env())
    assert "TWODEFS OK" in proc.stdout, proc.stdout + proc.stderr
