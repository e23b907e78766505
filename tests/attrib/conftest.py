"""Fixtures of the caller-attribution tests: a program, two shared
libraries that allocate through the simulated driver and runtime, and a
frame without a frame chain (tests/attrib/c)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from memhook_testing import NativeBuild, skip_unless_traced_programs_build

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class AttribPrograms:
    app: Path     # links libattrib_a.so; argv[1]: libattrib_b.so to dlopen, argv[2]: ms to wait
    lib_a: Path
    lib_b: Path


@pytest.fixture(scope="session")
def attrib_programs(native: NativeBuild, c_test_dir: Path) -> AttribPrograms:
    skip_unless_traced_programs_build(native)
    src = HERE / "fixtures"
    out = c_test_dir / "attrib"
    out.mkdir(exist_ok=True)
    sim = str(native.sim_dir)
    cuda = [f"-L{sim}", "-l:libcudart.so.13", "-l:libcuda.so.1", f"-Wl,-rpath,{sim}"]
    libs = {}
    for name in ("a", "b"):
        libs[name] = native.compile(src / "attrib_lib.c", out / f"libattrib_{name}.so",
                                    extra=["-fPIC", "-shared", f"-DLIB={name}",
                                           "-fno-omit-frame-pointer", *cuda])
    app = native.compile([src / "attrib_app.c", src / "nofp.S"], out / "attrib_app",
                         extra=["-fno-omit-frame-pointer", f"-L{out}", "-lattrib_a",
                                f"-Wl,-rpath,{out}", "-ldl", *cuda])
    return AttribPrograms(app, libs["a"], libs["b"])
