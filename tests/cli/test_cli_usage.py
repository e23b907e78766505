"""The `memhook` command as a command-line tool: --version, each
subcommand's own usage on a usage error, `-m ''`, the summary on the
terminal whatever -o says, and the hint when there is no CUDA driver."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_testing import memhook

import memhook as memhook_pkg

TOP_USAGE = "usage: memhook [-h]"


def test_version_flag_and_command() -> None:
    flag = memhook("--version")
    assert flag.returncode == 0, flag.stderr
    assert flag.stdout == f"memhook {memhook_pkg.__version__}\n"
    command = memhook("version")
    assert command.returncode == 0
    assert command.stdout.splitlines()[0] == flag.stdout.strip()


@pytest.mark.parametrize("args, usage, message", [
    (["trace", "--bogus", "--", "true"], "usage: memhook trace ",
     "memhook trace: error: unrecognized arguments: --bogus"),
    (["trace", "-f"], "usage: memhook trace ", "argument -f/--format: expected one argument"),
    (["info", "--bogus"], "usage: memhook info ", "memhook info: error: unrecognized arguments"),
    (["demo", "--bogus", "x"], "usage: memhook demo ",
     "memhook demo: error: unrecognized arguments: --bogus x"),
    (["version", "extra"], "usage: memhook version ", "unrecognized arguments: extra"),
    (["sim", "env", "extra"], "usage: memhook sim env ", "unrecognized arguments: extra"),
    (["sim"], "usage: memhook sim ", "the following arguments are required: {env,run}"),
], ids=["trace-flag", "trace-missing-value", "info", "demo", "version", "sim-env", "sim"])
def test_usage_error_shows_the_subcommands_usage(args: list[str], usage: str,
                                                 message: str) -> None:
    proc = memhook(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith(usage), proc.stderr
    assert message in proc.stderr
    assert TOP_USAGE not in proc.stderr


@pytest.mark.parametrize("args, message", [
    ([], "the following arguments are required: COMMAND"),
    (["bogus"], "invalid choice: 'bogus' (choose from 'version', 'sim', 'trace', 'run', 'info', "
                "'demo', 'diff', 'merge', 'report', 'config')"),
], ids=["none", "unknown"])
def test_top_level_usage_errors(args: list[str], message: str) -> None:
    proc = memhook(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(TOP_USAGE) and message in proc.stderr


@pytest.mark.parametrize("command", ["trace", "demo"])
@pytest.mark.parametrize("mode", ["", "  "], ids=["empty", "blank"])
def test_empty_mode_flag_is_an_error(command: str, mode: str) -> None:
    args = [command, "-m", mode] + (["--sim", "--", "true"] if command == "trace" else ["--sim"])
    proc = memhook(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr == (f"memhook {command}: -m/--mode is empty; valid modes: none, bistro, "
                           "reloc, a comma list of them (e.g. 'bistro,reloc'), or an integer "
                           "0-3\n")
    assert proc.stdout == ""  # nothing ran


@pytest.mark.parametrize("fmt", ["text", "jsonl", "chrome", "memviz"])
def test_summary_on_the_terminal_with_output_file(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "trace.out"
    proc = memhook("trace", "--sim", "-f", fmt, "-o", str(out), "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.count("== memhook trace summary: 0 events from 1 process") == 1
    assert f"memhook trace: wrote the {fmt} trace to {out}\n" in proc.stderr
    if fmt == "text":  # the file has it too, after the events
        assert "== memhook trace summary: 0 events" in out.read_text()


def test_text_summary_to_stdout_comes_once() -> None:
    proc = memhook("trace", "--sim", "--", "true")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("== memhook trace summary") == 1
    assert "memhook trace summary" not in proc.stderr


def _no_driver_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))  # an empty folder first
    probe = memhook("info", "--json", env=env)
    if json.loads(probe.stdout)["driver"]["loaded"]:
        pytest.skip("this host has a CUDA driver on the default library path")
    return env


def test_no_driver_says_so_and_suggests_sim(tmp_path: Path) -> None:
    env = _no_driver_env(tmp_path)
    proc = memhook("trace", "--", "true", env=env)
    assert proc.returncode == 0
    first = proc.stderr.splitlines()[0]
    assert first.startswith("memhook trace: no CUDA driver here (libcuda.so.1: cannot open")
    assert "add --sim" in first
    # Said again under the summary, where a traceback of CMD's does not bury it.
    assert "warning: no CUDA driver here" in proc.stdout.split("== memhook trace summary")[1]
    info = memhook("info", env=env)
    assert "driver:  no driver (" in info.stdout and "`memhook info --sim`" in info.stdout


def test_no_hint_with_sim_or_a_driver(programs, tmp_path: Path) -> None:
    env = _no_driver_env(tmp_path)
    sim = memhook("trace", "--sim", "--", "true", env=env)
    assert sim.returncode == 0 and "no CUDA driver" not in sim.stdout + sim.stderr
    # A driver that loads (CMD's LD_LIBRARY_PATH names it): no hint either.
    with_driver = dict(env, LD_LIBRARY_PATH=str(programs.tiny_driver_dir))
    real = memhook("trace", "--", "true", env=with_driver)
    assert real.returncode == 0 and "no CUDA driver" not in real.stdout + real.stderr
