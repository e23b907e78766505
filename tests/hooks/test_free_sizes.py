"""Where a FREE's size comes from (scripts/free_sizes.py, every mode):
outside the trace the drain fills it from the ALLOC it pairs with - the
ALLOC's size, type and device for an allocation made after install (freed
by its thread or another, drained in between or not), size 0 and
size_unknown for one made before install and never asked about, the
driver's size, type and device for one a query asked about; a free the driver refuses is
its error and leaves the cache as it was; a subscriber with exact=True
gets the hook's sizes (the driver's, before the free), as the trace
does, and a switch of that flag under threads freeing leaves no FREE
without its size; a record the drain keeps is forgotten when a new
allocation takes its address (a map unmapped with its neighbour's range)."""

from __future__ import annotations

import pytest
from hooks_testing import MODES

CASES = ("without exact", "asked about", "refused", "exact", "exact switch", "unmapped together")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MODES)
def test_free_sizes(scenario, mode: str, case: str) -> None:
    scenario("free_sizes.py", mode).check(case)
