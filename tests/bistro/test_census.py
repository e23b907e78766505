"""tools/bistro_census.py over the NVIDIA prologue vectors and real ELF files.

Targets (the issue): every allocation/free entry point of DESIGN.md
section 3 patchable, and >= 99% of all exported functions of libcuda 580
and libcudart 13, in both the 5-byte and the 12-byte form."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "bistro_census.py"
VECTORS = ROOT / "tests" / "data" / "nvidia-prologues.json"
LAST_LINE = re.compile(r"^patchable 5-byte: (\d+)/(\d+), 12-byte: (\d+)/(\d+)$")

pytest.importorskip("elftools")


def run_census(target: Path, tmp_path: Path) -> tuple[str, dict]:
    summary = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, str(TOOL), str(target), "--summary-json",
                           str(summary)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(summary.read_text())


def check_last_line(stdout: str, summary: dict) -> None:
    last = stdout.rstrip("\n").split("\n")[-1]
    m = LAST_LINE.match(last)
    assert m, f"last line is {last!r}"
    t = summary["totals"]
    assert [int(g) for g in m.groups()] == [t["5"]["patchable"], t["5"]["total"],
                                            t["12"]["patchable"], t["12"]["total"]]


def test_nvidia_vectors_meet_the_targets(tmp_path: Path) -> None:
    stdout, summary = run_census(VECTORS, tmp_path)
    print(stdout)
    check_last_line(stdout, summary)
    libs = summary["libraries"]
    for key in ("libcuda.so.580", "libcudart.so.13"):
        (name,) = [n for n in libs if n.startswith(key)]
        for form in ("5", "12"):
            fig = libs[name][form]
            assert fig["total"] > 300
            assert fig["patchable"] >= 0.99 * fig["total"], (name, form, fig)
    # Every allocation/free entry point present in every library, both forms.
    present = {name: ep["present"] for name, ep in summary["entry_points"].items()}
    assert present[next(n for n in present if n.startswith("libcuda.so.580"))] >= 25
    assert present[next(n for n in present if n.startswith("libcudart.so.13"))] >= 13
    refused = {name: ep["refused"] for name, ep in summary["entry_points"].items()
               if ep["refused"]}
    assert not refused, refused
    # What is refused in the NVIDIA libraries is only "too short".
    for name in libs:
        if name.startswith(("libcuda.so.580", "libcudart.so.13")):
            for form in ("5", "12"):
                for reason in libs[name][form]["refusals"]:
                    assert reason.startswith("too-short"), (name, form, reason)


def test_census_over_the_core_library(tmp_path: Path) -> None:
    import memhook

    core = Path(memhook.library_path())
    stdout, summary = run_census(core, tmp_path)
    check_last_line(stdout, summary)
    assert summary["totals"]["5"]["total"] > 10
    assert "memhook_bistro_analyze" not in stdout or "patchable" in stdout


@pytest.mark.parametrize("path", ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"])
def test_census_over_libc(path: str, tmp_path: Path) -> None:
    if not Path(path).exists():
        pytest.skip(f"{path} not present")
    stdout, summary = run_census(Path(path), tmp_path)
    check_last_line(stdout, summary)
    five = summary["totals"]["5"]
    assert five["total"] > 1000
    # libc is compiled by the same toolchains: the only refusals expected
    # are short functions and back branches, not decode failures.
    refusals = summary["libraries"][Path(path).name]["5"]["refusals"]
    assert not [r for r in refusals if r.startswith(("decode-failed", "unsupported"))], refusals
    assert five["patchable"] >= 0.95 * five["total"]


@pytest.mark.parametrize("library", ["libcuda.so.1", "libcudart.so.13"])
def test_simulator_entry_points_are_patchable_in_both_forms(native, library: str,
                                                             tmp_path: Path) -> None:
    """The simulator stands in for NVIDIA's libraries in hook tests, so its
    allocation/free entry points must be as patchable as theirs (none is a
    lone tail-call `jmp`; see SIM_ENTRY_CFLAGS in csrc/build_native.py)."""
    stdout, summary = run_census(native.sim_dir / library, tmp_path)
    check_last_line(stdout, summary)
    (entry_points,) = summary["entry_points"].values()
    assert entry_points["present"] >= (25 if library == "libcuda.so.1" else 13)
    assert not entry_points["refused"], stdout
