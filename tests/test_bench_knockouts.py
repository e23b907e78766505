"""bench/hooks/hook_cost_split.py measures the hook path with one piece left out at
a time by replacing lines of csrc/; each replacement must still match the
code exactly once, or the bench would measure nothing (it stops with a
message then - this finds it first)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("hook_cost_split",
                                                  ROOT / "bench" / "hooks" / "hook_cost_split.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = load_bench()


@pytest.mark.parametrize("piece", sorted(BENCH.KNOCKOUTS))
def test_each_knockout_still_matches_the_code_once(piece: str) -> None:
    for rel, old, _ in BENCH.KNOCKOUTS[piece]:
        text = (ROOT / "csrc" / rel).read_text()
        assert text.count(old) == 1, f"{piece}: {rel} has {text.count(old)} copies of {old!r}"
