"""A Python signal handler that queries memhook (every 5 ms for 5 s) while
the main thread allocates, frees, flushes and queries
(scripts/signal_queries.py): it finishes, and every answer is right.  The
signal lands anywhere in the drain, also on the thread that holds its
locks; a handler there answers from the cache as it stands or through the
driver and never waits on its own thread.  Before issue 23 this hung 7 of 7
runs (a signal between acquiring the drain lock and recording its owner,
or inside a cache write, made the handler wait for its own thread)."""

from __future__ import annotations

import pytest
from hooks_testing import mode_env, run_scenario


@pytest.mark.parametrize("mode", ["bistro", "reloc", "bistro,reloc"])
def test_a_signal_handler_queries_while_the_main_thread_drains(native, mode: str) -> None:
    outcome = run_scenario("signal_queries.py", [mode, "5"], mode_env(native, mode),
                           timeout=120)
    outcome.check("handler queries")
    outcome.check_all_clean()
