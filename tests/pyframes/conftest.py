"""Fixtures of the --python tests: the C library whose thread has no Python."""

from __future__ import annotations

from pathlib import Path

import pytest
from memhook_testing import NativeBuild, skip_unless_traced_programs_build
from pyframes_testing import HERE


@pytest.fixture(scope="session")
def c_thread_lib(native: NativeBuild, c_test_dir: Path) -> Path:
    skip_unless_traced_programs_build(native)
    sim = str(native.sim_dir)
    return native.compile(HERE / "fixtures" / "c_thread.c", c_test_dir / "libpyframes_c_thread.so",
                          extra=["-fPIC", "-shared", "-lpthread", f"-L{sim}", "-l:libcuda.so.1",
                                 f"-Wl,-rpath,{sim}"])
