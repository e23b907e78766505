"""Patch-restore safety: another entry patcher beside memhook's bistro on
the simulator's cuMemAlloc_v2 (fixtures/second_patcher.c), in both orders
and every memhook mode, each case a fresh process.

What must hold (ofiwg/libfabric #6474 was two patchers corrupting each
other): memhook never writes the bytes it saw over another patcher's jump;
every call completes correctly, before, during and after memhook's
uninstall and a reinstall; status() names a jump of memhook's that another
patcher covered; the far form refuses to cover more than the other's jump.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "second_patcher.c"
N = 20
ORDERS = ("memhook-first", "second-first")
MODES = ("bistro", "bistro-far", "reloc", "bistro,reloc")
CASES = list(itertools.product(ORDERS, MODES))


@pytest.fixture(scope="module")
def program(native, c_test_dir: Path) -> Path:
    core = native.core.parent
    return native.compile(FIXTURE, c_test_dir / "second_patcher", extra=[
        f"-L{native.sim_dir}", "-l:libcuda.so.1", f"-L{core}", "-l:libmemhook.so",
        f"-Wl,-rpath,{native.sim_dir}:{core}", "-ldl"])


def _run(native, program: Path, order: str, mode: str) -> tuple[dict[str, int], str]:
    env = native.env()
    env.pop("MEMHOOK_BISTRO_FAR_JUMP", None)
    if mode == "bistro-far":
        mode = "bistro"
        env["MEMHOOK_BISTRO_FAR_JUMP"] = "1"
    proc = subprocess.run([str(program), order, mode, str(N)], env=env, capture_output=True,
                          text=True, timeout=60)
    found = re.search(r"^RESULT (.*)$", proc.stdout, re.M)
    reason = re.search(r"^REASON (.*)$", proc.stdout, re.M)
    assert proc.returncode == 0 and found and reason, (proc.returncode, proc.stdout, proc.stderr)
    return {k: int(v) for k, v in (kv.split("=") for kv in found.group(1).split())}, \
        reason.group(1)


@pytest.mark.parametrize("order,mode", CASES, ids=["/".join(c) for c in CASES])
def test_two_patchers_on_one_entry(native, program: Path, order: str, mode: str) -> None:
    got, reason = _run(native, program, order, mode)
    # Every call completed (the program stops at the first failed pair),
    # and after memhook's uninstall the other patcher's jump is still there
    # and sees every call.
    assert got["last_ok"] == 1, got
    assert got["second_intact"] == 1, got
    assert got["after_second"] == N, got
    bistro = mode != "reloc"
    covered = order == "memhook-first" and bistro
    # memhook's jump under the other's: said in status(), never taken out.
    assert got["overwritten"] == int(covered), (got, reason)
    if covered:
        assert "another library patched this entry after memhook" in reason, reason
        assert "restoring the bytes memhook saw would erase it" in reason, reason
    if order == "second-first" and mode == "bistro-far":
        # The far form would cover the bytes the other's trampoline returns
        # to: refused, so memhook does not see this entry's calls.
        assert (got["both_mh"], got["again_mh"]) == (0, 0), got
    else:
        assert (got["both_mh"], got["again_mh"]) == (N, N), got
    if order == "memhook-first" and mode == "bistro,reloc":
        # A call that reaches memhook's wrapper through a GOT slot goes on
        # to memhook's trampoline, past the other patcher's jump at the
        # entry (docs/design/ucx-coexistence.md, "Limits").
        assert (got["both_second"], got["again_second"]) == (0, 0), got
    else:
        assert (got["both_second"], got["again_second"]) == (N, N), got
