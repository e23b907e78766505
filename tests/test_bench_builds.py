"""The C benchmarks still build against the tree (-Werror): a header moved
between layers broke bench/hooks/caller_bench.py once without any test noticing.
caller_bench also runs (2M events a round, about a second) - its figure is
the README's, not asserted here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
CFLAGS = ["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
          f"-I{ROOT / 'csrc' / 'include'}"]

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@pytest.mark.parametrize("source", ["hook_bench.c", "hook_cost_split.c"])
def test_pair_bench_builds(tmp_path: Path, source: str) -> None:
    proc = subprocess.run(["cc", *CFLAGS, str(BENCH / "hooks" / source),
                           "-o", str(tmp_path / "bench"), "-ldl", "-lpthread"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_ucx_side_by_side_compiles(tmp_path: Path) -> None:
    """Compiled only: it links the real driver, which this box may lack (it
    broke on the GPU once, with nothing here noticing)."""
    proc = subprocess.run(["cc", *CFLAGS, "-c", str(BENCH / "ucx" / "ucx_side_by_side.c"),
                           "-o", str(tmp_path / "ucx_side_by_side.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_caller_bench_builds_and_runs() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "hooks" / "caller_bench.py"), "--quick"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RESULT plain_ns=" in proc.stdout, proc.stdout


def test_native_query_search_bench_builds(tmp_path: Path) -> None:
    """native_query_bench.py --callgrind's harness (linked by the runner
    against a core of its choice: compiled only here)."""
    source = BENCH / "queries" / "native_query_bench_search.c"
    proc = subprocess.run(["cc", *CFLAGS, "-c", str(source), "-o", str(tmp_path / "search.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_native_query_bench_builds_and_runs() -> None:
    """A small run (its figures go in docs/performance.md, not asserted)."""
    proc = subprocess.run([sys.executable, str(BENCH / "queries" / "native_query_bench.py"),
                           "200", "20000"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "query_device_ns" in proc.stdout and "backlog_absorb_ms" in proc.stdout, proc.stdout
    assert "churn_query_ns" in proc.stdout and "(wrong answers 0)" in proc.stdout, proc.stdout
