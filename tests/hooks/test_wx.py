"""A host that forbids writable+executable code, for real (a seccomp filter,
fixtures/wx_filter.c, as in tests/bistro/test_patch_wx.py):

* bistro,reloc: bistro fails on every driver entry point with EACCES, and
  status() says so per function; reloc covers every function, coverage is
  complete, and the driver and the shared runtime are seen through reloc;
* bistro alone: install() raises OSError(EACCES) saying bistro could not
  patch any driver entry point and why, and changes nothing - from mode
  none it stays none, from reloc it stays reloc and keeps recording;
* no driver byte changes and no W+X mapping appears."""

from __future__ import annotations

import pytest

BISTRO_RELOC = ("the host forbids W+X", "install bistro,reloc", "no driver code changed",
                "driver calls through reloc", "shared runtime through reloc", "no W+X mapping")
BISTRO = ("the host forbids W+X", "install bistro fails clearly", "after the failed install",
          "a failed switch keeps the installed mode")


@pytest.mark.parametrize("case", BISTRO_RELOC)
def test_wx_bistro_reloc_covers_everything_through_reloc(scenario, hook_fixtures, case):
    outcome = scenario("wx.py", "bistro,reloc", str(hook_fixtures.wx_filter))
    outcome.check(case)
    if case == BISTRO_RELOC[-1]:
        outcome.check_all_clean()


@pytest.mark.parametrize("case", BISTRO)
def test_wx_bistro_alone_fails_clearly(scenario, hook_fixtures, case):
    outcome = scenario("wx.py", "bistro", str(hook_fixtures.wx_filter))
    outcome.check(case)
    if case == BISTRO[-1]:
        outcome.check_all_clean()
