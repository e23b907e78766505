"""The examples in the public API's docstrings run, and say what they show.

Each module's examples run with ``pytest --doctest-modules`` in a process of
their own: some load the simulated driver and install hooks, which must not
leak into the suite's process (or into another module's examples).  They
need no GPU: the simulator, or a MemtypeCache fed by hand."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The documented API: memhook/__init__.py's __all__ lives in these modules.
MODULES = ("memhook/__init__.py", "memhook/_binding/core.py", "memhook/_events/drain.py",
           "memhook/_queries/query.py", "memhook/cache.py", "memhook/events.py",
           "memhook/hooks.py")


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module: str) -> None:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)  # the examples load the core themselves
    # (no hypothesis plugin: the examples use none, and its import is most
    # of a child pytest's start)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "no:hypothesispytest", "--doctest-modules",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), module],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{module}:\n{proc.stdout}\n{proc.stderr}"
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= 1, proc.stdout


def test_every_public_callable_has_an_example() -> None:
    """Each name in memhook.__all__ that is a function (memory_type and lookup
    are builtins), and each public method of MemtypeCache, shows an example
    (``>>>``) in its docstring."""
    import inspect

    import memhook

    missing = []
    for name in memhook.__all__:
        obj = getattr(memhook, name)
        if inspect.isroutine(obj) and ">>>" not in (obj.__doc__ or ""):
            missing.append(name)
    for name, member in vars(memhook.MemtypeCache).items():
        if name.startswith("_") or not inspect.isfunction(member):
            continue
        if ">>>" not in (member.__doc__ or ""):
            missing.append(f"MemtypeCache.{name}")
    assert not missing, f"docstrings without an example: {missing}"
