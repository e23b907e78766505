"""memhook.sim's Python helpers: library_dir(), environ(), activate()."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import memhook.sim as sim


def test_library_dir_holds_every_simulator_file() -> None:
    folder = Path(sim.library_dir())
    assert folder.is_absolute()
    for name in ("libcuda.so.1", "libcudart.so.13", "libcudart.so", "libcudart_static.a",
                 "cudart_sim.h"):
        assert (folder / name).is_file(), name


def test_environ_prepends_library_dir_once() -> None:
    folder = sim.library_dir()
    env = sim.environ({"LD_LIBRARY_PATH": f"/opt/a:{folder}:/opt/b", "KEEP": "1"})
    assert env["LD_LIBRARY_PATH"] == f"{folder}:/opt/a:/opt/b"
    assert env["KEEP"] == "1"
    assert sim.environ({})["LD_LIBRARY_PATH"] == folder
    # default base is os.environ, and the caller's mapping is not modified
    base = {"LD_LIBRARY_PATH": "/x"}
    sim.environ(base)
    assert base == {"LD_LIBRARY_PATH": "/x"}
    assert sim.environ()["PATH"] == os.environ["PATH"]


ACTIVATE = """
import ctypes, memhook.sim as sim
handle = sim.activate()
assert sim.activate() is handle            # idempotent
assert sim.is_active()
again = ctypes.CDLL("libcuda.so.1")        # any later dlopen finds the simulator
name = ctypes.create_string_buffer(64)
assert again.cuInit(0) == 0
assert again.cuDeviceGetName(name, 64, 0) == 0
print(name.value.decode())
"""


def test_activate_loads_simulator_into_this_process(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    proc = subprocess.run([sys.executable, "-c", ACTIVATE], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "memhook simulator" in proc.stdout


def test_activate_refuses_when_another_driver_is_loaded(tmp_path: Path) -> None:
    fake = tmp_path / "libcuda.so.1"
    src = tmp_path / "fake.c"
    src.write_text("int cuInit(unsigned f) { return (int)f; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(fake)], check=True)
    code = (f"import ctypes, memhook.sim as sim; ctypes.CDLL({str(fake)!r});\n"
            "try:\n    sim.activate()\nexcept sim.SimulatorError as e:\n    print('refused:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused:") and str(fake) in proc.stdout


def test_cli_sim_run_uses_simulator_and_keeps_exit_status() -> None:
    code = ("import ctypes, sys; l = ctypes.CDLL('libcuda.so.1'); "
            "n = ctypes.create_string_buffer(64); l.cuInit(0); l.cuDeviceGetName(n, 64, 0); "
            "print(n.value.decode()); sys.exit(7)")
    proc = subprocess.run([sys.executable, "-m", "memhook", "sim", "run", "--", sys.executable,
                           "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert "memhook simulator" in proc.stdout


def test_cli_sim_run_errors() -> None:
    proc = subprocess.run([sys.executable, "-m", "memhook", "sim", "run"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "missing command" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "memhook", "sim", "run", "--",
                           "/nonexistent/program"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 127 and "cannot run" in proc.stderr


def test_cli_sim_env_and_version() -> None:
    env = subprocess.run([sys.executable, "-m", "memhook", "sim", "env"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert env.startswith("export LD_LIBRARY_PATH=") and sim.library_dir() in env
    version = subprocess.run([sys.executable, "-m", "memhook", "version"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    assert "memhook 0.1.0" in version and "libmemhook.so" in version


@pytest.mark.parametrize("missing", ["libcuda.so.1"])
def test_library_dir_reports_a_broken_install(monkeypatch, tmp_path: Path, missing: str) -> None:
    fake_pkg = tmp_path / "sim"
    (fake_pkg / "lib").mkdir(parents=True)
    monkeypatch.setattr(sim, "__file__", str(fake_pkg / "__init__.py"))
    with pytest.raises(sim.SimulatorError, match=missing):
        sim.library_dir()
