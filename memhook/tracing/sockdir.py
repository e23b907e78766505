"""The private folder that holds ``memhook trace``'s socket, and the
removal of folders a killed trace left behind.

A trace normally removes its folder when it ends; a ``kill -9`` (or a
crash of the interpreter) cannot.  So each folder says whether its trace is
alive: it holds a file :data:`LOCK`, which the trace keeps ``flock``ed for
its whole life, and the kernel drops that lock when the process dies,
however it dies.  Every trace, as it starts, removes the folders of the
temporary directory that are

* named ``memhook-trace-*``, real folders (not links) owned by this user,
* holding a :data:`LOCK` that nobody holds (taken here, without waiting,
  and kept while the folder is removed, so two starting traces never
  race each other over it),
* and holding a socket: a trace takes its lock before it binds its socket,
  so a folder with a socket and a free lock is one whose trace is gone.
  A folder whose trace died between making it and binding (microseconds)
  has no socket; it goes once it is an hour old.

Folders without a :data:`LOCK` (made by a memhook before this scheme) are
never touched: nothing says whether their trace still runs.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import stat
import tempfile
import time

__all__ = ["LOCK", "PREFIX", "SocketFolder", "remove_stale"]

PREFIX = "memhook-trace-"
LOCK = "lock"
SOCKET = "sock"
_ORPHAN_AGE_S = 3600.0  # a folder whose trace died before its socket existed

_log = logging.getLogger(__name__)


class SocketFolder:
    """A fresh folder in ``base`` (default: the temporary directory) for
    one trace's socket (:attr:`socket_path`), locked as the module says
    while this object lives; :meth:`close` removes it."""

    def __init__(self, base: str | None = None) -> None:
        base = base if base is not None else tempfile.gettempdir()
        remove_stale(base)
        self.path = tempfile.mkdtemp(prefix=PREFIX, dir=base)
        self.socket_path = os.path.join(self.path, SOCKET)
        try:
            self._lock = os.open(os.path.join(self.path, LOCK),
                                 os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 0o600)
            # Blocking: a trace that is starting may hold it a moment while it
            # looks at this folder; it leaves a folder without a socket alone.
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise

    def close(self) -> None:
        """Remove the folder (the lock is held until it is gone)."""
        if self._lock < 0:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock)
        self._lock = -1


def remove_stale(base: str, now: float | None = None) -> list[str]:
    """Remove the folders of ``base`` that traces killed before they could
    (see the module's docstring); returns their paths.  Never raises: a
    folder that cannot be looked at or removed is left as it is."""
    removed: list[str] = []
    try:
        entries = [e for e in os.scandir(base) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    uid = os.getuid()
    when = time.time() if now is None else now
    for entry in entries:
        try:
            if _stale(entry.path, uid, when):
                removed.append(entry.path)
        except OSError as exc:
            _log.debug("leaving %s: %s", entry.path, exc)
    return removed


def _stale(path: str, uid: int, now: float) -> bool:
    """Remove ``path`` if it is a dead trace's folder; True if it was."""
    folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(folder)
        if st.st_uid != uid or not stat.S_ISDIR(st.st_mode):
            return False
        try:
            lock = os.open(LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        except FileNotFoundError:
            return False  # not made by this scheme: nothing says it is dead
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return False  # its trace is alive
                raise
            try:
                sock = os.stat(SOCKET, dir_fd=folder, follow_symlinks=False)
                if not stat.S_ISSOCK(sock.st_mode):
                    return False
            except FileNotFoundError:
                if now - st.st_mtime < _ORPHAN_AGE_S:
                    return False  # a trace between making it and binding, likely
            shutil.rmtree(path)
            return True
        finally:
            os.close(lock)
    finally:
        os.close(folder)
