"""On a real GPU: the simulator's references still describe the driver.

* the cuda-python session the simulator must pass (tests/sim/scripts) passes
  on the real driver too, so its expectations are the driver's, not ours;
* the driver and runtime probes give the facts recorded in tests/data (a
  different answer means the recording is stale for this driver: re-record
  with tools/gpu/run_on_gpu.sh and let the simulator follow).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
from test_sim_fidelity import _diff  # noqa: E402  (the same comparison rules)

pytestmark = pytest.mark.gpu


def test_cuda_python_session_passes_on_the_real_driver() -> None:
    script = ROOT / "tests" / "sim" / "scripts" / "cuda_python_session.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ALL OK"), proc.stdout + proc.stderr


def _probe(tool: str, out: Path) -> dict:
    subprocess.run([sys.executable, str(ROOT / "tools" / "gpu" / tool), str(out)], check=True,
                   capture_output=True, timeout=300)
    return json.loads(out.read_text())


def test_driver_still_matches_the_recording(tmp_path: Path) -> None:
    recorded = json.loads((ROOT / "tests" / "data" / "h200-driver-facts.json").read_text())
    now = _probe("probe_driver.py", tmp_path / "driver.json")
    if now.get("driver_version") != recorded.get("driver_version"):
        recorded = {k: v for k, v in recorded.items() if k != "driver_version"}
    # facts about placement that vary from run to run on real hardware
    for facts in (recorded, now):
        facts.get("kinds", {}).get("host_pool_5000", {}).pop("range_start_offset", None)
        facts.pop("device_total_mem", None)
    differences = _diff(recorded, now)
    assert not differences, "the driver no longer matches tests/data:\n" + "\n".join(differences)


def test_runtime_still_matches_the_recording(tmp_path: Path) -> None:
    recorded = json.loads((ROOT / "tests" / "data" / "h200-runtime-facts.json").read_text())
    now = _probe("probe_runtime.py", tmp_path / "runtime.json")
    differences = _diff(recorded, now)
    assert not differences, "libcudart no longer matches tests/data:\n" + "\n".join(differences)
