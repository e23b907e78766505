"""``memhook demo``: :mod:`memhook.cli.demo_workload` run under ``memhook trace``.

On the GPU when the host has a usable CUDA driver with a device, on memhook's
simulator otherwise; the trace is text, to stdout, with its summary.  Extra
``memhook trace`` options (``-f``, ``-o``, ``-m``, ``--stacks``, ``--python``)
pass through.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .._objects.sonames import LIBCUDA_SONAME

__all__ = ["add_parser", "gpu_present", "have_cuda_bindings", "run"]


def add_parser(sub: Any) -> argparse.ArgumentParser:
    from ..tracing.writers import FORMATS
    from .trace import PYTHON_DEFAULT, PYTHON_MAX, STACKS_DEFAULT, STACKS_MAX

    p = sub.add_parser(
        "demo", help="trace a short allocation workload (GPU if present, else the simulator)",
        description="Run a short, readable allocation workload (memhook/cli/demo_workload.py) "
                    "under `memhook trace`: on the GPU when there is one, on memhook's CUDA "
                    "simulator otherwise.")
    p.add_argument("--sim", action="store_true", help="use the simulator even if a GPU is present")
    p.add_argument("-m", "--mode", default=None, help="hook mechanisms (as for trace)")
    p.add_argument("-f", "--format", default="text", choices=FORMATS,
                   help="output format (as for trace)")
    p.add_argument("-o", "--output", default=None, metavar="FILE", help="as for trace")
    p.add_argument("--stacks", nargs="?", const=str(STACKS_DEFAULT), default=None,
                   metavar="DEPTH", help=f"as for trace (1-{STACKS_MAX}; use --stacks=N)")
    p.add_argument("--python", nargs="?", const=str(PYTHON_DEFAULT), default=None,
                   metavar="DEPTH", help=f"as for trace (1-{PYTHON_MAX}; use --python=N)")
    p.set_defaults(func=run)
    return p


def gpu_present() -> bool:
    """A CUDA driver loads, initialises and has at least one device.

    Probed in a child process, so this process never loads the host's
    driver (the simulator must be the only driver of a --sim child; and a
    real one here would make nothing simpler)."""
    import subprocess

    code = ("import ctypes, sys\n"
            f"try:\n    cuda = ctypes.CDLL({LIBCUDA_SONAME!r})\nexcept OSError:\n    sys.exit(1)\n"
            "n = ctypes.c_int(0)\n"
            "sys.exit(0 if cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(n)) == 0"
            " and n.value > 0 else 1)\n")
    try:
        return subprocess.run([sys.executable, "-c", code], check=False,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def have_cuda_bindings() -> bool:
    """cuda-python's driver bindings, which the workload is written with, are
    importable (they come with ``pip install 'memhook[demo]'``; the library
    itself never needs them)."""
    import importlib.util

    try:
        return importlib.util.find_spec("cuda.bindings.driver") is not None
    except (ImportError, ValueError):  # no "cuda" package at all, or a broken one
        return False


def run(args: argparse.Namespace) -> int:
    from .trace import (PYTHON_DEFAULT, PYTHON_MAX, STACKS_DEFAULT, STACKS_MAX, UsageError,
                        depth_option, mode_error, run_trace)

    problem = mode_error(args.mode)
    try:
        stacks = depth_option("stacks", args.stacks, STACKS_DEFAULT, STACKS_MAX)
        python = depth_option("python", args.python, PYTHON_DEFAULT, PYTHON_MAX)
    except UsageError as exc:
        problem = problem or str(exc)
    if problem:  # before the probe and the banner: nothing runs
        print(f"memhook demo: {problem}", file=sys.stderr)
        return 2
    if not have_cuda_bindings():
        print("memhook demo: the demo workload is written with cuda-python's driver bindings "
              "(cuda.bindings), which are not installed here; install them with "
              "`pip install 'memhook[demo]'` (or `pip install cuda-bindings`: any 12.x or 13.x)",
              file=sys.stderr)
        return 2
    sim = args.sim or not gpu_present()
    where = "memhook's CUDA simulator (no GPU found)" if sim and not args.sim else \
        "memhook's CUDA simulator" if sim else "the GPU"
    print(f"memhook demo: tracing memhook/cli/demo_workload.py on {where}", file=sys.stderr)
    sys.stderr.flush()
    workload = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo_workload.py")
    return run_trace([sys.executable, workload], mode=args.mode,
                     sim=sim, fmt=args.format, output=args.output, stacks=stacks, python=python)


