"""fork() with hooks installed and events pending, in every hook mode
(scripts/fork.py): the child's queue drains without stalling on slots that
producer threads claimed but never published before the fork (they are
skipped), yields the parent's pending events once, in order; the child
keeps its hooks and sees its own allocations (events with its pid and tid,
memory_type() CUDA while allocated and HOST after the free); the parent
drains exactly its own events, each once, in order."""

from __future__ import annotations

import pytest
from hooks_testing import MODES


@pytest.mark.parametrize("mode", MODES)
def test_fork(scenario, hook_fixtures, mode: str) -> None:
    outcome = scenario("fork.py", mode, str(hook_fixtures.stress), timeout=120)
    for case in ("install", "child", "parent after fork"):
        outcome.check(case)
    outcome.check_all_clean()
