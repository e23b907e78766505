"""8 threads x 100k cuMemAlloc_v2/cuMemFree_v2 pairs through the hooks (a C
fixture called through ctypes, so the GIL is free) while a Python thread
drains with memhook.flush() and a subscriber counts: exactly 800k ALLOC and
800k FREE, 100k of each per thread, nothing else; the queue's mapped
segments track the undrained backlog (never the history) and drop to a few
(the current one and the spares kept for reuse) once drained; the peak is
printed.

The full 8 x 100k runs in the default mode (bistro,reloc); the other modes
run 8 x 10k, the same test at a tenth of the volume: the simulator's
allocations cost ~10 us a pair and Python's drain delivers each event to a
subscriber, so the full run alone takes 15-20 s on two cores."""

from __future__ import annotations

import pytest
from hooks_testing import MODES

THREADS = 8
FULL_ITERS = 100_000
ITERS = {mode: FULL_ITERS if mode == "bistro,reloc" else FULL_ITERS // 10 for mode in MODES}


@pytest.mark.parametrize("mode", MODES)
def test_stress_exact_counts_bounded_queue(scenario, hook_fixtures, mode: str) -> None:
    outcome = scenario("stress.py", mode, str(hook_fixtures.stress), str(THREADS),
                       str(ITERS[mode]), timeout=300)
    outcome.check("install")
    outcome.check("stress")
    outcome.check_all_clean()
