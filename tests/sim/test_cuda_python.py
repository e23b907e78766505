"""cuda-python's cuda.bindings.driver runs on the simulator (issue 2, item 3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")

SCRIPT = Path(__file__).parent / "scripts" / "cuda_python_session.py"


def test_cuda_bindings_driver_session_on_simulator(native) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT)], env=native.env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ALL OK"), (
        f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")


def test_memhook_sim_environ_is_what_users_call(tmp_path) -> None:
    """The public helper (not the test fixture) gives a working environment."""
    import memhook.sim

    proc = subprocess.run(
        [sys.executable, "-c",
         "from cuda.bindings import driver as cu; e, = cu.cuInit(0); "
         "print(int(e), cu.cuDeviceGetName(64, 0)[1].split(b'\\0')[0].decode())"],
        env=memhook.sim.environ(), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    code, name = proc.stdout.split(maxsplit=1)
    assert code == "0" and "memhook simulator" in name
