"""`memhook demo` without cuda-python says which extra to install.

The library itself never imports cuda-python (it is not a dependency); only
the demo workload is written with it.  A ``cuda`` package without
``bindings`` first on PYTHONPATH stands in for an environment without it."""

from __future__ import annotations

import os
from pathlib import Path

from cli_testing import memhook, read_jsonl


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


def test_demo_takes_stacks_and_python_as_trace_does(tmp_path: Path) -> None:
    out = tmp_path / "demo.jsonl"
    proc = memhook("demo", "--sim", "--stacks=8", "--python", "-f", "jsonl", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    allocs = [e for e in read_jsonl(out) if e["kind"] == "alloc"]
    assert allocs and all(e["stack"] and len(e["stack"]) <= 8 for e in allocs)
    workload = str(Path(memhook_cli_dir(), "demo_workload.py"))
    assert all(e["python"][0]["file"] == workload and e["python"][-1]["function"] == "<module>"
               for e in allocs), allocs[0]
    bad = memhook("demo", "--sim", "--python=x")
    assert bad.returncode == 2 and "--python: 'x' is not a depth" in bad.stderr


def memhook_cli_dir() -> str:
    import memhook.cli

    return os.path.dirname(os.path.abspath(memhook.cli.__file__))
