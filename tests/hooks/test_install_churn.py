"""install() in a busy process never hangs, never kills it, never waits on
a thread (issues 13 and 23): fixtures/churn.c (or Python threads) keeps callers making checked
cuMemAlloc_v2/cuMemFree_v2 pairs and spinners burning the CPUs while
scripts/churn.py cycles install(mode)/flush()/uninstall().

Issues 13 and 23 ask each cycle <= 250 ms; that goal is measured in
bench/queries/query_latency.py.  Measured on the 2-core box: 100 cycles with
4 C callers + 4 C spinners take a median of 10-25 ms and a worst cycle of
50-60 ms at load average 3-5 (the figures are printed); the bounds here
keep 10x headroom for the box's scheduling noise, not for waiting on
threads (the protocol never waits for a thread to leave a
window, and the drain never makes install wait: issue 23)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hooks_testing import mode_env, run_scenario


@pytest.fixture(scope="module")
def churn_lib(hook_fixtures) -> Path:
    return hook_fixtures.churn


def churn(native, lib: Path, mode: str, cycles: int, callers: int, spinners: int,
          caller_mask: int, spinner_mask: int, bound_ms: int, first_bound_ms: int | None = None,
          median_bound_ms: int | None = None):
    first = bound_ms if first_bound_ms is None else first_bound_ms
    args = [mode, str(lib), str(cycles), str(callers), str(spinners), str(caller_mask),
            str(spinner_mask), str(bound_ms), str(first)]
    if median_bound_ms is not None:
        args.append(str(median_bound_ms))
    # (the hang guard: a quiet box runs 100 cycles in a few seconds; the
    # Python-threads case on a loaded one can take a minute)
    outcome = run_scenario("churn.py", args, mode_env(native, mode), timeout=300)
    print(outcome.stdout)
    outcome.check("churn")
    outcome.check_all_clean()
    return outcome


@pytest.mark.parametrize("mode", ["bistro", "bistro,reloc"])
def test_100_cycles_under_callers_and_spinners(native, churn_lib, mode: str) -> None:
    """Issue 23's goal is every cycle <= 250 ms: bench/queries/query_latency.py
    measures it (the cycles' worst, beside the no-hooks baseline).  Here the
    bounds keep 10x headroom: the median cycle <= 250 ms (10-25 ms on the
    quiet box), every cycle <= 2.5 s (a wait that does not end).  With 4 CPU
    hogs and other jobs beside the suite (load average 12-16 on 2 cores) a
    cycle took up to 365 ms, median 152 ms: the install thread's turn on a
    CPU, one of 20-odd runnable threads, not a wait on another thread."""
    churn(native, churn_lib, mode, 100, 4, 4, 0, 0, 2500, median_bound_ms=250)


@pytest.mark.parametrize("mode", ["bistro", "bistro,reloc"])
def test_100_cycles_under_python_callers_and_spinners(native, mode: str) -> None:
    """The same with Python threads (issue 23): four that make the pairs
    through ctypes and four that spin, all wanting the GIL.  Before, a cycle
    waited without a timeout for the drain lock the feeder kept re-taking,
    and made some fifty calls that released the GIL (status() read the hook
    table row by row): a median of 154-193 ms and a worst of 800 ms on a
    loaded box.  Now install() and uninstall() wait for no thread and make
    no call that releases the GIL (memhook._binding.control): a cycle is a
    millisecond or two of work, and waits only where the interpreter makes
    it give the GIL up (every 5 ms of holding it while others want it), for
    its turn among the eight.  That wait is the interpreter's, not
    memhook's: one took p50 16 ms, p99 220 ms on the loaded box
    (bench/queries/query_latency.py prints the cycles' worst beside it).  So the
    bounds: the median cycle <= 100 ms (10x the quiet box's; the old median
    failed it), every cycle <= 2.5 s (a wait that does not end)."""
    churn(native, Path("python"), mode, 100, 4, 4, 0, 0, 2500, median_bound_ms=100)


def test_worker_blocking_sigtrap_survives(native, churn_lib) -> None:
    """A worker that blocks SIGTRAP would be killed by the kernel if it ran
    into an int3: the live write uses the two-byte spin barrier instead, with
    the jump placed after the entry's push (docs/design/live-patching.md), and
    the probe still reaches the worker; so bistro covers every entry (it used
    to refuse them all, naming the thread) and no call goes wrong."""
    out = churn(native, churn_lib, "bistro,reloc", 5, 1, 0, 1, 0, 1000)
    assert "bistro_refused=0" in out.stdout, out.stdout


def test_spinner_blocking_realtime_signals(native, churn_lib) -> None:
    """A spinner that blocks every real-time signal: the probe falls back to
    a signal it does not block; install covers every present function and
    never waits for the spinner (which would take seconds).  The process's
    first install also does its one-time work (14-22 ms alone on the 2-core
    box, 3 ms for a later one; up to 61 ms once beside the spinner in a CI
    run), so it gets the 250 ms bound of a busy process
    (test_100_cycles_...); every later cycle gets 120 ms (issue 23: over 10x
    the <= 11 ms later cycles measure on the quiet box; it was 50 ms)."""
    churn(native, churn_lib, "bistro,reloc", 10, 0, 1, 0, 2, 120, first_bound_ms=250)
