"""Who is on the other end of a collector connection, by the kernel's word.

A HELLO names a pid (:mod:`memhook.tracing.protocol`), but a message is only
what its sender wrote: two programs that are each pid 1 of their own PID
namespace (``unshare -fp``, containers) send the same one, and a process
can name any pid it likes.  The kernel knows better:

* ``SO_PEERCRED`` gives the pid of the process that connected, as this
  process's PID namespace numbers it (the *kernel pid*: the one a user of
  this namespace can ``kill``, find in ``ps`` or ``/proc``);
* a pidfd of that process - ``SO_PEERPIDFD`` (Linux 6.5) takes it from the
  socket itself, race-free; before that, ``pidfd_open`` of the pid, kept
  only if the process it names started before the connection was accepted
  (``/proc/PID/stat``'s start time) - tells when it ends;
* the pidfd's ``/proc/self/fdinfo`` entry lists its pid in every PID
  namespace it is in (``NSpid``, ours first, its own last): a HELLO's
  claimed pid must be one of those.

Whatever a HELLO says, a process image is known by its kernel pid.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Peer", "identify", "pidfd_ended", "pidfd_pid"]

SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)
_UCRED = struct.Struct("<iII")  # pid, uid, gid
_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@dataclass
class Peer:
    """The process that connected."""

    pid: int
    """The kernel pid (this namespace's number); 0 if it has none here."""
    uid: int
    pidfd: int | None
    """Ours to close (or hand on); None: the process had already ended."""
    nspids: tuple[int, ...] | None
    """Its pid in each PID namespace it is in (this one first, its own
    last); None where that could not be read (it had ended)."""
    ppid: int = 0
    """Its parent's kernel pid when it was identified (0: unknown, or a
    parent outside this namespace); after a reparenting, the reaper's."""
    accepted: int = 0
    """Where the collector's accepts put this connection: the listen queue
    keeps the order of connects, and a process image connects at its load,
    so a process's images are in this order, whenever their HELLOs are
    read."""

    def claims(self, pid: int) -> bool | None:
        """Whether ``pid`` is this process in one of its namespaces (None:
        cannot tell, it had ended before it could be looked up)."""
        if pid == self.pid:
            return True
        if self.nspids is None:
            return None
        return pid in self.nspids

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def pidfd_ended(pidfd: int) -> bool:
    """The process of ``pidfd`` has ended (its pidfd is readable).  With
    poll, not select: a collector reading a thousand processes holds
    descriptors far above select's FD_SETSIZE (1024)."""
    p = select.poll()
    p.register(pidfd, select.POLLIN)
    return bool(p.poll(0))


def _start_ns(pid: int) -> int | None:
    """When ``pid`` started (CLOCK_BOOTTIME ns, a clock tick's grain)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return int(fields[19]) * _TICK_NS  # field 22: starttime
    except (IndexError, ValueError):
        return None


def pidfd_pid(pidfd: int) -> int:
    """The pid, as this PID namespace numbers it, of a process known by a
    pidfd someone sent (fdinfo's ``Pid``): 0 when it has ended, is outside
    this namespace, or the kernel does not say (< 5.3)."""
    nums = _fdinfo_field(pidfd, "Pid:")
    if nums is _ABSENT or not nums or nums[0] <= 0 or pidfd_ended(pidfd):
        return 0
    return nums[0]


def _pidfd(conn: socket.socket, pid: int, accepted_ns: int) -> int | None:
    try:
        fd = conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
        if fd >= 0:
            return int(fd)
    except OSError:  # ENOPROTOOPT before Linux 6.5; ESRCH: it has ended
        pass
    if pid <= 0:
        return None
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone, or no pidfd_open here (gVisor, old kernels)
        return None
    # pidfd_open names whatever has the pid now: keep it only if that
    # process existed before the connection was accepted (not a newer one
    # that reused the pid), checked while the pidfd says it still runs.
    start = _start_ns(pid)
    if start is None or start > accepted_ns + _TICK_NS or pidfd_ended(fd):
        os.close(fd)
        return None
    return fd


def _nspids(pidfd: int | None, pid: int) -> tuple[int, ...] | None:
    if pidfd is not None:
        nums = _fdinfo_field(pidfd, "NSpid:")
        if nums is not _ABSENT:
            return nums if nums and nums[0] > 0 else None  # -1: reaped
    # A kernel whose pidfd fdinfo has no NSpid (< 5.11): the pid's status,
    # trusted if the pidfd shows the process still there after the read.
    if pidfd is None or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except OSError:
        return None
    if pidfd_ended(pidfd):
        return None
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return _numbers(line)
    return (pid,)  # no PID namespaces in this kernel


def _unreaped(pidfd: int) -> bool:
    """Whether the pidfd's process still holds its pid (running, or a
    zombie not yet reaped): then ``/proc/PID`` is still that process."""
    nums = _fdinfo_field(pidfd, "Pid:")
    if nums is not _ABSENT:
        return nums is not None and len(nums) > 0 and nums[0] > 0  # -1: reaped
    return not pidfd_ended(pidfd)  # a kernel whose fdinfo has no Pid (< 5.3)


def _ppid(pidfd: int | None, pid: int) -> int:
    """The kernel pid of ``pid``'s parent (``/proc/PID/status``, numbered as
    this namespace's ``/proc`` numbers it; 0 if unknown), trusted if the
    pidfd shows the pid still the process's after the read."""
    if pidfd is None or pid <= 0:
        return 0
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
    except OSError:
        return 0
    if not _unreaped(pidfd):
        return 0
    for line in status.splitlines():
        if line.startswith("PPid:"):
            nums = _numbers(line)
            return nums[0] if nums else 0
    return 0


_ABSENT: Any = object()  # (_fdinfo_field: the kernel writes no such line)


def _fdinfo_field(pidfd: int, key: str) -> Any:
    """The numbers of the pidfd's fdinfo line starting with ``key`` (None
    when they do not parse), or _ABSENT when there is no such line (an
    older kernel) or no fdinfo."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as f:
            info = f.read()
    except OSError:
        return _ABSENT
    for line in info.splitlines():
        if line.startswith(key):
            return _numbers(line)
    return _ABSENT


def _numbers(line: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in line.split()[1:])
    except ValueError:
        return None


def identify(conn: socket.socket) -> Peer:
    """The peer of an accepted AF_UNIX connection."""
    accepted_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    try:
        pid, uid, _ = _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                    _UCRED.size))
    except OSError:
        pid, uid = 0, -1
    pidfd = _pidfd(conn, pid, accepted_ns)
    return Peer(pid, uid, pidfd, _nspids(pidfd, pid), _ppid(pidfd, pid))
