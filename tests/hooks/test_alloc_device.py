"""An ALLOC's device (scripts/alloc_device.py, every mode): where the
process sees one device it is 0 and the hooks do not ask the driver for
the current context's; a failed allocation and a process that sees
several devices still ask, and carry what the driver says."""

from __future__ import annotations

import pytest
from hooks_testing import MODES

CASES = {"one device": "1", "failed": "1", "several devices": "2"}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MODES)
def test_alloc_device(scenario, mode: str, case: str) -> None:
    scenario("alloc_device.py", mode, CASES[case]).check(case)
