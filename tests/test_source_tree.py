"""Python started in the repository root imports the source tree, which
hides an installed memhook.  Without its native parts built in place it
must say so, and how to get out: run elsewhere, or ``pip install -e .``.

Each test copies the tree's Python files (no built native parts) to a
scratch folder and runs Python there, as a user would after ``pip install .``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _copy_sources(dest: Path, *, as_source_tree: bool) -> Path:
    shutil.copytree(ROOT / "memhook", dest / "memhook",
                    ignore=shutil.ignore_patterns("*.so", "*.so.*", "*.a", "lib", "__pycache__",
                                                  "*.c", "*.o"))
    if as_source_tree:
        shutil.copy2(ROOT / "setup.py", dest / "setup.py")
        (dest / "csrc").mkdir()
        shutil.copy2(ROOT / "csrc" / "build_native.py", dest / "csrc" / "build_native.py")
    else:  # an installed copy: the wheel has no build script
        (dest / "memhook" / "_ffi_build.py").unlink()
    assert not list((dest / "memhook").rglob("*.so"))
    return dest


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -I would drop the current folder from sys.path; the point is that it is there.
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_python_m_memhook_in_an_unbuilt_source_tree_says_why_and_how_out(tmp_path: Path) -> None:
    root = _copy_sources(tmp_path / "repo", as_source_tree=True)
    proc = _run(root, "-m", "memhook", "version")
    assert proc.returncode != 0, proc.stdout
    err = proc.stderr
    assert f"memhook is being imported from its source tree ({root})" in err, err
    assert "run from another folder" in err and "pip install -e ." in err, err
    assert "reinstall" not in err, err
    assert "ImportError" in err


def test_traced_module_in_an_unbuilt_source_tree_says_why(tmp_path: Path) -> None:
    """`memhook trace -- python -m memhook.cli.demo_workload` from the root: the
    traced program is what imports the source tree, so it is the one that
    must say so (it saw 0 events, silently, before)."""
    root = _copy_sources(tmp_path / "repo", as_source_tree=True)
    proc = _run(root, "-m", "memhook.cli.demo_workload")
    assert proc.returncode != 0
    assert "imported from its source tree" in proc.stderr, proc.stderr


def test_broken_installed_copy_still_says_reinstall(tmp_path: Path) -> None:
    site = _copy_sources(tmp_path / "site", as_source_tree=False)
    proc = _run(site, "-c", "import memhook")
    assert proc.returncode != 0
    assert "reinstall with `pip install .`" in proc.stderr, proc.stderr
    assert "source tree" not in proc.stderr, proc.stderr


def test_the_checkout_built_in_place_imports_from_its_root() -> None:
    """The editable install the README's test command makes works from the root."""
    proc = _run(ROOT, "-m", "memhook", "version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("memhook "), proc.stdout
