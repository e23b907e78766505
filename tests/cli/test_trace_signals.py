"""Signals reach CMD as a shell would pass them, and the trace keeps every event.

The tracer runs as the leader of a fresh process group with CMD in it, as a
job-control shell runs a foreground job; os.killpg(SIGINT) is the
terminal's ^C.  CMD (scripts/signal_target.py) allocates BEFORE buffers,
says "ready", and on the signal allocates AFTER more in its own handler.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_testing import HERE, read_jsonl

BEFORE, AFTER = 5, 7
SCRIPT = HERE / "scripts" / "signal_target.py"


def _start(tmp_path: Path, how: str, after: int = AFTER,
           **popen: object) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "trace.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "memhook", "trace", "--sim", "-f", "jsonl", "-o", str(out), "--",
         sys.executable, str(SCRIPT), how, str(BEFORE), str(after)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        **popen)  # type: ignore[call-overload]
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    line = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = proc.stdout.readline()
        if line in ("ready\n", ""):
            break
    if line != "ready\n":
        proc.kill()
        pytest.fail(f"CMD never got ready: {proc.communicate()}")
    return proc, out


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"the trace did not end: {stdout!r} {stderr!r}")
    return proc.returncode, stdout, stderr


def _counts(out: Path) -> tuple[int, int]:
    events = read_jsonl(out)
    allocs = [e for e in events if e["kind"] == "alloc" and e["function"] == "cuMemAlloc_v2"]
    frees = [e for e in events if e["kind"] == "free" and e["function"] == "cuMemFree_v2"]
    assert all(e["result"] == 0 for e in allocs + frees)
    return len(allocs), len(frees)


@pytest.mark.parametrize("how, status", [("handle", 0), ("reraise", 130)])
def test_ctrl_c_to_the_group_reaches_cmds_handler(tmp_path: Path, how: str, status: int) -> None:
    proc, out = _start(tmp_path, how)
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on ^C
    rc, stdout, stderr = _finish(proc)
    assert "handled SIGINT" in stdout, (stdout, stderr)
    assert rc == status, stderr
    assert _counts(out) == (BEFORE + AFTER, BEFORE + AFTER), stderr
    assert f"memhook trace summary: {2 * (BEFORE + AFTER)} events" in stderr
    assert "Traceback" not in stderr or how == "reraise"  # the tracer itself never complains


def test_ctrl_c_typed_on_a_terminal(tmp_path: Path) -> None:
    """The real thing: the tracer's controlling terminal is a pty and ^C is
    typed on it; the terminal sends SIGINT to its foreground group."""
    import fcntl
    import termios

    master, slave = os.openpty()

    def controlling_terminal() -> None:  # after setsid: the pty becomes ours
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        proc, out = _start(tmp_path, "handle", stdin=slave, preexec_fn=controlling_terminal)
        os.write(master, b"\x03")
        rc, stdout, stderr = _finish(proc)
    finally:
        os.close(slave)
        os.close(master)
    assert "handled SIGINT" in stdout, (stdout, stderr)
    assert rc == 0, stderr
    assert _counts(out) == (BEFORE + AFTER, BEFORE + AFTER), stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT],
                         ids=lambda s: s.name)
def test_signal_to_the_tracer_reaches_cmds_handler(tmp_path: Path, sig: signal.Signals) -> None:
    proc, out = _start(tmp_path, "handle")
    proc.send_signal(sig)  # to the tracer alone, as `kill PID` would
    rc, stdout, stderr = _finish(proc)
    assert f"handled {sig.name}" in stdout, (stdout, stderr)
    assert rc == 0, stderr
    assert _counts(out) == (BEFORE + AFTER, BEFORE + AFTER), stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_that_kills_cmd_gives_128_plus_n(tmp_path: Path, sig: signal.Signals) -> None:
    proc, out = _start(tmp_path, "default", after=0)
    proc.send_signal(sig)
    rc, stdout, stderr = _finish(proc)
    assert rc == 128 + sig, (stdout, stderr)
    assert _counts(out) == (BEFORE, BEFORE), stderr
    assert "memhook trace summary" in stderr  # the tracer ended cleanly after CMD
    assert f"events  killed by {sig.name} (left without exit())" in stderr, stderr


@pytest.mark.parametrize("inherited, seen", [(signal.SIG_DFL, "default"),
                                             (signal.SIG_IGN, "ignored")],
                         ids=["default", "ignored"])
def test_cmd_starts_with_the_sigint_disposition_we_got(inherited: signal.Handlers,
                                                       seen: str) -> None:
    """As from a shell: CMD starts with SIGINT at its default, unless
    memhook trace itself was started with it ignored (a background job of a
    script, nohup-like wrappers), which CMD then inherits."""
    code = ("import signal; h = signal.getsignal(signal.SIGINT); "
            "print('ignored' if h == signal.SIG_IGN else "
            "'default' if h is signal.default_int_handler else h)")
    proc = subprocess.run(
        [sys.executable, "-m", "memhook", "trace", "--sim", "-f", "jsonl", "-o", os.devnull,
         "--", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, check=False,
        preexec_fn=lambda: signal.signal(signal.SIGINT, inherited))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{seen}\n"


@pytest.mark.parametrize("sig, to_group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM-to-the-tracer", "ctrl-c-to-the-group"])
def test_a_second_signal_ends_the_tracer_and_leaves_cmd_running(
        tmp_path: Path, sig: signal.Signals, to_group: bool) -> None:
    """CMD ignores SIGTERM and SIGINT.  The first signal is passed on (or,
    ^C, reached CMD from the terminal) and the trace goes on; a second one
    ends the tracer (after a 1 s grace), with its summary and 128+N, and
    CMD - never killed by us - runs on.  Before: the tracer waited for CMD
    (30 s), and a SIGKILL in its `finally` would have ended CMD."""
    proc, out = _start(tmp_path, "ignore")
    cmd_pids = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
                .read_text().split()]
    assert len(cmd_pids) == 1, cmd_pids

    def send() -> None:
        if to_group:
            os.killpg(proc.pid, sig)  # the terminal's ^C
        else:
            proc.send_signal(sig)

    try:
        send()
        time.sleep(0.5)
        assert proc.poll() is None  # CMD runs on, so does the trace
        t0 = time.monotonic()
        send()
        rc = proc.wait(timeout=60)  # (its pipes stay open: CMD holds them too)
        took = time.monotonic() - t0
        assert took < 25, took  # not CMD's 30 s: the grace is 1 s (25x on a quiet box)
        os.kill(cmd_pids[0], 0)  # still there
    finally:
        for pid in cmd_pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert rc == 128 + sig, stderr
    assert (f"a second signal ({sig.name}) stopped the trace before CMD ended: CMD "
            f"(pid {cmd_pids[0]}) was left running") in stderr
    assert "memhook trace summary" in stderr
    assert _counts(out) == (BEFORE, BEFORE), stderr  # what came before is all there
