"""`memhook trace -o` as a template (%p, %h, %r, %%) and the rank it reads
from the launchers' variables."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from cli_testing import memhook

_LAUNCHER_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID",
                  "LOCAL_RANK")


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env.update(values)
    return env


def _trace(tmp_path: Path, template: str, **values: str):
    return memhook("trace", "--sim", "-f", "jsonl", "-o", template, "--", "true",
                   env=_env(**values), cwd=tmp_path)


def test_template_codes_expand(tmp_path: Path) -> None:
    proc = _trace(tmp_path, "t-%h-%r-%p-100%%.jsonl", SLURM_PROCID="7")
    assert proc.returncode == 0, proc.stderr
    (made,) = tmp_path.iterdir()
    header = json.loads(made.read_text().splitlines()[0])
    assert made.name == f"t-{socket.gethostname()}-7-{header['pid']}-100%.jsonl"
    assert (header["rank"], header["rank_from"]) == (7, "SLURM_PROCID")


@pytest.mark.parametrize(("values", "rank", "source"), [
    ({"RANK": "3", "LOCAL_RANK": "1", "SLURM_PROCID": "9"}, 3, "RANK"),
    ({"LOCAL_RANK": "1", "OMPI_COMM_WORLD_RANK": "5"}, 5, "OMPI_COMM_WORLD_RANK"),
    ({"PMI_RANK": "2", "SLURM_PROCID": "9"}, 2, "PMI_RANK"),
    ({"LOCAL_RANK": "1"}, 1, "LOCAL_RANK"),
])
def test_the_global_rank_wins(tmp_path: Path, values: dict, rank: int, source: str) -> None:
    proc = _trace(tmp_path, "t-%r.jsonl", **values)
    assert proc.returncode == 0, proc.stderr
    header = json.loads((tmp_path / f"t-{rank}.jsonl").read_text().splitlines()[0])
    assert (header["rank"], header["rank_from"]) == (rank, source)


def test_rank_asked_for_and_not_set_is_an_error(tmp_path: Path) -> None:
    proc = _trace(tmp_path, "t-%r.jsonl")
    assert proc.returncode == 2
    assert "no rank variable is set" in proc.stderr and "RANK, OMPI_COMM_WORLD_RANK" in proc.stderr
    assert not list(tmp_path.iterdir())
    proc = _trace(tmp_path, "t-%r.jsonl", RANK="first")
    assert proc.returncode == 2 and "RANK='first' is not a rank" in proc.stderr


@pytest.mark.parametrize("template", ["t-%d.jsonl", "t-%"])
def test_unknown_codes_are_an_error(tmp_path: Path, template: str) -> None:
    proc = _trace(tmp_path, template, RANK="0")
    assert proc.returncode == 2, proc.stderr
    assert "valid: %p (pid), %h (host), %r (rank), %% (a percent sign)" in proc.stderr
    assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())


def test_without_a_rank_the_header_says_none(tmp_path: Path) -> None:
    proc = _trace(tmp_path, "plain.jsonl")
    assert proc.returncode == 0, proc.stderr
    header = json.loads((tmp_path / "plain.jsonl").read_text().splitlines()[0])
    assert header["kind"] == "header" and header["rank"] is None and header["rank_from"] is None
