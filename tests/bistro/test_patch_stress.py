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


def _stress_beside(native, build_driver, blocked: str, cycles: int) -> dict[str, float]:
    threads = max(4, os.cpu_count() or 1)
    exe = build_driver("stress_driver")
    proc = native.run([str(exe), str(threads), str(cycles), "5", blocked], timeout=600)
    line = proc.stdout.strip().splitlines()[-1]
    print(line)
    print(proc.stderr[-2000:])
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}


def test_stress_beside_a_parked_thread_that_blocks_every_signal(native, build_driver):
    """A thread that blocks every signal (faulthandler's watchdog does) and
    sits in read(): no int3 may be used (it would kill it) and no probe
    reaches it, but the kernel shows where it resumes, outside every window.
    Every install and remove of the five families succeeds (the push-first
    ones with the jump placed after the push, under the spin barrier) while
    the workers call them, and no call goes wrong.  Before, every push-first
    entry was refused."""
    stats = _stress_beside(native, build_driver, "parked", 100)
    assert stats["errors"] == 0 and stats["fails"] == 0 and stats["refused"] == 0, stats
    assert stats["installs"] == 5 * 100
    assert stats["hooked"] > 0 and stats["plain"] > 0, stats


def test_stress_beside_a_blocked_thread_that_wakes_and_calls(native, build_driver):
    """The same thread, but it wakes every millisecond and calls every
    patched function between sleeps: caught awake, it may stand in a
    window, so that install is refused (counted, never a crash); caught
    asleep, it meets the spin barrier when it comes back.  Every one of its
    calls and the workers' is right, and most installs go through."""
    stats = _stress_beside(native, build_driver, "waking", 100)
    assert stats["errors"] == 0 and stats["fails"] == 0, stats
    assert stats["installs"] + stats["refused"] == 5 * 100
    assert stats["installs"] >= 5 * 50, stats
    assert stats["hooked"] > 0, stats


def test_stress_beside_a_busy_thread_that_blocks_every_signal(native, build_driver):
    """A thread that blocks every signal and spins is never parked (the
    kernel says "running" for it, preempted or not): a window with an
    instruction boundary inside - every one of the five families - cannot
    be proven clear of it, so each install is refused with EAGAIN, cleanly:
    the process lives and every call is right."""
    stats = _stress_beside(native, build_driver, "busy", 20)
    assert stats["errors"] == 0 and stats["fails"] == 0, stats
    assert stats["refused"] == 5 * 20 and stats["installs"] == 0, stats


def test_stress_beside_a_blocked_thread_parked_in_a_signal_frame(native, build_driver):
    """A thread parked outside every window whose stack holds a pc inside
    one (as the signal frame of a handler that interrupted it there and now
    sleeps does): when the handler returns it resumes inside the window, so
    that window (fx_libcuda_entry) is refused every time, naming the thread;
    the four others are written every time, and no call goes wrong."""
    stats = _stress_beside(native, build_driver, "framed", 30)
    assert stats["errors"] == 0 and stats["fails"] == 0, stats
    assert stats["refused"] == 30 and stats["installs"] == 4 * 30, stats
