"""memhook.uninstall() from Python beside UCX's libucm (the wheel's), on the
simulator: UCX keeps seeing every allocation and free, and status() says
which entry points stay patched for UCX and why
(docs/design/ucx-coexistence.md, "When UCX cannot take its hooks back")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ucx_testing import NO_UCX, find_ucx_lib

SCRIPT = Path(__file__).resolve().parent / "scripts" / "handback_python.py"
N = 20


@pytest.fixture(scope="module")
def ucx_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lib = find_ucx_lib(tmp_path_factory.mktemp("ucx"))
    if lib is None:
        pytest.skip(NO_UCX)
    return lib


def _run(native, lib: Path, mode: str, ucx_far: str) -> dict:
    env = native.env(UCX_MEM_CUDA_HOOK_MODE="bistro", UCX_MODULE_DIR=str(lib / "ucx"),
                     UCX_WARN_UNUSED_ENV_VARS="n", UCX_MEM_BISTRO_FORCE_FAR_JUMP=ucx_far)
    for key in ("MEMHOOK_CUDA_MODE", "MEMHOOK_BISTRO_FAR_JUMP", "LD_PRELOAD"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(lib), mode, str(N)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["bistro", "bistro,reloc"])
@pytest.mark.parametrize("ucx_far", ["y", "n"], ids=["ucx-refused", "ucx-hooks"])
def test_ucx_sees_every_call_after_python_uninstall(native, ucx_lib: Path, mode: str,
                                                    ucx_far: str) -> None:
    # ucx-refused: UCX's own bistro refuses the driver's entries at the
    # hand-back (its 12-byte jump forced, as when libucm_cuda.so lies past
    # a rel32 jump's reach): memhook's feed-only hooks keep UCX fed, and
    # status() names them.  ucx-hooks: UCX takes its own hooks back.
    got = _run(native, ucx_lib, mode, ucx_far)
    every = {"alloc": N, "free": N}
    assert got["status"] == 0, got
    for phase in ("installed", "uninstalled", "again", "reinstalled", "last"):
        assert got[phase] == every, (phase, got)
    if ucx_far == "y":
        assert "still patched for UCX" in got["reason"], got
        assert "UCX could not install its own CUDA hooks" in got["reason"], got
        assert "status -22" in got["reason"], got
    else:
        assert got["reason"] == "hooks are not installed (mode none)", got
