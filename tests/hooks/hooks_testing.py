"""Shared helpers of the hook-behaviour tests (tests/hooks/test_behaviour_*.py,
test_stress.py, test_fork.py, test_wx.py), imported as ``from hooks_testing
import ...``.

Each scenario is a script in tests/hooks/scripts/ run in a child process on
the simulator (installing hooks in the pytest process would leak into every
later test).  A script runs many named cases and prints one
``HKCASE {"case": ..., "problems": [...], "notes": [...]}`` line per case as
it finishes (tests/hooks/scripts/hkchild.py); :func:`run_scenario` collects
them, and :meth:`Outcome.check` fails a test with its case's problems - or,
when the case never reported (the child crashed or hung), with the case the
child was in and its output.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

__all__ = ["FIXTURES", "MODES", "SCRIPTS", "Outcome", "mode_env", "run_scenario"]

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
FIXTURES = HERE / "fixtures"

# The hook modes every behaviour case runs in; "bistro-far" is bistro with
# the 12-byte jump forced (MEMHOOK_BISTRO_FAR_JUMP=1).
MODES = ("bistro", "reloc", "bistro,reloc", "bistro-far")


def mode_env(native, mode: str) -> dict[str, str]:
    """The environment of a scenario child: the simulator first on the
    library path, no hook mode inherited, the far jump forced for
    bistro-far only."""
    env = native.env()
    for key in ("MEMHOOK_CUDA_MODE", "MEMHOOK_BISTRO_FAR_JUMP", "LD_PRELOAD"):
        env.pop(key, None)
    if mode == "bistro-far":
        env["MEMHOOK_BISTRO_FAR_JUMP"] = "1"
    return env


@dataclasses.dataclass
class Outcome:
    """What a scenario child reported: case -> {"problems", "notes"}."""

    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str
    cases: dict[str, dict]
    started: list[str]
    seconds: float

    def output(self) -> str:
        return (f"{' '.join(self.cmd)} exited {self.returncode} after {self.seconds:.1f}s\n"
                f"--- stdout (tail) ---\n{self.stdout[-6000:]}\n"
                f"--- stderr (tail) ---\n{self.stderr[-6000:]}")

    def check(self, case: str) -> dict:
        """Fail unless the child reported `case` with no problem; returns it."""
        got = self.cases.get(case)
        if got is None:
            where = (f"it died or hung in case {self.started[-1]!r}" if self.started
                     else "it reported nothing")
            pytest.fail(f"case {case!r} was never reported: {where}\n{self.output()}")
        if got["problems"]:
            pytest.fail(f"{case}: {len(got['problems'])} problem(s):\n  "
                        + "\n  ".join(got["problems"]) + "\n" + self.output())
        for note in got["notes"]:
            print(f"{case}: {note}")
        return got

    def check_all_clean(self) -> None:
        """Fail if the child exited non-zero or a reported case has problems."""
        bad = [name for name, got in self.cases.items() if got["problems"]]
        if self.returncode != 0 or bad:
            pytest.fail(f"cases with problems: {bad}\n{self.output()}")


def run_scenario(script: str, args: list[str], env: dict[str, str], *,
                 timeout: float = 300) -> Outcome:
    """Run tests/hooks/scripts/<script> with args and collect its cases."""
    import time

    cmd = [sys.executable, str(SCRIPTS / script), *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        def text(b: object) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        stdout, stderr, rc = text(exc.stdout), text(exc.stderr) + "\n[timed out]", -9
    cases: dict[str, dict] = {}
    started: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("HKCASE "):
            got = json.loads(line[len("HKCASE "):])
            name = got["case"]
            if name in cases:  # a case name must be reported once
                got["problems"] = [f"case {name!r} reported twice", *got["problems"]]
            cases[name] = got
        elif line.startswith("HKSTART "):
            started.append(line[len("HKSTART "):])
    return Outcome(cmd, rc, stdout, stderr, cases, started, time.perf_counter() - t0)
