"""The hook layer under ThreadSanitizer and AddressSanitizer+UBSan: the core
is rebuilt with the sanitizer, and 8 threads allocate and free through the
installed hooks (bistro + reloc on the simulated driver) while the main
thread drains (fixtures/sanitized_stress.c).  Every event must arrive, and
the sanitizer must report nothing: a memory error or undefined behaviour in
the wrappers, the queue or the live table, or a race TSan can see, fails the
test.  (TSan judges races by the happens-before edges it tracks; the queue's
many release/acquire pairs - segment links, spares, the hint - mean some
mistakes in the publication protocol could pass it.  The 8 x 100k stress in
test_stress.py checks the protocol by counting, test_event_order.py the
order across threads.)  tests/queue/fixtures/handoff_order.c runs on the same build."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hooks_testing import FIXTURES

QUEUE_FIXTURES = FIXTURES.parents[1] / "queue" / "fixtures"
from memhook_testing import CSRC, sanitized_core


@pytest.mark.parametrize("sanitizer", ["thread", "address,undefined"])
def test_hooks_under_a_sanitizer(native, build_cache: Path, tmp_path: Path,
                                 sanitizer: str) -> None:
    core = sanitized_core(build_cache, sanitizer).core.parent
    exe = tmp_path / "sanitized_stress"
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-g", "-O1", f"-fsanitize={sanitizer}",
                    "-fno-sanitize-recover=all", f"-I{CSRC / 'include'}",
                    str(FIXTURES / "sanitized_stress.c"), "-o", str(exe), f"-L{core}",
                    "-lmemhook", f"-Wl,-rpath,{core}", "-lpthread", "-ldl"], check=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", TSAN_OPTIONS="halt_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1")
    proc = subprocess.run([str(exe), str(native.sim_dir / "libcuda.so.1")], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "events 64000 of 64000" in proc.stdout, report
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, report
    # The cross-thread order check (test_event_order.py) on the same build.
    order = tmp_path / "handoff_order"
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-g", "-O1", f"-fsanitize={sanitizer}",
                    "-fno-sanitize-recover=all", f"-I{CSRC / 'include'}",
                    str(QUEUE_FIXTURES / "handoff_order.c"), "-o", str(order), f"-L{core}",
                    "-lmemhook", f"-Wl,-rpath,{core}", "-lpthread"], check=True)
    proc = subprocess.run([str(order)], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0 and proc.stdout.startswith("ok events 320800 "), report
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, report
