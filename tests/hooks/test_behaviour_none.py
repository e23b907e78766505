"""Mode none hooks nothing (MEMHOOK_CUDA_MODE=none through install()): every
function reported uncovered with a reason, no byte of the driver's or the
runtime's code changed, dlsym answering the libraries' own functions, and
no event from the driver, the shared runtime or a static runtime.  The same
checks see bistro,reloc's patches and events, and switching back to none
restores every byte and records nothing again."""

from __future__ import annotations

import pytest

CASES = ("install none", "none: nothing patched, nothing recorded",
         "bistro,reloc then none again")


@pytest.mark.parametrize("case", CASES)
def test_mode_none(scenario, hook_fixtures, case: str) -> None:
    outcome = scenario("mode_none.py", "none", str(hook_fixtures.static_runtime))
    outcome.check(case)
    if case == CASES[-1]:
        outcome.check_all_clean()
