"""The module-level queries resolve through the CUDA driver: for real, on
memhook's simulator, in a child process (so this process never loads a
driver)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver")

SCRIPT = Path(__file__).parent / "scripts" / "driver_resolution.py"


def test_driver_resolution_on_the_simulator(tmp_path: Path) -> None:
    import memhook.sim

    proc = subprocess.run([sys.executable, str(SCRIPT)], env=memhook.sim.environ(), check=False,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ALL OK"), (
        f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")


def test_this_process_has_no_driver_and_answers_host() -> None:
    """(The test process itself never loads libcuda: nothing here may.)"""
    import numpy as np

    import memhook
    from memhook._binding import driver as _driver

    def drivers() -> list[str]:
        with open("/proc/self/maps") as maps:
            return [line for line in maps if "libcuda.so" in line]

    if drivers():
        pytest.skip("some other test loaded a driver into this process")
    assert memhook.memory_type(np.zeros(4)) is memhook.MemoryType.HOST
    assert not _driver.driver_loaded()
    assert not drivers()
