"""The event path when the hooks or the driver come and go (issue 15), in
every hook mode (scripts/event_path.py): a FREE never carries the size of an
allocation the hooks did not see freed."""

from __future__ import annotations

import pytest
from hooks_testing import MODES


@pytest.mark.parametrize("mode", MODES)
def test_event_path(scenario, mode: str) -> None:
    outcome = scenario("event_path.py", mode, timeout=120)
    for case in ("install", "stale size", "stale size asked"):
        outcome.check(case)
    outcome.check_all_clean()


@pytest.mark.parametrize("mode", ("bistro", "reloc"))
def test_pressure(scenario, mode: str) -> None:
    """8 Python threads allocating, a subscriber counting: one memory_type()
    returns within 250 ms (median of five; the slowest within 2 s),
    uninstall() within 2 s, and every pair arrives
    once (scripts/pressure.py)."""
    outcome = scenario("pressure.py", mode, "8", timeout=120)
    for case in ("install", "query", "uninstall"):
        outcome.check(case)


def test_backlog(scenario, hook_fixtures) -> None:
    """400,000 events and no query: memory stays within 16 MiB and the next
    flush() takes <= 1 s (scripts/backlog.py)."""
    outcome = scenario("backlog.py", "bistro", str(hook_fixtures.stress), "2", "100000",
                       timeout=240)
    for case in ("install", "backlog"):
        outcome.check(case)


@pytest.mark.parametrize("mode", MODES)
def test_driver_unload(scenario, mode: str) -> None:
    """dlclose and reload of the simulated driver: no ghost regions, and the
    reloaded driver's allocations are seen (scripts/event_path.py unload)."""
    outcome = scenario("event_path.py", mode, "unload", timeout=120)
    for case in ("install", "driver unload"):
        outcome.check(case)
    outcome.check_all_clean()


def test_driver_reloaded_at_another_address(scenario) -> None:
    """reloc forgets the unloaded driver's definitions: the driver loaded
    again elsewhere (its old place taken by a mapping) is hooked afresh
    (scripts/driver_reload_elsewhere.py)."""
    outcome = scenario("driver_reload_elsewhere.py", "reloc", timeout=120)
    for case in ("install", "reload elsewhere"):
        outcome.check(case)
