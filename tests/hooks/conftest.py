"""Fixtures for the hook-behaviour tests: the C fixture libraries of
tests/hooks/fixtures/, built once per session, and a per-session cache of
scenario outcomes (one child process runs all the cases of one script in
one mode; every test reads its own case from it).
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from hooks_testing import FIXTURES, Outcome, mode_env, run_scenario


@dataclasses.dataclass(frozen=True)
class HookFixtures:
    static_runtime: Path   # links libcudart_static.a, runtime symbols hidden
    stress: Path           # pthreads calling cuMemAlloc_v2/cuMemFree_v2 (links libcuda.so.1)
    wx_filter: Path        # installs the W^X seccomp filter
    churn: Path            # C callers (alloc/free pairs) and spinners, started and stopped
    keeper: Path           # C threads that allocate and keep buffers, and alloc/free pairs


def _cc(native, src: Path, out: Path, *extra: str) -> Path:
    # Loaded into a Python child, so never built with sanitizers (an ASan
    # library cannot be loaded into an interpreter that is not).
    flags = [f for f in native.cflags()
             if not f.startswith(("-fsanitize", "-fno-sanitize"))]
    cmd = ["cc", *flags, "-shared", "-fPIC", str(src), "-o", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.fail(f"compile failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return out


@pytest.fixture(scope="session")
def hook_fixtures(native, c_test_dir: Path) -> HookFixtures:
    out = c_test_dir / "hooks"
    out.mkdir(exist_ok=True)
    sim = native.sim_dir
    return HookFixtures(
        static_runtime=_cc(native, FIXTURES / "static_runtime.c", out / "libhk_static_rt.so",
                           str(sim / "libcudart_static.a"), "-ldl", "-lpthread",
                           "-Wl,--exclude-libs,ALL"),
        stress=_cc(native, FIXTURES / "stress.c", out / "libhk_stress.so", f"-L{sim}",
                   "-l:libcuda.so.1", f"-Wl,-rpath,{sim}", "-lpthread"),
        wx_filter=_cc(native, FIXTURES / "wx_filter.c", out / "libhk_wx.so"),
        churn=_cc(native, FIXTURES / "churn.c", out / "libhk_churn.so", f"-L{sim}",
                  "-l:libcuda.so.1", f"-Wl,-rpath,{sim}", "-lpthread"),
        keeper=_cc(native, FIXTURES / "keeper.c", out / "libhk_keeper.so", f"-L{sim}",
                   "-l:libcuda.so.1", f"-Wl,-rpath,{sim}", "-lpthread"),
    )


@pytest.fixture(scope="session")
def scenario(native):
    """scenario(script, mode, *args) -> Outcome, each run once per session."""
    done: dict[tuple, Outcome] = {}

    def get(script: str, mode: str, *args: str, timeout: float = 300) -> Outcome:
        key = (script, mode, *args)
        if key not in done:
            done[key] = run_scenario(script, [mode, *args], mode_env(native, mode),
                                     timeout=timeout)
        return done[key]
    return get
