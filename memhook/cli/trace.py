"""``memhook trace [-m MODE] [--sim] [-f FORMAT] [-o FILE] -- CMD ARGS...``

Runs CMD with the core (``libmemhook.so``) in ``LD_PRELOAD``, so the trace
is the same whether or not CMD is a Python program; its children (fork,
exec, subprocesses) inherit it.  Every traced process connects to this
command's socket and streams its events (csrc/trace/trace.c); this process
collects them (:mod:`memhook.tracing.collector`), writes them in the chosen
format as they come, and ends with a summary.

CMD outlives every failure on this side: memhook never kills or signals CMD
because of its own trouble (an output that fails is closed and said under
the summary; a bad trace area costs that area alone).  Exit status: CMD's
(128+N when a signal N ended it); only when CMD succeeded does the trace's
own state show: 70 (:data:`DEGRADED_STATUS`) when the trace is incomplete,
127/126 when CMD cannot be found/executed, 2 for a usage error.

docs/trace.md is the reference: where each format and the summary go, how
processes are numbered, which children stay traced and when the trace ends,
every exit status, and nested traces.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import time
import traceback
from typing import IO, Any

from .._values.printable import printable
from .._objects.sonames import LIBCUDA_SONAME
from . import launch
from .launch import SignalRelay as _SignalRelay
from .launch import exit_status as _exit_status
from .launch import resolve as _resolve
from .launch import wait as _wait

__all__ = ["DEGRADED_STATUS", "add_parser", "mode_error", "peak_rss", "run", "run_trace"]

DEGRADED_STATUS = launch.DEGRADED
"""memhook's status when CMD succeeded but the trace is incomplete."""

DEFAULT_FILES = {"chrome": "memhook-trace.json", "memviz": "memhook-trace.pickle"}
USAGE = ("memhook trace [-m MODE] [--sim] [-f text|jsonl|chrome|memviz] [-o FILE] "
         "[--memviz-entries N] [--stacks[=DEPTH]] [--python[=DEPTH]] [--oom-snapshot FILE] "
         "[--no-wait-orphans] "
         "-- CMD [ARGS...]")


class UsageError(Exception):
    """A bad invocation: message printed, exit status 2."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    from ..tracing.writers import FORMATS

    p = sub.add_parser(
        "trace", usage=USAGE,
        help="run a command and trace its CUDA allocations",
        description="Run CMD with memhook's hooks preloaded (children and exec'd programs "
                    "too), stream every process's allocation events back, print them, and "
                    "end with a summary. The exit status is CMD's.")
    launch.add_launch_arguments(p)
    p.add_argument("-f", "--format", default="text", choices=FORMATS,
                   help="output format (default text)")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write the trace here ('-' = stdout; default stdout for text and "
                        "jsonl, memhook-trace.json for chrome, memhook-trace.pickle for memviz); "
                        "%%p, %%h, %%r become this memhook's pid, the host and the rank (from "
                        "RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID, "
                        "LOCAL_RANK: the first set), %%%% a percent sign")
    p.add_argument("--memviz-entries", type=int, default=100_000, metavar="N",
                   help="memviz keeps the last N trace entries (default 100000)")
    p.add_argument("--stacks", nargs="?", const=str(STACKS_DEFAULT), default=None,
                   metavar="DEPTH",
                   help=f"record up to DEPTH native frames (frame pointers) of each "
                        f"allocation (default {STACKS_DEFAULT}; 1-{STACKS_MAX}); use --stacks=N")
    p.add_argument("--python", nargs="?", const=str(PYTHON_DEFAULT), default=None,
                   metavar="DEPTH",
                   help=f"record up to DEPTH Python frames of each allocation, innermost "
                        f"first (default {PYTHON_DEFAULT}; 1-{PYTHON_MAX}); use --python=N")
    p.add_argument("--oom-snapshot", default=None, metavar="FILE",
                   help="at the first allocation that fails for lack of memory, keep what "
                        "was live on its device and write it to FILE as a memviz pickle "
                        "(torch.cuda._memory_viz opens it)")
    p.add_argument("--no-wait-orphans", dest="wait_orphans", action="store_false",
                   help="stop when CMD ends (after a 1 s grace), not when the last traced "
                        "process it started does; one still running is named, and the exit "
                        f"status is {DEGRADED_STATUS}")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=run)
    return p


def mode_error(mode: str | None) -> str | None:
    """What is wrong with ``-m MODE`` (None: the environment's), or None."""
    from .._values.modes import VALID_MODES, HookMode

    if mode is not None and not mode.strip():
        # HookMode.parse("") is the default (as a blank environment variable
        # is); an empty flag is a slip: say so rather than guess.
        return f"-m/--mode is empty; valid modes: {VALID_MODES}"
    try:
        HookMode.parse(mode)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def _fail(message: str, status: int = 2) -> int:
    # (A message may quote CMD or a path: see memhook._values.printable.)
    print(f"memhook trace: {printable(message)}", file=sys.stderr)
    return status


def _open_output(fmt: str, path: str | None) -> tuple[IO[Any], bool, str]:
    """(stream, is our stdout, shown name).  Text goes out with
    formats.TEXT_ERRORS: a name that is not UTF-8 is written as its bytes."""
    from ..tracing.writers import TEXT_ERRORS

    if path is None:
        path = DEFAULT_FILES.get(fmt, "-")
    binary = fmt == "memviz"
    if path == "-":
        if binary and sys.stdout.isatty():
            raise UsageError("memviz is a binary pickle; give -o FILE or redirect stdout")
        if not binary and hasattr(sys.stdout, "reconfigure"):
            sys.stdout.reconfigure(errors=TEXT_ERRORS)
        return (sys.stdout.buffer if binary else sys.stdout), True, "stdout"
    try:
        # The caller closes it when the trace is over.
        stream = open(path, "wb" if binary else "w",  # noqa: SIM115
                      encoding=None if binary else "utf-8",
                      errors=None if binary else TEXT_ERRORS)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return stream, False, path


STACKS_DEFAULT = 16
STACKS_MAX = 128  # MEMHOOK_TRACE_STACKS's bound in csrc/trace/trace.c
PYTHON_DEFAULT = 32
PYTHON_MAX = 128  # MEMHOOK_TRACE_PYTHON's bound in csrc/trace/trace.c


def depth_option(name: str, value: str | None, default: int, most: int) -> int:
    """``--stacks[=N]``/``--python[=N]``: the depth (0: not given); raises
    UsageError naming what is valid."""
    if value is None:
        return 0
    try:
        depth = int(value)
    except ValueError:
        depth = -1
    if not 1 <= depth <= most:
        raise UsageError(f"--{name}: {value!r} is not a depth; valid: 1-{most} "
                         f"(--{name} alone: {default})")
    return depth


def run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        return _fail(f"missing command; usage: {USAGE}")
    if args.memviz_entries < 1:
        return _fail("--memviz-entries must be at least 1")
    try:
        stacks = depth_option("stacks", args.stacks, STACKS_DEFAULT, STACKS_MAX)
        python = depth_option("python", args.python, PYTHON_DEFAULT, PYTHON_MAX)
    except UsageError as exc:
        return _fail(str(exc))
    return run_trace(command, mode=args.mode, sim=args.sim, fmt=args.format,
                     output=args.output, memviz_entries=args.memviz_entries, stacks=stacks,
                     python=python, wait_orphans=args.wait_orphans,
                     oom_snapshot=args.oom_snapshot)


def run_trace(command: list[str], mode: str | None = None, sim: bool = False,
              fmt: str = "text", output: str | None = None,
              memviz_entries: int = 100_000, stacks: int = 0, python: int = 0,
              wait_orphans: bool = True, oom_snapshot: str | None = None) -> int:
    """The whole of ``memhook trace``; returns the exit status.  ``stacks``:
    native frames recorded per ALLOC (0: none); ``python``: Python frames
    (0: none); ``wait_orphans``: wait for traced processes that outlive
    CMD (False: ``--no-wait-orphans``); ``oom_snapshot``: the file the live
    set at the first failure for lack of memory is written to (a memviz
    pickle), if there is one."""
    from .. import library_path
    from .._values.modes import HookMode
    from ..tracing.runinfo import expand_output
    from ..tracing.writers import FORMATS

    if fmt not in FORMATS:
        return _fail(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    problem = mode_error(mode)
    if problem:
        return _fail(problem)
    hook_mode = HookMode.parse(mode)
    env = dict(os.environ)
    env["MEMHOOK_TRACE_STACKS"] = str(stacks)
    env["MEMHOOK_TRACE_PYTHON"] = str(python)
    if sim:
        from .. import sim as _sim

        try:
            env = _sim.environ(env)
        except _sim.SimulatorError as exc:
            return _fail(str(exc))
        # For a child given an environment of its own (csrc/trace/trace_env.c).
        env["MEMHOOK_TRACE_LIBRARY_PATH"] = _sim.library_dir()
    program = _resolve(command, env)
    if program is None:
        return _fail(f"{command[0]}: command not found", launch.NOT_FOUND)
    if oom_snapshot is not None:
        problem = _unwritable(oom_snapshot)
        if problem:
            return _fail(f"--oom-snapshot {oom_snapshot}: {problem}")
    try:
        if output is not None:
            output = expand_output(output)  # %p %h %r %%: one file per rank
        out, to_stdout, out_name = _open_output(fmt, output)
    except (UsageError, ValueError) as exc:
        return _fail(str(exc))
    warnings: list[str] = []
    if not sim and os.access(program, os.X_OK):  # (not: Popen's error comes alone)
        problem = _driver_problem(env)
        if problem:
            # CMD may need no driver (a build step, a CPU test): run it, but
            # say it now and again under the summary (which CMD's
            # traceback, if any, does not bury).
            hint = (f"no CUDA driver here ({problem}); CMD's CUDA calls will fail. "
                    f"To run it on memhook's CUDA simulator, add --sim: "
                    f"memhook trace --sim ... -- {command[0]} ...")
            print(f"memhook trace: {printable(hint)}", file=sys.stderr)
            warnings.append(hint)
    _tell_outer_trace(warnings)
    status = 1
    try:
        status = _trace(command, program, env, hook_mode, fmt, out, to_stdout, out_name,
                        library_path(), memviz_entries, warnings, wait_orphans, oom_snapshot)
    finally:
        if not to_stdout:
            try:
                out.close()
            except OSError as exc:  # (a writer's own failure points it at /dev/null first)
                _say(f"memhook trace: closing {out_name} failed ({exc.strerror or exc}): "
                     f"the {fmt} trace there may be incomplete\n")
                status = status or DEGRADED_STATUS
    return status


def _tell_outer_trace(warnings: list[str]) -> None:
    """Inside a traced program (MEMHOOK_TRACE_SOCKET is an outer trace's):
    tell that trace that this one's command reports here, and say it."""
    from ..tracing.protocol import nested_message

    outer = os.environ.get("MEMHOOK_TRACE_SOCKET")
    if not outer:
        return
    note = (f"this trace runs inside another `memhook trace` (its socket {outer}): the "
            f"events of this command are in this trace only, and the outer one says so")
    print(f"memhook trace: {printable(note)}", file=sys.stderr)
    warnings.append(note)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_NONBLOCK) as s:
            s.connect(outer)
            s.send(nested_message())
    except OSError:  # the outer trace is gone or busy: this one's note stands alone
        pass


_DRIVER_PROBE = ("import ctypes, sys\n"
                 f"try:\n    ctypes.CDLL({LIBCUDA_SONAME!r})\n"
                 "except OSError as exc:\n    print(exc)\n    sys.exit(1)\n")


def _driver_problem(env: dict[str, str]) -> str | None:
    """Why CMD's environment can load no CUDA driver, or None when it can.

    Asked of a child with CMD's environment (its LD_LIBRARY_PATH counts), so
    this process never loads the host's driver; dlopen only, no cuInit, so
    it costs a Python start, not a driver start."""
    try:
        probe = subprocess.run([sys.executable, "-S", "-c", _DRIVER_PROBE], env=env,
                               capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None  # cannot tell: say nothing rather than something wrong
    if probe.returncode == 1 and probe.stdout.strip():
        return probe.stdout.strip()
    return None


def _function_table() -> tuple[list[str], list[bool]]:
    from .._binding import hook_table as _hook_table

    return list(_hook_table.names()), list(_hook_table.runtime_flags())


def _trace(command: list[str], program: str, env: dict[str, str], mode: Any, fmt: str,
           out: IO[Any], to_stdout: bool, out_name: str, core: str,
           memviz_entries: int, warnings: list[str], wait_orphans: bool,
           oom_snapshot: str | None = None) -> int:
    from ..tracing.collector import Collector
    from ..tracing.escape import escape_of
    from ..tracing.protocol import Escape
    from ..tracing.writers import make_writer
    from ..tracing.ledger import Ledger, Process, format_summary
    from ..tracing.reorder import WINDOW_MS, Reorder
    from ..tracing.runinfo import header_record, read_anchor

    names, runtime = _function_table()
    ledger = Ledger(names, runtime)
    collector = Collector(ledger)
    preload = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p]
    env["LD_PRELOAD"] = ":".join([core] + [p for p in preload if p != core])
    env["MEMHOOK_TRACE_SOCKET"] = collector.path
    env["MEMHOOK_CUDA_MODE"] = str(mode)
    child_stdout = sys.stderr.fileno() if (to_stdout and fmt != "text") else None
    anchor = read_anchor()
    t0 = time.monotonic_ns()
    started = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    relay = _SignalRelay()
    escaped = escape_of(program)  # before it runs, as a traced process checks its children
    child: subprocess.Popen | None = None
    try:
        try:
            child = launch.start(command, program, env, stdout=child_stdout)
        except launch.LaunchError as exc:
            return _fail(str(exc), exc.status)
        relay.started(child)
        if escaped is not None:  # (every later program is checked where it starts)
            collector.note_escape(child.pid, Escape(escaped[1], escaped[0], spawned=False))
        # From here on, nothing of ours may end CMD (see the module's doc).
        failures: list[str] = []
        writer: _Guarded | None = None
        reorder = None
        broke = False
        if fmt == "jsonl":  # who wrote it and its clock's anchor, for merge
            try:
                out.write(json.dumps(header_record(anchor, child.pid)) + "\n")
            except (OSError, ValueError) as exc:
                failures.append(f"the jsonl header could not be written ({exc})")
        try:
            inner = make_writer(fmt, out, ledger, t0, counter_pid=child.pid,
                                memviz_entries=memviz_entries)
            # Chrome's counters follow the ledger's arrival order (and its
            # viewers sort by time themselves); the others get time order.
            reorder = Reorder(inner) if fmt != "chrome" else None
            writer = _Guarded(reorder or inner, fmt, out_name, ledger)
            collector.writers.append(writer)  # type: ignore[arg-type]
            collector.on_orphans = _say_waiting
            status = collector.run(child, stop=relay.stopping, wait_orphans=wait_orphans)
        except Exception:  # noqa: BLE001 - CMD goes on; we say what broke
            sys.stderr.write("memhook trace: the collector failed; CMD runs on, no longer "
                             "traced:\n" + traceback.format_exc())
            failures.append("the collector failed (its traceback is above): events from "
                            "then on were not read; CMD ran on untraced")
            collector.close_listener()
            broke = True
            status = _wait(child, relay)
        if status is None:
            failures.append(relay.abandoned(child))
        elif status < 0:  # CMD's signal: its last image is the one it ended
            ended = [p for p in ledger.processes if p.pid == child.pid and p.events_sent is None]
            if ended:
                ended[-1].signal = -status
        if status is not None and collector.open and not broke:  # orphans left running
            failures += _orphans_left([i.proc for i in collector.open],
                                      relay.name() if relay.stopping()
                                      else "--no-wait-orphans")
        try:
            changes = ledger.finish()
            if changes and writer is not None:  # what processes still running held
                writer.process_ended(Process(conn_id=-1), changes)
            if writer is not None:
                writer.finish()  # (memviz writes its snapshot: its memory counts below)
            text = format_summary(ledger.summary(), str(mode), time.monotonic() - started,
                                  peak_rss())
        except Exception as exc:  # noqa: BLE001
            failures.append(f"the summary could not be made ({type(exc).__name__}: {exc})")
            text = "== memhook trace summary: (none: see below)\n"
        if oom_snapshot is not None:
            note = _write_oom_snapshot(oom_snapshot, ledger)
            if note.startswith("wrote "):
                _say(f"memhook trace: {printable(note)}\n")
            elif ledger.ooms:
                failures.append(note)
            else:
                warnings.append(note)
        if reorder is not None and writer is not None:
            writer.flush()  # all of it out, so the count below is whole
        if not to_stdout:
            gone = _output_gone(out, out_name)
            if gone:
                failures.append(gone)
        late = reorder.out_of_order if reorder is not None else 0
        if late:
            warnings.append(f"{late} events reached the collector more than {WINDOW_MS} ms "
                            f"after they happened and are written after newer events "
                            f"of other processes")
        if writer is not None and writer.failed:
            failures.append(writer.failed)
        failures = [*collector.failures, *failures]
        for problem in [*failures, *collector.warnings, *warnings]:
            text += f"warning: {printable(problem)}\n"  # (they quote the program's names)
        if writer is not None:
            writer.close(text)
            if writer.failed and writer.failed not in failures:  # (it failed in close)
                failures.append(writer.failed)
                text += f"warning: {printable(writer.failed)}\n"
            if writer.broken:
                _say("memhook trace: the output was closed early (broken pipe); "
                     "CMD ran on, traced but not written\n")
        # The terminal always gets the summary: on stderr, unless it is
        # already there inline (text to stdout, while that still worked).
        written = writer is not None and not (writer.failed or writer.broken)
        gone = None if to_stdout else _output_gone(out, out_name)  # (again, after the summary)
        if gone:
            written = False
            if gone not in failures:
                failures.append(gone)
                text += f"warning: {printable(gone)}\n"  # (not to_stdout: the terminal gets text)
        if not (written and writer is not None and writer.summary_inline and to_stdout):
            _say(text)
        if not to_stdout:
            shown = printable(out_name)
            _say(f"memhook trace: wrote the {fmt} trace to {shown}\n" if written else
                 f"memhook trace: the {fmt} trace in {shown} is incomplete or gone "
                 f"(see above)\n")
        if status is None:
            return 128 + relay.last
        return _exit_status(status, degraded=bool(failures))
    finally:
        # Never kill CMD: a ^C, a SIGTERM or our own failure may bring us
        # here while it runs; it is left to run (relay.abandoned said so).
        relay.restore()
        collector.close()


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written to, or None: asked up front, so that
    a typo is a usage error rather than a snapshot lost at the end."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return "is a directory"
    if not os.path.isdir(folder):
        return f"no such directory {folder}"
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and
                                                   not os.access(path, os.W_OK)):
        return "not writable"
    return None


def _write_oom_snapshot(path: str, ledger: Any) -> str:
    """``--oom-snapshot``: what happened, as one line ("wrote ..." when it was)."""
    from ..tracing.writers.memviz import write_oom_snapshot

    if not ledger.ooms:
        return (f"--oom-snapshot: no allocation failed for lack of memory; {path} was not "
                f"written")
    try:
        with open(path, "wb") as out:
            write_oom_snapshot(out, ledger, ledger.ooms[0])
    except OSError as exc:
        return f"--oom-snapshot: writing {path} failed ({exc.strerror or exc})"
    return f"wrote the OOM snapshot (memviz) to {path}"


def _say_waiting(procs: list[Any]) -> None:
    """CMD ended, traced processes it started run on: say why we wait."""
    shown = ", ".join(f"pid {p.pid} ({printable(p.hello.command) if p.hello else '?'})"
                      for p in procs[:3])
    more = f" and {len(procs) - 3} more" if len(procs) > 3 else ""
    _say(f"memhook trace: CMD has ended; waiting for the traced processes it left running: "
         f"{shown}{more} (^C twice, or --no-wait-orphans, stops the wait)\n")


def _orphans_left(procs: list[Any], why: str) -> list[str]:
    """The failure lines for traced processes still running at the end."""
    return [f"pid {p.pid} ({p.hello.command if p.hello else '?'}) outlived CMD and was "
            f"still running when the trace stopped waiting for it ({why}): what it records "
            f"from then on is not traced" for p in procs]


def _output_gone(out: IO[Any], name: str) -> str | None:
    """Why the file the trace is written to is no longer at ``name`` (it
    was removed, or its folder was, or another file took its name), or
    None while it is there.  What was written to an unlinked file is lost
    with its last descriptor: never report it as written."""
    try:
        mine = os.fstat(out.fileno())
    except (OSError, ValueError):
        return None  # closed by a failed writer: that failure says it
    try:
        there = os.stat(name)
    except OSError as exc:
        return (f"the output {name} was removed while the trace ran "
                f"({exc.strerror or exc}): the trace written there is gone")
    if mine.st_nlink == 0 or (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
        return (f"the output {name} was removed or replaced while the trace ran (the file "
                f"there now is another one): the trace written to it is gone")
    return None


def peak_rss() -> int:
    """This process's peak resident bytes so far: the kernel's VmHWM, the
    high-water mark of this image's memory alone.  (ru_maxrss is not: exec
    keeps the larger of it and the exec'ing image's, and a ``vfork`` child
    execs with its parent's memory - a test runner's or a shell's figure,
    not the collector's.)"""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _say(text: str) -> None:
    """To stderr, which may be gone too: then nowhere."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class _Guarded:
    """A writer whose failures stay its own: the first exception of any of
    its calls closes it (nothing more is written there; the summary and the
    other outputs go on), and :attr:`failed` says what happened.  An output
    closed by its reader (EPIPE: ``memhook trace ... | head``) is
    :attr:`broken`, not failed: the reader chose to stop."""

    def __init__(self, writer: Any, fmt: str, name: str, ledger: Any) -> None:
        self.writer = writer
        self.fmt, self.name, self.ledger = fmt, name, ledger
        self.broken = False
        self.failed: str | None = None
        self.summary_inline = writer.summary_inline

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.writer, name)

        def call(*args: Any) -> None:
            if self.broken or self.failed is not None:
                return
            try:
                method(*args)
            except BrokenPipeError:
                self.broken = True
                self._silence()
            except Exception as exc:  # noqa: BLE001 - any writer failure is the writer's
                why = (f"{exc.strerror} (errno {exc.errno})" if isinstance(exc, OSError)
                       and exc.strerror else f"{type(exc).__name__}: {exc}")
                self.failed = (f"the {self.fmt} output to {self.name} failed ({why}); nothing "
                               f"more was written there (the collector had {self.ledger.events} "
                               f"events by then; the summary counts them all)")
                self._silence()
        return call

    def _silence(self) -> None:
        """Point the stream at /dev/null: what is still buffered, and
        Python's own flush of stdout at exit, must not fail again."""
        target = _stream_of(self.writer)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, target.fileno())
            os.close(devnull)
        except (AttributeError, OSError, ValueError):
            pass


def _stream_of(writer: Any) -> Any:
    """The stream a writer (or a Reorder, which names its writer's) writes to."""
    return getattr(writer, "out", None)
