"""GOTCHA: patching and restoring while other threads call the function never
lets a thread execute a torn instruction or get a wrong result.

fixtures/stress_driver.c: 4+ threads call five patched functions (libcuda,
cudart push/mov, endbr64, jcc rel8, cudart 11 push-run families) in a tight
loop; the main thread installs and removes all five >= 1000 times, cycling
through the 12-byte, 5-byte and automatic forms.  Every call is checked."""

from __future__ import annotations

import os
import re

import pytest


# (functions, cycles): two families for the full 1000 cycles (the libcuda
# entry, whose 5-byte window has instruction boundaries at +1 and +4, and the
# cudart push/mov run), and all five for fewer cycles.  On a 2-CPU host with
# 4 spinning threads one cycle costs a few ms (the threads own the CPUs).
@pytest.mark.parametrize("functions,cycles", [(2, 1000), (5, 200)])
def test_stress_install_remove_under_calls(native, build_driver, functions, cycles):
    threads = max(4, os.cpu_count() or 1)
    exe = build_driver("stress_driver")
    proc = native.run([str(exe), str(threads), str(cycles), str(functions)], timeout=600)
    line = proc.stdout.strip().splitlines()[-1]
    stats = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}
    print(line)
    assert stats["errors"] == 0 and stats["fails"] == 0
    assert stats["installs"] == functions * cycles
    # both paths were really taken while the patches came and went
    assert stats["hooked"] > 0 and stats["plain"] > 0, line
