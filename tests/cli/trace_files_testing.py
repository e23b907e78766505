"""Helpers of the tests of `memhook diff` and `memhook merge`: traces of
tests/cli/scripts/alloc_sites.py, and rewritten copies of trace files (a
cut line, another version, another host)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_testing import HERE

__all__ = ["SITES", "finished", "records", "rewrite", "trace_sites"]

SITES = HERE / "scripts" / "alloc_sites.py"


def trace_sites(out: str, *args: str, cwd: Path, env: dict[str, str] | None = None,
                python: bool = True) -> subprocess.Popen[str]:
    """``memhook trace --sim -f jsonl [--python] -o OUT -- python alloc_sites.py ARGS``,
    started (the caller waits)."""
    cmd = [sys.executable, "-m", "memhook", "trace", "--sim", "-f", "jsonl",
           *(["--python"] if python else []), "-o", out, "--", sys.executable, str(SITES), *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env if env is not None else dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{proc.args}: {proc.returncode}\n{out}\n{err}"
    return out, err


def records(path: Path) -> list[dict]:
    """Every record of a jsonl file, header included."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rewrite(src: Path, dst: Path, header: dict | None = None, shift_ns: int = 0) -> Path:
    """A copy of ``src`` with header keys replaced by ``header``'s and
    every monotonic time (events and the anchor's) moved by ``shift_ns``:
    the same run as another machine, whose clock reads differently, would
    record it."""
    lines = []
    for r in records(src):
        if r["kind"] == "header":
            r.update(header or {})
            r["clock"] = dict(r["clock"], monotonic_ns=r["clock"]["monotonic_ns"] + shift_ns)
        else:
            r["ts_ns"] += shift_ns
        lines.append(json.dumps(r))
    dst.write_text("\n".join(lines) + "\n")
    return dst
