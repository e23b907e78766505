"""The control half of the simulated driver (libcuda.so.1): state, devices,
contexts, streams, errors, cuGetProcAddress, modules and libraries.

Compiles tests/sim/fixtures/test_sim_control.c against the session's simulated
driver (the installed one, or conftest's sanitizer build) and runs it under a
few environment configurations.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from memhook_testing import CSRC, HAVE_CC, NativeBuild

C_TEST = Path(__file__).resolve().parent / "fixtures" / "test_sim_control.c"


@pytest.fixture(scope="module")
def test_binary(native: NativeBuild, c_test_dir: Path) -> Path:
    if not HAVE_CC:
        pytest.skip("no C compiler")
    return native.compile(C_TEST, c_test_dir / "test_sim_control", extra=[
        f"-I{CSRC / 'sim' / 'driver'}", f"-L{native.sim_dir}", "-l:libcuda.so.1",
        f"-Wl,-rpath,{native.sim_dir}", "-ldl", "-lpthread"])


def _run(native: NativeBuild, exe: Path, tmp_path: Path, devices: int, memory: int,
         env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in native.env().items() if not k.startswith("MEMHOOK_SIM_")}
    env.update(env_extra)
    proc = subprocess.run([str(exe), str(devices), str(memory), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, (
        f"test_sim_control failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    assert "0 failures" in proc.stdout
    return proc


def test_two_devices(native, test_binary, tmp_path):
    _run(native, test_binary, tmp_path, 2, 1 << 30,
         {"MEMHOOK_SIM_DEVICES": "2", "MEMHOOK_SIM_DEVICE_MEMORY": "1G"})


def test_defaults(native, test_binary, tmp_path):
    proc = _run(native, test_binary, tmp_path, 1, 16 << 30, {})
    assert "MEMHOOK_SIM" not in proc.stderr


def test_suffixes(native, test_binary, tmp_path):
    _run(native, test_binary, tmp_path, 8, 512 << 20,
         {"MEMHOOK_SIM_DEVICES": "8", "MEMHOOK_SIM_DEVICE_MEMORY": "512m"})


@pytest.mark.parametrize("devices, memory", [("0", "1X"), ("9", "-5"), ("two", "0"), ("1.5", "2T")])
def test_invalid_config_warns_and_uses_defaults(native, test_binary, tmp_path, devices, memory):
    proc = _run(native, test_binary, tmp_path, 1, 16 << 30,
                {"MEMHOOK_SIM_DEVICES": devices, "MEMHOOK_SIM_DEVICE_MEMORY": memory})
    lines = [line for line in proc.stderr.splitlines() if line.startswith("memhook sim:")]
    dev_lines = [line for line in lines if "MEMHOOK_SIM_DEVICES=" in line]
    mem_lines = [line for line in lines if "MEMHOOK_SIM_DEVICE_MEMORY=" in line]
    # one line per process (the C test forks a child that initialises too)
    assert len(set(dev_lines)) == 1 and f'"{devices}"' in dev_lines[0]
    assert "1 to 8" in dev_lines[0]
    assert len(set(mem_lines)) == 1 and f'"{memory}"' in mem_lines[0]
    assert "K, M or G" in mem_lines[0]


def test_empty_config_means_default(native, test_binary, tmp_path):
    proc = _run(native, test_binary, tmp_path, 1, 16 << 30,
                {"MEMHOOK_SIM_DEVICES": "", "MEMHOOK_SIM_DEVICE_MEMORY": ""})
    assert "memhook sim:" not in proc.stderr
