"""The control half of the simulated driver (libcuda.so.1): state, devices,
contexts, streams, errors, cuGetProcAddress, modules and libraries.

Builds the native tree into a scratch folder with csrc/build_native.py, then
compiles tests/sim/fixtures/test_sim_control.c against the simulated driver and runs
it under a few environment configurations.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
C_TEST = Path(__file__).resolve().parent / "fixtures" / "test_sim_control.c"


def _build_native():
    spec = importlib.util.spec_from_file_location("memhook_build_native", CSRC / "build_native.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)   # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _cc() -> str:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc.split()[0]) is None:
        pytest.skip(f"no C compiler ({cc})")
    return cc


@pytest.fixture(scope="module")
def sim_lib_dir(tmp_path_factory) -> Path:
    _cc()
    out = tmp_path_factory.mktemp("native")
    _build_native().build_all(out)
    lib_dir = out / "memhook" / "sim" / "lib"
    assert (lib_dir / "libcuda.so.1").is_file()
    return lib_dir


@pytest.fixture(scope="module")
def test_binary(sim_lib_dir, tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("ctest") / "test_sim_control"
    cmd = [
        *_cc().split(), "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-g",
        f"-I{CSRC / 'include'}", f"-I{CSRC / 'sim' / 'driver'}",
        str(C_TEST), "-o", str(exe),
        f"-L{sim_lib_dir}", "-l:libcuda.so.1", f"-Wl,-rpath,{sim_lib_dir}",
        "-ldl", "-lpthread",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"compile failed:\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    return exe


def _run(exe: Path, tmp_path: Path, devices: int, memory: int, env_extra: dict[str, str]):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMHOOK_SIM_")}
    env.update(env_extra)
    proc = subprocess.run([str(exe), str(devices), str(memory), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, (
        f"test_sim_control failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    assert "0 failures" in proc.stdout
    return proc


def test_two_devices(test_binary, tmp_path):
    _run(test_binary, tmp_path, 2, 1 << 30,
         {"MEMHOOK_SIM_DEVICES": "2", "MEMHOOK_SIM_DEVICE_MEMORY": "1G"})


def test_defaults(test_binary, tmp_path):
    proc = _run(test_binary, tmp_path, 1, 16 << 30, {})
    assert "MEMHOOK_SIM" not in proc.stderr


def test_suffixes(test_binary, tmp_path):
    _run(test_binary, tmp_path, 8, 512 << 20,
         {"MEMHOOK_SIM_DEVICES": "8", "MEMHOOK_SIM_DEVICE_MEMORY": "512m"})


@pytest.mark.parametrize("devices, memory", [("0", "1X"), ("9", "-5"), ("two", "0"), ("1.5", "2T")])
def test_invalid_config_warns_and_uses_defaults(test_binary, tmp_path, devices, memory):
    proc = _run(test_binary, tmp_path, 1, 16 << 30,
                {"MEMHOOK_SIM_DEVICES": devices, "MEMHOOK_SIM_DEVICE_MEMORY": memory})
    lines = [line for line in proc.stderr.splitlines() if line.startswith("memhook sim:")]
    dev_lines = [line for line in lines if "MEMHOOK_SIM_DEVICES=" in line]
    mem_lines = [line for line in lines if "MEMHOOK_SIM_DEVICE_MEMORY=" in line]
    # one line per process (the C test forks a child that initialises too)
    assert len(set(dev_lines)) == 1 and f'"{devices}"' in dev_lines[0]
    assert "1 to 8" in dev_lines[0]
    assert len(set(mem_lines)) == 1 and f'"{memory}"' in mem_lines[0]
    assert "K, M or G" in mem_lines[0]


def test_empty_config_means_default(test_binary, tmp_path):
    proc = _run(test_binary, tmp_path, 1, 16 << 30,
                {"MEMHOOK_SIM_DEVICES": "", "MEMHOOK_SIM_DEVICE_MEMORY": ""})
    assert "memhook sim:" not in proc.stderr
