"""The launcher ``memhook trace`` and ``memhook run`` share: finding CMD as
its exec would, starting it with the shell's exit statuses (127 not found,
126 not executable), relaying signals as a shell does to its foreground
command, and CMD's status as a shell shows it (128+N for a signal N).

What a launcher adds around CMD (a collector, the core in ``LD_PRELOAD``)
is its own; these rules are the same for every one of them.  The
signal rules are :class:`SignalRelay`'s."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from typing import Any

__all__ = ["DEGRADED", "add_launch_arguments", "NOT_EXECUTABLE", "NOT_FOUND", "LaunchError", "SignalRelay", "exit_status",
           "resolve", "start", "wait"]

NOT_FOUND = 127
"""CMD cannot be found (as a shell says it)."""
NOT_EXECUTABLE = 126
"""CMD was found but cannot be executed."""
DEGRADED = 70
"""sysexits' EX_SOFTWARE: CMD succeeded, what memhook did around it did not."""


class LaunchError(Exception):
    """CMD could not be started: :attr:`status` is the shell's for it."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def add_launch_arguments(p: Any) -> None:
    """The options every launcher takes (``trace`` and ``run``): the hook
    mechanisms and the simulator."""
    p.add_argument("-m", "--mode", default=None,
                   help="hook mechanisms: none, bistro, reloc or bistro,reloc "
                        "(default: $MEMHOOK_CUDA_MODE, else bistro,reloc)")
    p.add_argument("--sim", action="store_true",
                   help="run CMD on memhook's CUDA simulator (no GPU needed)")


def start(command: list[str], program: str, env: dict[str, str],
          stdout: int | None = None) -> subprocess.Popen:
    """CMD started with ``env``, ``program`` the file :func:`resolve` found;
    raises :class:`LaunchError` (127/126) when exec fails.

    restore_signals: CMD starts with SIGPIPE/SIGXFSZ at their defaults; our
    handlers are reset by exec; what we inherited as ignored stays ignored
    for CMD, as a shell would pass it."""
    try:
        return subprocess.Popen(command, executable=program, env=env, stdout=stdout,
                                close_fds=True, restore_signals=True)
    except FileNotFoundError:
        raise LaunchError(f"{command[0]}: command not found", NOT_FOUND) from None
    except PermissionError as exc:
        raise LaunchError(f"{command[0]}: cannot execute: {exc.strerror}",
                          NOT_EXECUTABLE) from None
    except OSError as exc:
        raise LaunchError(f"{command[0]}: cannot execute: {exc.strerror or exc}",
                          NOT_EXECUTABLE) from None


def resolve(command: list[str], env: dict[str, str]) -> str | None:
    """The program CMD names, as the child's exec would find it, or None."""
    prog = command[0]
    if os.sep in prog:
        return prog if os.path.exists(prog) else None
    return shutil.which(prog, path=env.get("PATH", os.defpath))


def wait(child: subprocess.Popen, relay: SignalRelay) -> int | None:
    """CMD's status, once it ends; signals go on being relayed meanwhile
    (None: a second signal said to stop waiting)."""
    while True:
        try:
            return child.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            if relay.stopping():
                return None


class SignalRelay:
    """Signals as a shell passes them to its foreground command.

    (Said for ``memhook trace``, which collects while CMD runs and may wait
    for the traced processes CMD leaves behind; ``memhook run`` only waits
    for CMD, with the same rules.)

    CMD runs in our process group, so the terminal's ^C (SIGINT to the
    foreground group) reaches CMD directly; we only note it and go on
    collecting, and CMD decides (its KeyboardInterrupt handler runs; its
    status becomes ours).  SIGTERM, SIGHUP and SIGQUIT sent to us are sent
    on to CMD (one that came before CMD existed is sent once it does), and we
    go on collecting until CMD and its processes are done.  A signal we
    inherited as ignored (``nohup``, a background job of a script) stays
    ignored, for us and for CMD.

    Once CMD has ended, while the trace waits for the traced processes CMD
    left running, SIGTERM, SIGHUP or SIGQUIT (there is no CMD to pass it
    to), or a second ^C (the first reached them in the group), stops that
    wait: they are named, and the status is CMD's, or 70 for a 0.

    A second one of these signals (any of the four) while CMD still runs
    means "stop now": it is passed on like the first, CMD gets
    :data:`GRACE_S` more to end, and then we stop collecting, write the
    summary of what we have (saying CMD was left running, with its pid) and
    exit 128+N, N the last signal.  CMD is never killed or signalled by us
    beyond what was sent to us: a CMD that ignores SIGTERM keeps running,
    as it would untraced.

    Handlers are Python-level: they run in the main thread between
    collector steps (a select() they interrupt is resumed), and exec resets
    them in CMD, so CMD starts with the defaults.  A signal sent to the
    whole group (``kill -TERM -PGID``, the terminal's ^\\) reaches CMD
    directly and once more from us; a second standard signal that arrives
    while the first is pending is merged by the kernel.
    """

    FORWARD = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    GRACE_S = 1.0

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.pending: list[int] = []
        self.old: dict[int, Any] = {}
        self.count = 0
        self.last = 0
        self.stop_at: float | None = None
        for sig in (signal.SIGINT, *self.FORWARD):
            if signal.getsignal(sig) == signal.SIG_IGN:
                continue
            self.old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.count += 1
        self.last = signum
        if self.count >= 2 and self.stop_at is None:
            self.stop_at = time.monotonic() + self.GRACE_S
        if signum == signal.SIGINT:
            return  # CMD, in our foreground group, had it from the terminal too
        if self.child is not None and self.child.returncode is not None:
            # CMD is gone: nobody to pass it on to, so it is for us (a
            # supervisor's SIGTERM): stop waiting for what CMD left running.
            self.stop_at = self.stop_at or time.monotonic()
        elif self.child is None:
            self.pending.append(signum)
        else:
            self._send(signum)

    def name(self) -> str:
        """The last signal's name."""
        return signal.Signals(self.last).name if self.last else "a signal"

    def stopping(self) -> bool:
        """A second signal came, and CMD had its grace."""
        return self.stop_at is not None and time.monotonic() >= self.stop_at

    def abandoned(self, child: subprocess.Popen) -> str:
        name = signal.Signals(self.last).name if self.last else "signal"
        return (f"a second signal ({name}) stopped the trace before CMD ended: CMD "
                f"(pid {child.pid}) was left running, untraced from then on; the trace "
                f"holds what came before")

    def _send(self, signum: int) -> None:
        assert self.child is not None
        if self.child.returncode is not None:
            return  # reaped: its pid may be another process's now
        try:
            os.kill(self.child.pid, signum)
        except OSError:  # pragma: no cover - it has just gone
            pass

    def started(self, child: subprocess.Popen) -> None:
        self.child = child
        pending, self.pending = self.pending, []
        for signum in pending:
            self._send(signum)

    def restore(self) -> None:
        for sig, handler in self.old.items():
            signal.signal(sig, handler)
        self.old.clear()


def exit_status(returncode: int, degraded: bool = False) -> int:
    """CMD's status as a shell shows it (128+N for a signal N); ``degraded``:
    70 (memhook trace's DEGRADED_STATUS) in place of a 0, for a trace that is
    incomplete (CMD's own failure always wins)."""
    status = 128 - returncode if returncode < 0 else returncode
    return DEGRADED if status == 0 and degraded else status
