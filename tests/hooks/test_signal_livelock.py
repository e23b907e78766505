"""Queries from a periodic signal handler beside native allocators (issue
32 item 6): two C threads make alloc/free pairs through the hooks, a
SIGALRM handler asks memory_types() (of 16 or 64 pointers), memory_type()
and lookup() every 2, 5 or 20 ms (every 0.5 ms: memory_type() and lookup()
alone), and the main thread allocates, asks and flushes for 6 s
(scripts/signal_livelock.py).  The main thread keeps making progress and
every answer is right.  (Faster timers hold on a quiet box; on a loaded
one a handler's own driver queries can outlast the interval, and handlers
then nest whatever memhook does.)

Before: when the handler interrupted the main thread while it held the
apply lock, each handler query took more events out of the core and
scanned all it had taken; once a handler ran longer than the interval,
handlers nested (depth 5 -> 171 -> 464, 0.3M -> 7M rows) and the main
thread never ran again.  A query now takes nothing more on the applier's
thread and looks through at most UNAPPLIED_ROWS rows, once per state."""

from __future__ import annotations

import pytest
from hooks_testing import mode_env, run_scenario


@pytest.mark.parametrize(("interval", "pointers"),
                         [("0.0005", "0"), ("0.002", "16"), ("0.005", "64"), ("0.02", "64")])
def test_handler_queries_beside_native_allocators(native, hook_fixtures, interval: str,
                                                   pointers: str) -> None:  # type: ignore[no-untyped-def]
    outcome = run_scenario("signal_livelock.py",
                           ["bistro", str(hook_fixtures.churn), interval, "6", pointers],
                           mode_env(native, "bistro"), timeout=90)
    outcome.check("handler queries")
    outcome.check_all_clean()
