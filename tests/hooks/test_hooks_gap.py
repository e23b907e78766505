"""Answers that stay true across a time without hooks (scripts/hooks_gap.py),
in every hook mode and over every kind of memory the hooks see: memory
freed while uninstalled never answers CUDA's after a reinstall, a FREE
carries its own allocation's size whatever the address held before, and
without hooks (never installed, or mode none) a driver answer is not
remembered past the free."""

from __future__ import annotations

import pytest
from hooks_testing import MODES

KINDS = ("device", "managed", "pinned", "registered", "pool", "ipc")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_freed_while_uninstalled(scenario, mode: str, kind: str) -> None:
    outcome = scenario("hooks_gap.py", mode, timeout=240)
    for when in ("drained", "pending"):
        outcome.check(f"gap {kind} {when}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", KINDS)
def test_address_reused_while_uninstalled(scenario, mode: str, kind: str) -> None:
    outcome = scenario("hooks_gap.py", mode, timeout=240)
    for shape in ("smaller", "same", "larger"):
        got = outcome.check(f"reuse {kind} {shape}")
        assert not got["notes"], got["notes"]  # (the reuse really happened)


@pytest.mark.parametrize("how", ("never", "none"))
@pytest.mark.parametrize("kind", KINDS)
def test_no_hooks_remember_nothing_stale(scenario, how: str, kind: str) -> None:
    scenario("hooks_gap.py", "none", timeout=240).check(f"no hooks {kind} {how}")


@pytest.mark.parametrize("mode", (*MODES, "none"))
def test_scenario_clean(scenario, mode: str) -> None:
    scenario("hooks_gap.py", mode, timeout=240).check_all_clean()


@pytest.mark.parametrize("mode", ("bistro", "reloc", "bistro,reloc"))
def test_churn_across_install_cycles(scenario, mode: str) -> None:
    """Four threads allocating and freeing while the hooks go out and back
    40 times: FREE sizes stay each thread's own, nothing freed answers CUDA."""
    scenario("hooks_gap.py", mode, "churn", timeout=240).check("churn")
