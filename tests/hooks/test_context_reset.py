"""Context teardowns (issue 23): cuDevicePrimaryCtxReset, cuCtxDestroy and
the last cuDevicePrimaryCtxRelease free every allocation of the context
with no hooked free.  Each is one FREE marker in event order
(MEMHOOK_EVENT_CONTEXT_RESET); after it memory_type() of an allocation the
context held is not CUDA (scripts/context_reset.py, every mode); and
``memhook trace`` shows the marker and counts those allocations freed, not
"never freed".  Before the hooks existed the old allocation stayed CUDA and
the trace listed it as never freed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hooks_testing import MODES

CASES = ("flag value", "cuDevicePrimaryCtxReset", "cuCtxDestroy_v2",
         "the last cuDevicePrimaryCtxRelease", "a failed teardown", "cudaDeviceReset")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MODES)
def test_context_teardown(scenario, mode: str, case: str) -> None:
    outcome = scenario("context_reset.py", mode)
    outcome.check(case)
    if case == CASES[-1]:
        outcome.check_all_clean()


_PROGRAM = """
import ctypes
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
p = ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0
assert cu.cuDevicePrimaryCtxReset(0) == 0
"""


def test_the_trace_shows_the_reset_and_counts_the_memory_freed(native, tmp_path: Path) -> None:
    env = native.env()
    env.pop("MEMHOOK_CUDA_MODE", None)
    out = tmp_path / "trace.jsonl"
    proc = subprocess.run([sys.executable, "-m", "memhook", "trace", "--sim", "-f", "jsonl",
                           "-o", str(out), "--", sys.executable, "-c", _PROGRAM],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [e for e in map(json.loads, out.read_text().splitlines()) if e["kind"] != "header"]
    assert [(e["kind"], e["function"]) for e in events] == [
        ("alloc", "cuMemAlloc_v2"), ("free", "cuDevicePrimaryCtxReset")], events
    assert (events[1]["device"], events[1]["result"]) == (0, 0)
    summary = proc.stderr
    never = summary[summary.index("allocations never freed:"):]
    assert "(none)" in never.splitlines()[1], summary


PRIVATE_CASES = ("a history that sets every private bit",
                 "the rows the cache gets carry public flags only",
                 "subscribers get public flags and the drain's seqs")


@pytest.mark.parametrize("case", PRIVATE_CASES)
@pytest.mark.parametrize("mode", MODES)
def test_the_queues_private_flags_never_reach_python(scenario, mode: str, case: str) -> None:
    """Links in seq and the private flag bits 16-31 (queue.h: marker epochs,
    links, raw-TSC and coarse stamps) are the core's: every row the drain
    applies or a query looks at, and every subscriber's Event, carries only
    public flags and the drain's numbering (scripts/private_flags.py)."""
    outcome = scenario("private_flags.py", mode)
    outcome.check(case)
    if case == PRIVATE_CASES[-1]:
        outcome.check_all_clean()
