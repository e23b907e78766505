"""`memhook trace`'s socket folders (memhook/tracing/sockdir.py): one that a
`kill -9` of memhook left behind is removed by the next trace; a live
trace's folder, another user's, a link, and one made without a lock are
left alone.

Before: every `kill -9` left a memhook-trace-* folder (and its socket) in
the temporary directory for good."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from cli_testing import memhook

from memhook.tracing.sockdir import remove_stale


def _folders(tmp: Path) -> set[Path]:
    return set(tmp.glob("memhook-trace-*"))


def _wait_for(check, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _start(tmp: Path, env: dict[str, str], release: Path) -> tuple[subprocess.Popen, Path]:
    """A trace whose CMD waits for ``release`` to exist; (memhook, CMD's pid file)."""
    pidfile = tmp.parent / f"cmd-{release.name}.pid"
    script = f'echo $$ > "{pidfile}"; while [ ! -e "{release}" ]; do sleep 0.05; done'
    proc = subprocess.Popen([sys.executable, "-m", "memhook", "trace", "-f", "jsonl", "-o",
                             os.devnull, "--", "sh", "-c", script], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), "CMD to start")
    return proc, pidfile


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp)}


def test_a_killed_traces_folder_is_removed_by_the_next_trace(tmp_path: Path) -> None:
    tmp = tmp_path / "t"
    tmp.mkdir()
    release = tmp_path / "release-killed"
    proc, pidfile = _start(tmp, _env(tmp), release)
    (left,) = _folders(tmp)
    assert (left / "sock").exists()
    proc.send_signal(signal.SIGKILL)  # memhook itself; CMD runs on, untraced
    proc.wait(timeout=60)
    proc.stderr.close()  # type: ignore[union-attr]
    release.touch()  # CMD ends
    cmd_pid = int(pidfile.read_text())
    _wait_for(lambda: not Path(f"/proc/{cmd_pid}").exists() or
              Path(f"/proc/{cmd_pid}/stat").read_text().split()[2] == "Z", "CMD to end")
    assert _folders(tmp) == {left}  # what kill -9 leaves
    again = memhook("trace", "-f", "jsonl", "-o", os.devnull, "--", "true", env=_env(tmp))
    assert again.returncode == 0, again.stderr
    assert _folders(tmp) == set(), list(tmp.iterdir())


def test_a_live_traces_folder_is_left_alone(tmp_path: Path) -> None:
    tmp = tmp_path / "t"
    tmp.mkdir()
    release = tmp_path / "release-live"
    proc, _ = _start(tmp, _env(tmp), release)
    (live,) = _folders(tmp)
    again = memhook("trace", "-f", "jsonl", "-o", os.devnull, "--", "true", env=_env(tmp))
    assert again.returncode == 0, again.stderr
    assert _folders(tmp) == {live} and (live / "sock").exists()
    release.touch()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert _folders(tmp) == set()


def _dead(tmp_path: Path, name: str, sock: bool = True) -> Path:
    """A folder as a trace makes it (a lock file, a bound socket), its lock free."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "lock").touch()
    if sock:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.bind(str(folder / "sock"))
    return folder


def test_only_this_users_dead_folders_of_the_locked_kind_go(tmp_path: Path) -> None:
    """remove_stale on its own: a folder without a lock file (a memhook
    from before the scheme), a link to a dead folder, a folder whose trace
    died before binding (kept for an hour), and, as root, one owned by
    another user."""
    gone = _dead(tmp_path, "memhook-trace-dead")
    unlocked = tmp_path / "memhook-trace-old"
    unlocked.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.bind(str(unlocked / "sock"))
    link = tmp_path / "memhook-trace-link"
    link.symlink_to(_dead(tmp_path, "elsewhere"))
    young = _dead(tmp_path, "memhook-trace-young", sock=False)
    kept = [unlocked, link, young, tmp_path / "elsewhere" / "sock"]
    if os.getuid() == 0:
        other = _dead(tmp_path, "memhook-trace-other")
        os.chown(other, 12345, 12345)
        kept.append(other)
    assert remove_stale(str(tmp_path)) == [str(gone)]
    assert not gone.exists()
    assert all(os.path.lexists(p) for p in kept), list(tmp_path.iterdir())
    # An hour later, the folder that never had a socket goes too.
    assert remove_stale(str(tmp_path), now=time.time() + 7200) == [str(young)]


def test_a_held_lock_keeps_a_folder(tmp_path: Path) -> None:
    """A trace that holds its lock is alive, whatever else its folder shows."""
    folder = _dead(tmp_path, "memhook-trace-held")
    fd = os.open(folder / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert remove_stale(str(tmp_path)) == [] and (folder / "sock").exists()
    finally:
        os.close(fd)
    assert remove_stale(str(tmp_path)) == [str(folder)]
