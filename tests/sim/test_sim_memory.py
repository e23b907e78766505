"""The memory half of the simulated driver: allocations, VMM, pools, IPC,
pointer attributes and copies, exercised by tests/sim/fixtures/test_sim_memory.c.

The C program checks every memory entry point of libcuda.so.1 with its
errors, that freed memory really faults, IPC between two processes, and an
8-thread allocation stress; there, under a primary context, every 32-bit v1
entry point answers CUDA_ERROR_INVALID_CONTEXT as on the H200's driver.  A
second run (``legacy32``) creates a legacy context with the v1 cuCtxCreate,
where the v1 entry points work with device pointers from a window below
4 GiB.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from memhook_testing import CSRC, HAVE_CC

SRC = Path(__file__).resolve().parent / "fixtures" / "test_sim_memory.c"

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler")


@pytest.fixture(scope="module")
def program(native, c_test_dir) -> Path:
    out = c_test_dir / "test_sim_memory"
    return native.compile(SRC, out, extra=[
        f"-I{CSRC / 'sim' / 'driver'}", str(native.libcuda),
        f"-Wl,-rpath,{native.sim_dir}", "-lpthread"])


def _env(native, **extra: str) -> dict[str, str]:
    env = native.env(MEMHOOK_SIM_DEVICE_MEMORY="256M", MEMHOOK_SIM_DEVICES="1", **extra)
    if native.sanitize:
        # the test expects SIGSEGV from children touching freed memory
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "detect_leaks=0") + ":handle_segv=0"
    return env


def test_memory_entry_points(native, program) -> None:
    proc = native.run([str(program)], env=_env(native), timeout=300)
    assert "all passed" in proc.stdout


def test_memory_entry_points_legacy32(native, program) -> None:
    proc = native.run([str(program), "legacy32"], env=_env(native), timeout=300)
    assert "legacy32: all passed" in proc.stdout
