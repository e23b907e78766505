"""Helpers for tests/pyframes: trace a script under ``memhook trace
--python``, the interpreters found on this machine, and where each ALLOC
site of the test scripts is in their source.

Imported as ``from pyframes_testing import ...`` (a unique module name).
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["HERE", "SCRIPTS", "Traced", "interpreters", "marker_line", "trace",
           "unsupported_interpreter"]

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
PROGRAM = SCRIPTS / "pyframes_program.py"


class Traced:
    """What one ``memhook trace`` run left: its events, summary, status,
    and the program's ``ready:`` line."""

    def __init__(self, proc: subprocess.CompletedProcess[str], out: Path | None) -> None:
        self.rc = proc.returncode
        self.stdout, self.stderr = proc.stdout, proc.stderr
        self.events: list[dict] = []
        if out is not None and out.suffix == ".jsonl" and out.exists():
            self.events = [e for e in map(json.loads, filter(None, out.read_text().splitlines()))
                           if e["kind"] != "header"]
        ready = re.search(r"^ready: (.*)$", proc.stdout + proc.stderr, re.M)
        self.ready: dict = json.loads(ready.group(1)) if ready else {}

    @property
    def allocs(self) -> list[dict]:
        return [e for e in self.events if e["kind"] == "alloc"]

    def by_size(self, size: int) -> list[dict]:
        return [e for e in self.allocs if e["size"] == size]


def trace(tmp_path: Path, *args: str, python: str = sys.executable, options: tuple = (),
          fmt: str = "jsonl", timeout: float = 300) -> Traced:
    """``memhook trace --sim --python OPTIONS -f FMT -- PYTHON pyframes_program.py ARGS``."""
    out = tmp_path / f"trace-{len(list(tmp_path.iterdir()))}.{fmt}"
    cmd = [sys.executable, "-m", "memhook", "trace", "--sim", "--python", *options,
           "-f", fmt, "-o", str(out), "--", python, str(PROGRAM), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=tmp_path)
    traced = Traced(proc, out)
    assert traced.rc == 0, f"{' '.join(cmd)}: {traced.rc}\n{proc.stdout}\n{proc.stderr}"
    return traced


def marker_line(path: Path, marker: str) -> int:
    """The line of ``path`` that ends with the comment ``# MARKER``."""
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# {marker}"):
            return i
    raise AssertionError(f"no '# {marker}' in {path}")


def interpreters() -> list[str]:
    """CPython 3.9-3.13 executables of this machine, one per minor version
    and kind of build (libpython shared, or linked into the executable),
    this one's first: MEMHOOK_TEST_PYTHONS (os.pathsep-separated paths),
    pyenv's, the distribution's."""
    found = [sys.executable]
    candidates = [p for p in os.environ.get("MEMHOOK_TEST_PYTHONS", "").split(os.pathsep) if p]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    candidates += sorted(glob.glob("/usr/bin/python3.[0-9]*"))
    candidates += [shutil.which(f"python3.{m}") or "" for m in range(9, 14)]
    seen = {_build(sys.executable)}
    for path in candidates:
        if not path or not os.access(path, os.X_OK) or path.endswith("-config"):
            continue
        build = _build(path)
        if build is None or build in seen:
            continue
        seen.add(build)
        found.append(path)
    return found


_BUILD = ("import sys; print(sys.version_info[1], "
          "any('/libpython3' in line for line in open('/proc/self/maps')))")


@functools.lru_cache(maxsize=None)
def _build(python: str) -> tuple[int, bool] | None:
    """(minor, libpython shared) of a CPython 3.9-3.13, else None."""
    try:
        out = subprocess.run([python, "-c", _BUILD], capture_output=True, text=True,
                             timeout=60, check=False).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if len(out) != 2 or not out[0].isdigit() or not 9 <= int(out[0]) <= 13:
        return None
    return int(out[0]), out[1] == "True"


def unsupported_interpreter() -> str | None:
    """A CPython this machine has that --python does not read (3.7, 3.8:
    pyenv's), or None."""
    for path in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.[78].*/bin/python3"))):
        if os.access(path, os.X_OK):
            return path
    return None
