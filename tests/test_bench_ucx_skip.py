"""bench/ucx/ucx_side_by_side.py without UCX: it must say why and exit 0, so
that a machine without the libucx-cu13 wheel runs the bench suite through.
(The comparison itself needs UCX and a GPU: tools/gpu/ucx_side_by_side.sh.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "ucx" / "ucx_side_by_side.py"


def _run(tmp_path: Path, ucx: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MEMHOOK_UCX=str(ucx))
    return subprocess.run([sys.executable, str(BENCH)], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)


def test_skips_when_no_ucx_is_there(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-ucx"
    got = _run(tmp_path, missing)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("skipped: no UCX found"), got.stdout
    assert str(missing) in lines[0] and "MEMHOOK_UCX" in lines[0]


def test_skips_a_ucx_without_its_cuda_module(tmp_path: Path) -> None:
    # A wheel's layout with libucs but no lib/ucx/libucm_cuda.so: a UCX built
    # without CUDA has no CUDA hooks to compare against.
    lib = tmp_path / "ucx" / "libucx" / "lib"
    lib.mkdir(parents=True)
    (lib / "libucs.so").write_bytes(b"")
    got = _run(tmp_path, tmp_path / "ucx")
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("skipped: "), got.stdout
    assert "libucm_cuda.so" in lines[0] and "not a CUDA build" in lines[0]
