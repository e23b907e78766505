"""memhook.sim: a CPU-only CUDA driver and runtime, shipped with memhook.

The simulator is a product feature: it lets memhook's real hooks, its cache
and a transport's pointer-type logic run on machines without a GPU.  It is
made of native libraries built with the package:

* ``libcuda.so.1`` - the driver ABI (memory, VMM, pools, IPC, contexts,
  streams, modules/libraries, ``cuGetProcAddress``); "device" memory lives in
  a reserved VA range of its own, accessible only while allocated.
* ``libcudart.so.13`` (+ ``libcudart.so``) and ``libcudart_static.a`` - a
  runtime that reaches the driver only through ``dlopen`` +
  ``cuGetProcAddress``, like NVIDIA's; ``cudart_sim.h`` declares it.

Two ways to use it:

* a child process: ``subprocess.run(cmd, env=memhook.sim.environ())``;
* this process: ``memhook.sim.activate()`` before anything loads a driver.

Knobs (environment, read by the simulated driver at load):
``MEMHOOK_SIM_DEVICES`` (1-8, default 1) and ``MEMHOOK_SIM_DEVICE_MEMORY``
(bytes per device, K/M/G suffixes, default 16G).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from .._objects.procmaps import file_paths
from .._objects.sonames import LIBCUDA_SONAME

__all__ = [
    "DRIVER_SONAME",
    "RUNTIME_SONAME",
    "SimulatorError",
    "activate",
    "environ",
    "is_active",
    "library_dir",
]

DRIVER_SONAME = LIBCUDA_SONAME
RUNTIME_SONAME = "libcudart.so.13"
_REQUIRED = (DRIVER_SONAME, RUNTIME_SONAME, "libcudart.so", "libcudart_static.a", "cudart_sim.h")


class SimulatorError(RuntimeError):
    """The simulator cannot be used as asked (missing files, real driver loaded)."""


def library_dir() -> str:
    """Folder holding the simulated ``libcuda.so.1``, ``libcudart.so(.13)``,
    ``libcudart_static.a`` and ``cudart_sim.h``."""
    folder = Path(__file__).resolve().parent / "lib"
    missing = [name for name in _REQUIRED if not (folder / name).is_file()]
    if missing:
        raise SimulatorError(
            f"the simulator's files {missing} are missing from {folder}; the "
            "native build did not run - reinstall memhook with `pip install .`"
        )
    return str(folder)


def environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process that should run on the simulator.

    Returns a copy of ``base`` (default: ``os.environ``) whose
    ``LD_LIBRARY_PATH`` starts with :func:`library_dir`, so the child's
    ``dlopen("libcuda.so.1")`` - cuda-python's, CuPy's, the runtime's - finds
    the simulator first."""
    env = dict(os.environ if base is None else base)
    folder = library_dir()
    parts = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != folder]
    env["LD_LIBRARY_PATH"] = os.pathsep.join([folder, *parts])
    return env


_activate_lock = threading.Lock()
_driver: ctypes.CDLL | None = None


def _loaded_drivers() -> list[str]:
    """Paths of every libcuda.so* mapped in this process."""
    return sorted(p for p in file_paths() if os.path.basename(p).startswith("libcuda.so"))


def is_active() -> bool:
    """True when this process has the simulated driver loaded."""
    ours = os.path.join(library_dir(), DRIVER_SONAME)
    return any(os.path.realpath(p) == os.path.realpath(ours) for p in _loaded_drivers())


def activate() -> ctypes.CDLL:
    """Load the simulated driver into this process, globally.

    Afterwards any ``dlopen("libcuda.so.1")`` in the process returns the
    simulator, because the loader matches the already-loaded soname.  Call it
    before anything loads a driver; raises :class:`SimulatorError` if a real
    (or other) ``libcuda`` is already loaded.  Idempotent."""
    global _driver
    ours = os.path.realpath(os.path.join(library_dir(), DRIVER_SONAME))
    with _activate_lock:
        others = [p for p in _loaded_drivers() if os.path.realpath(p) != ours]
        if others:
            raise SimulatorError(
                f"a CUDA driver is already loaded in this process ({', '.join(others)}); "
                "memhook.sim.activate() must run before anything loads libcuda, "
                "or use memhook.sim.environ() for a child process"
            )
        if _driver is None:
            _driver = ctypes.CDLL(ours, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        return _driver
