"""On a real GPU: the pointer-attribute differential against NVIDIA's
driver and runtime (the simulator's twin is tests/hooks/
test_pointer_attributes.py).  tests/fixtures/pointer_attributes_diff.c
asks every CUpointer_attribute of CUDA 13 about host (malloc, stack, mmap,
NULL), device (base, interior, one past the end), freed, managed, pinned,
pool, VMM, IPC-imported memory and module globals (PTX, JIT-loaded), with
a current context and with none - each query with memhook's answers off,
then on, in the same process - and fails on any difference in return code
or output bytes.  Its stdout says, per query, who answered."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import memhook

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "pointer_attributes_diff.c"


@pytest.fixture(scope="module")
def differential(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pointer_attributes") / "pointer_attributes_diff"
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-Wall", "-Wextra", "-Werror",
                    str(FIXTURE), "-o", str(out), "-ldl"], check=True, capture_output=True)
    return out


def _mismatches(stderr: str) -> str:
    """Every mismatch's heading, then the start of stderr with the bytes:
    a failure shows all of them, not the tail of a long stderr."""
    lines = stderr.splitlines()
    heads = [line for line in lines if line.startswith("MISMATCH")]
    return (f"{len(heads)} mismatches:\n" + "\n".join(heads) + "\n--- in full, the first ---\n"
            + "\n".join(lines[:60]))


@pytest.mark.parametrize("mode", ["bistro,reloc", "bistro", "reloc"])
def test_answers_equal_the_real_drivers(differential: Path, mode: str) -> None:
    env = dict(os.environ, LD_PRELOAD=memhook.library_path(), MEMHOOK_INSTALL_AT_LOAD="1",
               MEMHOOK_CUDA_MODE=mode, MEMHOOK_POINTER_ATTRIBUTES="1")
    proc = subprocess.run([str(differential)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0 and "MISMATCH" not in proc.stderr, _mismatches(proc.stderr)
    assert "answers toggled" in proc.stdout
    lines = proc.stdout.splitlines()
    # memhook must answer the calls the goals are about, not pass them on.
    for key in ("host_malloc ctx get:MEMORY_TYPE", "host_malloc ctx gets:four",
                "host_malloc noctx gets:four",
                "device_base ctx get:MEMORY_TYPE", "device_base ctx gets:four"):
        assert any(line.startswith(f"memhook {key} ") for line in lines), key


def test_the_fixture_alone_on_the_real_driver(differential: Path) -> None:
    proc = subprocess.run([str(differential)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, _mismatches(proc.stderr)
    assert "answers absent" in proc.stdout
