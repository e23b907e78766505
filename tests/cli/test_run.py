"""``memhook run [-m MODE] [--sim] -- CMD``: an unmodified program runs with
the core preloaded and the hooks on, no trace; the launcher's statuses and
signal rules are ``memhook trace``'s.

tests/cli/fixtures/run_query.c never links memhook or installs anything: it finds
the core through dlsym(RTLD_DEFAULT), checks memhook_hooks_mode() is
nonzero, that memhook_query answers a device allocation from the hooks
(origin HOOKS, extent, alloc_id), and that with nothing in it draining, the
queue stays short and the cache is fed (the core's keeper thread)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_testing import HERE, memhook
from memhook_testing import NativeBuild

from memhook import sim


@pytest.fixture(scope="module")
def run_query(native: NativeBuild, c_test_dir: Path) -> Path:
    return native.compile(HERE / "fixtures" / "run_query.c", c_test_dir / "cli_run_query",
                          extra=["-ldl"])


@pytest.mark.parametrize(("mode", "pairs"), [("bistro,reloc", 20000), ("bistro", 1000),
                                             ("reloc", 1000)])
def test_the_hooks_are_on_and_feed_the_cache(run_query: Path, mode: str, pairs: int) -> None:
    proc = memhook("run", "--sim", "-m", mode, "--", str(run_query), str(pairs), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok=1" in proc.stdout and "origin=1" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr == "", proc.stderr  # no trace, nothing of memhook's said


def test_a_fork_child_keeps_its_queue_short(run_query: Path) -> None:
    """The keeper thread does not survive fork(): the child's first new
    segment of events starts its own."""
    proc = memhook("run", "--sim", "--", str(run_query), "3000", "fork", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok=1" in proc.stdout, proc.stdout + proc.stderr


def test_without_memhook_run_the_program_finds_no_core(run_query: Path) -> None:
    proc = subprocess.run([str(run_query)], capture_output=True, text=True,
                          env=sim.environ(), timeout=120)
    assert proc.returncode == 4 and "no memhook" in proc.stdout, proc


def test_mode_none_installs_nothing(run_query: Path) -> None:
    proc = memhook("run", "--sim", "-m", "none", "--", str(run_query), timeout=300)
    assert proc.returncode == 1, proc
    assert "memhook_hooks_mode() is nonzero" in proc.stderr


@pytest.mark.parametrize(("script", "status"), [("exit 3", 3), ("kill -TERM $$", 143),
                                                ("kill -KILL $$", 137), ("exit 0", 0)])
def test_exit_status_is_cmds(script: str, status: int) -> None:
    proc = memhook("run", "--sim", "--", "sh", "-c", script)
    assert proc.returncode == status, proc


def test_a_sigterm_to_memhook_is_passed_on_to_cmd() -> None:
    child = subprocess.Popen([sys.executable, "-m", "memhook", "run", "--", "sh", "-c",
                              "trap 'echo got-term; exit 7' TERM; echo ready; "
                              "while :; do sleep 0.05; done"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 7, (out, err)
    assert "got-term" in out


def test_cmd_not_found_is_127_and_not_executable_126(tmp_path: Path) -> None:
    proc = memhook("run", "--", "no-such-program-memhook")
    assert proc.returncode == 127, proc
    assert "no-such-program-memhook: command not found" in proc.stderr
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(plain, 0o644)
    proc = memhook("run", "--", str(plain))
    assert proc.returncode == 126, proc
    assert "cannot execute" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["run"], "missing command; usage: memhook run"),
    (["run", "--"], "missing command; usage: memhook run"),
    (["run", "-m", "bogus", "--", "true"], "bad token 'bogus'"),
    (["run", "-m", "", "--", "true"], "-m/--mode is empty"),
    (["run", "--no-such-flag", "--", "true"], "unrecognized arguments"),
], ids=["none", "dashes-only", "bad-mode", "empty-mode", "unknown-flag"])
def test_usage_errors_are_2(args: list[str], message: str) -> None:
    proc = memhook(*args)
    assert proc.returncode == 2, proc
    assert message in proc.stderr, proc.stderr


def test_pointer_attributes_flag(native: NativeBuild, c_test_dir: Path) -> None:
    """``--pointer-attributes``: an unmodified program's pointer queries are
    answered by memhook, equal to the driver's; without it, the driver's."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "pointer_attributes_diff.c"
    program = native.compile(fixture, c_test_dir / "cli_pointer_attributes", extra=["-ldl"])
    on = memhook("run", "--sim", "--pointer-attributes", "--", str(program), timeout=300)
    assert on.returncode == 0, on.stdout + on.stderr
    assert "memhook host_malloc ctx get:MEMORY_TYPE rc=1" in on.stdout, on.stdout
    assert "memhook device_base ctx gets:four rc=0" in on.stdout
    off = memhook("run", "--sim", "--", str(program), timeout=300)
    assert off.returncode == 0, off.stdout + off.stderr
    assert "\nmemhook " not in off.stdout and "driver host_malloc ctx get:MEMORY_TYPE rc=1" in off.stdout
