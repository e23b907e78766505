"""The ``memhook`` command line.

Subcommands:

* ``memhook trace [...] -- CMD ...`` run CMD with the hooks preloaded and trace its
                                 allocations (exit status is CMD's); see memhook.cli.trace
* ``memhook run [...] -- CMD ...``   run CMD with the core preloaded and the hooks on,
                                 without a trace (exit status is CMD's); see memhook.cli.run
* ``memhook info [--json]``      driver/runtime versions, loaded CUDA libraries, and
                                 which mechanism covers each hooked function per mode
* ``memhook demo``               a short allocation workload run under ``trace``
* ``memhook diff A B``           two jsonl traces compared per library and call site;
                                 see memhook.cli.diff
* ``memhook merge FILES...``     one view of many traces (a job's ranks), clocks aligned;
                                 see memhook.cli.merge
* ``memhook report TRACE...``    the traces drawn as one self-contained HTML page;
                                 see memhook.cli.report
* ``memhook config --cflags --libs``  flags to build a C program against the C API
                                 (``memhook/memhook.h``); see memhook.cli.config
* ``memhook version``            versions and paths of the package and its core
                                 (``memhook --version``: the version alone)
* ``memhook sim env``            shell ``export`` lines to run programs on the simulator
* ``memhook sim run -- CMD ...`` run CMD on the simulator (exit status is CMD's)

``python -m memhook`` and the ``memhook`` console script are the same program.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _cmd_version(_args: argparse.Namespace) -> int:
    from . import __version__, library_path, sim
    from ._binding.core import native_version

    print(f"memhook {__version__}")
    print(f"core    {native_version()} {library_path()}")
    try:
        print(f"sim     {sim.library_dir()}")
    except sim.SimulatorError as exc:
        print(f"sim     unavailable: {exc}")
    return 0


def _cmd_sim_env(_args: argparse.Namespace) -> int:
    from . import sim

    env = sim.environ()
    print(f"export LD_LIBRARY_PATH={shlex.quote(env['LD_LIBRARY_PATH'])}")
    return 0


def _cmd_sim_run(args: argparse.Namespace) -> int:
    from . import sim

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("memhook sim run: missing command; usage: memhook sim run -- CMD [ARGS...]",
              file=sys.stderr)
        return 2
    env = sim.environ()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"memhook sim run: cannot run {command[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - exec does not return


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser and each subcommand's own (named as typed: "trace", "sim run")."""
    from . import __version__

    parser = argparse.ArgumentParser(prog="memhook", description="GPU memory-event hooking")
    parser.add_argument("--version", action="version", version=f"memhook {__version__}")
    sub = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")
    p_version = sub.add_parser("version", help="print versions and library paths")
    p_version.set_defaults(func=_cmd_version)
    p_sim = sub.add_parser("sim", help="the CUDA driver simulator")
    sim_sub = p_sim.add_subparsers(dest="sim_command", required=True, metavar="{env,run}")
    p_env = sim_sub.add_parser("env", help="print shell exports that select the simulator")
    p_env.set_defaults(func=_cmd_sim_env)
    p_run = sim_sub.add_parser("run", help="run a command on the simulator")
    p_run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p_run.set_defaults(func=_cmd_sim_run)
    from .cli import config, demo, diff, info, merge, report, run, trace

    subs = {"version": p_version, "sim": p_sim, "sim env": p_env, "sim run": p_run,
            "trace": trace.add_parser(sub), "run": run.add_parser(sub), "info": info.add_parser(sub),
            "demo": demo.add_parser(sub), "diff": diff.add_parser(sub),
            "merge": merge.add_parser(sub), "report": report.add_parser(sub),
            "config": config.add_parser(sub)}
    return parser, subs


def main(argv: Sequence[str] | None = None) -> int:
    parser, subs = _parser()
    # parse_known_args, then our own error: argparse would blame words a
    # subcommand does not know on the top-level parser and show its usage;
    # the subcommand's usage is the one that helps.
    args, extra = parser.parse_known_args(argv)
    if extra:
        name = args.command_name
        if name == "sim":
            name = f"sim {args.sim_command}"
        subs[name].error(f"unrecognized arguments: {' '.join(extra)}")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
