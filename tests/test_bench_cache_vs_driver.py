"""bench/queries/cache_vs_driver.py runs, at tiny sizes, on the simulator: every mode
in a child of its own installs the hooks, records its allocations through
them, checks the answers it is about to time (a child whose cache or
hooks answer wrong fails the run) and reports each figure.  The figures
themselves belong to the bench (README), not to this test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "queries" / "cache_vs_driver.py"
FIGURES = ("dev_cold", "dev_hot", "host", "lookup_cold", "batch_dev", "batch_dev_sorted",
           "batch_host", "cu_dev_cold", "cu_dev_hot", "cu_host")


def test_the_bench_runs_every_mode_on_the_simulator(native) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("cuda.bindings.driver")  # (the test extra has it: the bench's baseline)
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--driver", "sim", "--regions", "40", "--queries", "400",
         "--repeat", "1", "--json"],
        env=native.env(), capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    results = [json.loads(line[len("RESULT "):]) for line in out.splitlines()
               if line.startswith("RESULT ")]
    assert [r["mode"] for r in results] == ["bistro", "reloc", "bistro,reloc"], out
    for r in results:
        assert r["installed_as_asked"] and r["coverage_complete"], r
        assert r["regions"] == 40, r  # every other allocation freed: 40 separate regions
        assert r["queries"] == 400 and r["repeat"] == 1
        for key in FIGURES:
            assert r[key] > 0, (key, r)
    table = [line for line in out.splitlines() if line.startswith("| ")]
    for mode in ("bistro", "reloc", "bistro,reloc"):
        assert sum(line.startswith(f"| {mode} |") for line in table) == 1, out
    assert out.startswith("simulator: "), out
    assert "goal (>= 3x cuda-python" in out
    # the objects users pass, each kind answered and timed
    assert "| numpy | 300 |" in out and "| CUdeviceptr (dev) | 300 |" in out, out
