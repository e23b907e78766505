"""`memhook demo` without cuda-python says which extra to install.

The library itself never imports cuda-python (it is not a dependency); only
the demo workload is written with it.  A ``cuda`` package without
``bindings`` first on PYTHONPATH stands in for an environment without it."""

from __future__ import annotations

import os
from pathlib import Path

from cli_testing import memhook


def test_demo_without_cuda_bindings_names_the_extra(tmp_path: Path) -> None:
    fake = tmp_path / "cuda"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    proc = memhook("demo", "--sim", env=env)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "pip install 'memhook[demo]'" in proc.stderr
    assert "cuda.bindings" in proc.stderr
    assert "] alloc " not in proc.stdout  # nothing was traced
