"""The C-level simulator tests pass with the native tree built under ASan and
UBSan (conftest's MEMHOOK_TEST_SANITIZE mode), so CI proves what a developer
can rerun by hand (here the sanitizer build is the session's, shared with
tests/hooks/test_sanitized_hooks.py):

    MEMHOOK_TEST_SANITIZE=address,undefined pytest tests/sim/test_sim_memory.py \\
        tests/sim/test_sim_control.py tests/sim/test_cudart.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from memhook_testing import BUILD_CACHE_ENV

HERE = Path(__file__).resolve().parent
C_LEVEL = ["test_sim_memory.py", "test_sim_control.py", "test_cudart.py"]


@pytest.mark.skipif(bool(os.environ.get("MEMHOOK_TEST_SANITIZE")),
                    reason="this session already runs every test on a sanitizer build")
def test_c_level_simulator_tests_pass_under_asan_ubsan(build_cache: Path,
                                                       tmp_path: Path) -> None:
    env = dict(os.environ, MEMHOOK_TEST_SANITIZE="address,undefined")
    env[BUILD_CACHE_ENV] = str(build_cache)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--basetemp={tmp_path / 'run'}", *[str(HERE / name) for name in C_LEVEL]],
        env=env, capture_output=True, text=True, timeout=900, cwd=HERE.parent.parent)
    tail = proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, f"sanitized run failed:\n{tail}"
    assert " passed" in proc.stdout and " failed" not in proc.stdout, tail
