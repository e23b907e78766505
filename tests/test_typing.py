"""`mypy memhook` is clean (configuration: [tool.mypy] in pyproject.toml).

CI runs the README's test command, which is pytest: this test is how CI runs
mypy.  mypy comes with the test extra; its cache goes to a scratch folder so
a stale cache from another checkout cannot hide an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_is_clean(tmp_path: Path) -> None:
    try:
        import mypy  # noqa: F401
    except ImportError as exc:  # the test extra was not installed
        raise AssertionError("mypy is missing: pip install -e '.[test]'") from exc
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache"),
         "--config-file", str(ROOT / "pyproject.toml"), "memhook"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy memhook:\n{proc.stdout}\n{proc.stderr}"
    assert "Success: no issues found" in proc.stdout, proc.stdout
