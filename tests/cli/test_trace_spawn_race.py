"""A child started by posix_spawn or vfork+exec whose parent exits at once
is still traced.

Such a child runs no atfork handler: its first traced image is the program
it execs, which connects to the collector only once the loader has run the
core's constructor.  The parent is free to exit as soon as the exec is done
(glibc's posix_spawn and vfork both return then); when CMD is that parent,
the collector saw CMD end, no process and no connection, and ended before
the child connected: the child's events were silently not traced (status
0, no warning; the child itself said "cannot reach the collector").  Now
the process that starts the child announces it first (EXPECT, with a pidfd
of the child: trace_proto.h), and the collector waits for it until it says
HELLO or ends.

MEMHOOK_TESTING_TRACE_LOAD_DELAY_MS holds every traced image that long at
load, before it connects: the late child, made certain.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from cli_testing import HERE, memhook, read_jsonl, warnings_of

_LATE = {"MEMHOOK_TESTING_TRACE_LOAD_DELAY_MS": "1500"}


@pytest.fixture(scope="module")
def spawn_exit(native, c_test_dir: Path) -> Path:
    return native.compile(HERE / "fixtures" / "spawn_exit.c", c_test_dir / "cli_spawn_exit")


def _child_pids(out: Path, parent: int | None = None) -> set[int]:
    return {e["pid"] for e in read_jsonl(out) if e["pid"] != parent}


@pytest.mark.parametrize("how", ["posix_spawn", "vfork"])
def test_a_spawned_child_whose_parent_exits_at_once_is_traced(programs, spawn_exit: Path,
                                                              tmp_path: Path, how: str) -> None:
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
                   str(spawn_exit), how, str(programs.pairs), "10",
                   env={**os.environ, **_LATE})
    assert proc.returncode == 0, proc.stderr
    events = read_jsonl(out)
    assert len(events) == 20, proc.stderr  # the child's 10 pairs
    assert "cannot reach the collector" not in proc.stderr, proc.stderr
    assert warnings_of(proc.stderr) == [], proc.stderr


def test_a_python_posix_spawn_child_is_traced(programs, tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    code = ("import os, sys; "
            "os.posix_spawn(sys.argv[1], [sys.argv[1], '10'], os.environ)")
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
                   sys.executable, "-c", code, str(programs.pairs),
                   env={**os.environ, **_LATE})
    assert proc.returncode == 0, proc.stderr
    assert len(read_jsonl(out)) == 20, proc.stderr
    assert "cannot reach the collector" not in proc.stderr, proc.stderr


def test_a_spawned_child_that_fails_to_start_ends_the_wait(spawn_exit: Path,
                                                          tmp_path: Path) -> None:
    """An exec that fails in a vfork child: the announced process ends
    without a HELLO, and the trace ends with it."""
    out = tmp_path / "trace.jsonl"
    proc = memhook("trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
                   str(spawn_exit), "vfork", str(tmp_path / "no-such-program"),
                   env={**os.environ, **_LATE}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert read_jsonl(out) == [], proc.stderr
