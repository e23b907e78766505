"""^C anywhere (issue 32 items 4 and 5): a KeyboardInterrupt from a signal
handler every 100 us lands inside flush(), the queries, subscribe/close,
install/uninstall and MemtypeCache's writes, while C threads allocate
through the hooks (scripts/async_exceptions.py says what each case
checks).  Nothing is lost, repeated or torn: every event reaches the
subscriber exactly once, every kept buffer is in the cache, the cache is
what the events make it, and each cache write is all or nothing.  One ^C
placed right after each of the drain's locks is taken, before its try,
wedges nothing.

Before: 30,000 kept buffers missing from the cache and their ALLOCs never
delivered; one ^C in the window wedged the drain for good; a ^C in a cache
write left the region and key lists out of step (ValueError on every later
write or query)."""

from __future__ import annotations

import pytest
from hooks_testing import mode_env, run_scenario

CASES = ("flush", "queries", "subscribe", "install", "cache", "lock-window")


@pytest.fixture(scope="module", params=["bistro", "reloc"])
def outcome(request, native, hook_fixtures):  # type: ignore[no-untyped-def]
    mode = request.param
    return run_scenario("async_exceptions.py", [mode, str(hook_fixtures.keeper), *CASES],
                        mode_env(native, mode), timeout=400)


@pytest.mark.parametrize("case", CASES)
def test_an_exception_from_a_signal_handler_loses_nothing(outcome, case: str) -> None:  # type: ignore[no-untyped-def]
    outcome.check(case)
