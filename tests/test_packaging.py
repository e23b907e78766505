"""A non-editable install carries the core, the extension and the simulator.

Builds a wheel the way `pip install .` does (isolated build), installs it into
a scratch folder, and imports it from there, far from the source tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                           str(ROOT)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = list(out.glob("memhook-*.whl"))
    assert len(wheels) == 1
    return wheels[0]


def test_wheel_contains_native_parts(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("memhook/libmemhook.so", "memhook/sim/lib/libcuda.so.1",
                     "memhook/sim/lib/libcudart.so.13", "memhook/sim/lib/libcudart.so",
                     "memhook/sim/lib/libcudart_static.a", "memhook/sim/lib/cudart_sim.h",
                     "memhook/__init__.py", "memhook/sim/__init__.py",
                     "memhook/cli/__init__.py", "memhook/cli/demo_workload.py"):
        assert required in names, f"{required} missing from {wheel.name}"
    assert any(n.startswith("memhook/_native.") and n.endswith(".so") for n in names)


def test_installed_package_imports_from_its_own_folder(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True, timeout=300)
    code = (
        "import memhook, memhook.sim, ctypes, os\n"
        "print(memhook.library_path()); print(memhook.sim.library_dir())\n"
        "lib = ctypes.CDLL(os.path.join(memhook.sim.library_dir(), 'libcuda.so.1'))\n"
        "print(lib.cuInit(0))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    core, sim_dir, init = proc.stdout.split()
    assert core == str(site / "memhook" / "libmemhook.so")
    assert sim_dir == str(site / "memhook" / "sim" / "lib")
    assert init == "0"
    ext = next((site / "memhook").glob("_native.*.so"))
    dynamic = subprocess.run(["readelf", "-d", str(ext)], capture_output=True, text=True).stdout
    assert "$ORIGIN" in dynamic and "[libmemhook.so]" in dynamic
