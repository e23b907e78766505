"""Every error path of `memhook trace`: a clear message and the right status."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_testing import memhook


@pytest.mark.parametrize("args, message", [
    (["--bogus", "--", "true"], "unrecognized arguments: --bogus"),
    ([], "missing command"),
    (["--"], "missing command"),
    (["-f", "xml", "--", "true"], "invalid choice: 'xml'"),
    (["-m", "bistro,bogus", "--", "true"], "bad token 'bogus'"),
    (["-o", "/nonexistent-dir/trace.txt", "--", "true"],
     "cannot write /nonexistent-dir/trace.txt: No such file or directory"),
], ids=["bad-flag", "no-command", "dash-dash-only", "unknown-format", "bad-mode",
        "unwritable-output"])
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    proc = memhook("trace", *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert message in proc.stderr
    assert "memhook trace summary" not in proc.stdout + proc.stderr  # nothing ran


def test_command_not_found_is_127_with_one_line() -> None:
    proc = memhook("trace", "--", "memhook-no-such-command-xyz", "arg")
    assert proc.returncode == 127
    assert proc.stderr == "memhook trace: memhook-no-such-command-xyz: command not found\n"
    assert proc.stdout == ""


def test_command_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    proc = memhook("trace", "--", str(script))
    assert proc.returncode == 126
    assert proc.stderr.startswith(f"memhook trace: {script}: cannot execute")


def test_bad_mode_from_environment_exits_2() -> None:
    import os

    proc = memhook("trace", "--", "true", env=dict(os.environ, MEMHOOK_CUDA_MODE="fast"))
    assert proc.returncode == 2
    assert "MEMHOOK_CUDA_MODE='fast'" in proc.stderr and "bad token 'fast'" in proc.stderr


def test_output_closed_early(programs) -> None:
    """`memhook trace -f jsonl -- CMD | head -1`: CMD runs on, its status is
    still the exit status, and the summary still comes (on stderr)."""
    import subprocess
    import sys

    # 200,000 events: far more lines than a pipe holds, so writes do fail.
    proc = subprocess.Popen([sys.executable, "-m", "memhook", "trace", "-f", "jsonl", "--",
                             "sh", "-c", f"{programs.event_storm} 200000 && exit 5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith('{"kind": "header"')
    assert proc.stdout.readline().startswith('{"kind":"alloc"')
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 5, stderr
    assert "the output was closed early (broken pipe)" in stderr
    assert "== memhook trace summary: 200000 events" in stderr


@pytest.mark.parametrize("fmt", ["jsonl", "text", "chrome"])
@pytest.mark.parametrize("how", ["folder-removed", "file-replaced"])
def test_an_output_that_vanished_is_not_reported_as_written(programs, tmp_path: Path,
                                                            fmt: str, how: str) -> None:
    """CMD removes the output's folder (or puts another file in its place)
    while the trace writes there.  Before: exit 0 and "wrote the jsonl trace
    to out/t.jsonl" for a file that was gone (issue 33, item 3)."""
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / f"t.{fmt}"
    change = f"rm -rf {folder}" if how == "folder-removed" else f"rm {out}; echo x > {out}"
    proc = memhook("trace", "--sim", "-f", fmt, "-o", str(out), "--", "sh", "-c",
                   f"{programs.pairs} 50; {change}; {programs.pairs} 50")
    assert proc.returncode == 70, proc.stderr
    assert "wrote the" not in proc.stderr, proc.stderr
    assert f"warning: the output {out} was removed" in proc.stderr, proc.stderr
    assert f"memhook trace: the {fmt} trace in {out} is incomplete or gone" in proc.stderr
    assert "== memhook trace summary: 200 events" in proc.stderr  # the summary still counts all
