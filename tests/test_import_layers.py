"""The Python modules import in layers: ``memhook.events`` (data and
subscriptions) sits below ``memhook._drain`` (which reads the events' types
and registry, and owns ``flush``), never the other way round.

Each check runs in a fresh interpreter: an import cycle only shows in the
order modules are first imported, which the suite's own process has long
since fixed."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memhook"
# Every module of the library proper (the build script and the CLI entry
# point are not imported by the library).
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py")
                 if p.stem not in ("__init__", "__main__", "_ffi_build"))


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    proc = _fresh(f"import memhook.{module}")
    assert proc.returncode == 0, f"import memhook.{module} first:\n{proc.stderr}"


def test_events_loads_without_the_drain() -> None:
    """Load memhook.events under a bare package (memhook/__init__.py, which
    imports everything, not run) and see what it pulled in."""
    code = f"""
import importlib, sys, types
pkg = types.ModuleType("memhook")
pkg.__path__ = [{str(PACKAGE)!r}]
sys.modules["memhook"] = pkg
importlib.import_module("memhook.events")
print(sorted(m for m in sys.modules if m.startswith("memhook.")))
"""
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr
    loaded = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert "memhook.events" in loaded
    assert "memhook._drain" not in loaded, f"memhook.events imported the drain: {loaded}"


def _imported(tree: ast.AST) -> set[str]:
    """Names of memhook's own modules a file imports, at any depth (a lazy
    import inside a function is still an edge), TYPE_CHECKING blocks
    excepted."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memhook."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names
                         if a.name.startswith("memhook."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_nothing_events_imports_reaches_the_drain() -> None:
    """The static view of the same: no import statement anywhere in
    events.py, or in what it imports, leads to _drain (a function-level
    import would not show at load time, but is the same back-edge)."""
    seen: set[str] = set()
    todo = ["events"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = PACKAGE / f"{name}.py"
        if path.exists():
            todo.extend(_imported(ast.parse(path.read_text(), str(path))))
    assert "_drain" not in seen, f"events.py reaches memhook._drain through {sorted(seen)}"
