"""``memhook run [-m MODE] [--sim] [--pointer-attributes] -- CMD ARGS...``

Runs an unmodified program with the core (``libmemhook.so``) first in
``LD_PRELOAD`` and the hooks installed when it loads
(``MEMHOOK_INSTALL_AT_LOAD=1``, the mode in ``MEMHOOK_CUDA_MODE``:
csrc/cuda/run_at_load.c), without a trace: no collector, no output of
memhook's own.  CMD's allocations feed the process-wide cache, which C code
in CMD asks through ``memhook_query`` (``memhook/memhook.h``) and Python in
CMD through ``memhook.memory_type``.  Children inherit the environment, so
a child exec'd with it gets the hooks too (one given an environment of its
own does not: that is the trace's promise, not this command's).

``--pointer-attributes`` (``MEMHOOK_POINTER_ATTRIBUTES=1``) also answers
CMD's ``cuPointerGetAttribute(s)`` and ``cudaPointerGetAttributes`` from
the cache where it knows the answer exactly, the driver the rest
(docs/design/pointer-attributes.md): a transport or framework that asks
the driver per buffer gets memhook's answers unmodified.

The launcher is ``memhook trace``'s (:mod:`memhook.cli.launch`): the exit
status is CMD's (128+N when a signal N ended it); 127 when CMD cannot be
found, 126 when it cannot be executed; 2 for a usage error (bad flag,
missing CMD, unknown mode).  Signals are relayed as a shell relays them to
its foreground command (:class:`memhook.cli.launch.SignalRelay`): SIGTERM,
SIGHUP and SIGQUIT are passed on, ^C reaches CMD from the terminal; a
second signal while CMD runs gives CMD one more second, then memhook exits
128+N and leaves CMD running, saying so.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .._values.printable import printable
from . import launch

__all__ = ["USAGE", "add_parser", "run", "run_command"]

USAGE = "memhook run [-m MODE] [--sim] [--pointer-attributes] -- CMD [ARGS...]"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "run", usage=USAGE,
        help="run a command with the hooks on, without a trace",
        description="Run CMD with memhook's core preloaded and its hooks installed at load, "
                    "so memhook_query (C) and memhook.memory_type (Python) in CMD answer "
                    "from the hooks. No trace is written. The exit status is CMD's.")
    launch.add_launch_arguments(p)
    p.add_argument("--pointer-attributes", action="store_true",
                   help="answer CMD's cuPointerGetAttribute(s) and cudaPointerGetAttributes "
                        "from memhook's cache where it knows the answer exactly (the driver "
                        "answers the rest)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=run)
    return p


def _fail(message: str, status: int = 2) -> int:
    print(f"memhook run: {printable(message)}", file=sys.stderr)
    return status


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        return _fail(f"missing command; usage: {USAGE}")
    return run_command(command, mode=args.mode, sim=args.sim,
                       pointer_attributes=args.pointer_attributes)


def run_command(command: list[str], mode: str | None = None, sim: bool = False,
                pointer_attributes: bool = False) -> int:
    """The whole of ``memhook run``; returns the exit status."""
    from .. import library_path
    from .._values.modes import HookMode
    from .trace import mode_error

    problem = mode_error(mode)
    if problem:
        return _fail(problem)
    env = dict(os.environ)
    if sim:
        from .. import sim as _sim

        try:
            env = _sim.environ(env)
        except _sim.SimulatorError as exc:
            return _fail(str(exc))
    program = launch.resolve(command, env)
    if program is None:
        return _fail(f"{command[0]}: command not found", launch.NOT_FOUND)
    core = library_path()
    preload = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p]
    env["LD_PRELOAD"] = ":".join([core] + [p for p in preload if p != core])
    env["MEMHOOK_CUDA_MODE"] = str(HookMode.parse(mode))
    env["MEMHOOK_INSTALL_AT_LOAD"] = "1"
    if pointer_attributes:
        env["MEMHOOK_POINTER_ATTRIBUTES"] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    relay = launch.SignalRelay()
    try:
        try:
            child = launch.start(command, program, env)
        except launch.LaunchError as exc:
            return _fail(str(exc), exc.status)
        relay.started(child)
        status = launch.wait(child, relay)
        if status is None:
            _fail(f"a second signal ({relay.name()}) came before CMD ended: CMD (pid "
                  f"{child.pid}) was left running", 0)
            return 128 + relay.last
        return launch.exit_status(status)
    finally:
        relay.restore()
