"""The collector of ``memhook trace``: one listening socket, one trace area
per traced process image, everything in one thread with :mod:`selectors`.

A traced process image connects once: its HELLO (see
:mod:`memhook.cli.protocol`) carries, as ``SCM_RIGHTS``, the memfd of its
trace area (:mod:`memhook.cli.area`), which the hooks write every event
into.  The collector maps it and reads it every poll, in batches (at most
4,096 events an area at a time), handing events to the
:class:`~memhook.cli.ledger.Ledger` and then to the writers; it keeps no
events.  It learns that a process is gone from its pidfd (``pidfd_open``),
or that an image is over when the same pid says HELLO again (exec), and
then reads the area to its end before it closes it: events recorded just
before ``_exit``, a SIGKILL, a crash or an exec are in the area, not in
the process, so they are all read.
"""

from __future__ import annotations

import array
import dataclasses
import gc
import itertools
import os
import select
import selectors
import shutil
import socket
import subprocess
import tempfile
import time

from . import protocol
from .area import TraceArea
from .modules import parse_modules
from .formats import Writer
from .ledger import Ledger, Process

__all__ = ["Collector"]

_SUN_PATH_MAX = 107
_POLL_S = 0.02
_BATCH = 4096  # events an area a read: the most the collector holds at once


@dataclasses.dataclass(eq=False)
class _Image:
    """A traced process image the collector is reading."""

    proc: Process
    area: TraceArea
    pidfd: int | None  # None: gone at HELLO, or no pidfd_open here (see _alive)
    watched: bool = False  # no pidfd: the process was alive at HELLO, poll it


class Collector:
    """Listens on a fresh socket path (:attr:`path`) in a private folder."""

    def __init__(self, ledger: Ledger, writers: list[Writer] | None = None) -> None:
        self.ledger = ledger
        self.writers: list[Writer] = writers or []
        self.folder = tempfile.mkdtemp(prefix="memhook-trace-")
        self.path = os.path.join(self.folder, "sock")
        if len(os.fsencode(self.path)) > _SUN_PATH_MAX:  # a long TMPDIR
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = tempfile.mkdtemp(prefix="memhook-trace-", dir="/tmp")
            self.path = os.path.join(self.folder, "sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        self.listener.bind(self.path)
        self.listener.listen(4096)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.pending: set[socket.socket] = set()  # accepted, HELLO not read yet
        self.images: list[_Image] = []
        self.errors: list[str] = []
        self._next_id = 0
        self._behind = False

    @property
    def open(self) -> list[_Image]:
        """Process images still being read (and connections not yet said HELLO)."""
        return self.images

    # ----------------------------------------------------------- connections

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            self.pending.add(conn)
            self.selector.register(conn, selectors.EVENT_READ)
            self._hello(conn)

    def _drop(self, conn: socket.socket) -> None:
        self.pending.discard(conn)
        self.selector.unregister(conn)
        conn.close()

    def _hello(self, conn: socket.socket) -> None:
        fds = array.array("i")
        try:
            data, anc, _, _ = conn.recvmsg(protocol.MAX_MESSAGE, socket.CMSG_SPACE(4 * 4))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, anc = b"", []
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
        self._drop(conn)  # one message a connection
        if not data:
            for fd in fds:
                os.close(fd)
            return
        try:
            kind, _ = protocol.parse_header(data)
            if kind != protocol.HELLO or len(fds) != 1:
                raise protocol.ProtocolError(f"expected HELLO with one descriptor, got type "
                                             f"{kind} with {len(fds)}")
            hello = protocol.parse_hello(data)
            area = TraceArea(fds.pop())
        except protocol.ProtocolError as exc:
            for fd in fds:
                os.close(fd)
            self.errors.append(f"a traced process's HELLO: {exc}; not traced")
            return
        for image in list(self.images):
            if image.proc.pid == hello.pid:  # the same pid, a new image: it exec'd
                self._finish(image)
        watched = False
        try:
            pidfd: int | None = os.pidfd_open(hello.pid)
        except ProcessLookupError:
            pidfd = None
        except (OSError, AttributeError):  # ENOSYS (gVisor, kernels < 5.3), old Python
            pidfd, watched = None, _alive(hello.pid)
        proc = Process(conn_id=self._next_id, hello=hello)
        proc.modules.pid = hello.pid
        if hello.forked:
            # A fork child has its parent's mappings: its objects are named
            # from the parent's records too (its own, written at once, add
            # to them; a child gone before they are read still has names).
            parent = next((i for i in reversed(self.images) if i.proc.pid == hello.ppid), None)
            if parent is not None:
                proc.modules.inherit(parent.proc.modules)
        self._next_id += 1
        image = _Image(proc, area, pidfd, watched)
        self.images.append(image)
        if pidfd is not None:
            self.selector.register(pidfd, selectors.EVENT_READ, image)
        self.ledger.process_started(proc)
        for w in self.writers:
            w.process_started(proc)

    # ---------------------------------------------------------------- areas

    def _deliver(self, image: _Image, final: bool) -> int:
        image.proc.modules.batch += 1
        ev = image.area.read(final=final, limit=_BATCH)
        # Module records after the events: the process publishes an object's
        # record before any event it can name (dlopen's wrapper writes it
        # before dlopen returns), so every event just read has its record
        # published by now; read the other way round, an object dlopened
        # between the two reads would name its first events "?".
        records = image.area.read_modules()
        if records:
            image.proc.modules.add(parse_modules(records)[0])
        if len(ev) == 0:
            return 0
        # Rows leave here self-describing (a Reorder merges processes):
        # the caller address becomes a Caller, a 14th item holds the
        # --stacks frames (Callers, innermost first) or None, a 15th the
        # --python frames (a PyStack) or None.
        resolve = image.proc.modules.resolve
        stacks = image.area.last_stacks
        python = image.area.last_python or itertools.repeat(None)
        if stacks is None:
            rows = [(*r[:12], resolve(r[12], r[3]), None, p)
                    for r, p in zip(ev.tolist(), python)]
        else:
            rows = [(*r[:12], resolve(r[12], r[3]),
                     tuple(resolve(a, r[3]) for a in s) if s else None, p)
                    for r, s, p in zip(ev.tolist(), stacks, python)]
        changes = self.ledger.add(image.proc, rows)
        for w in self.writers:
            w.events(image.proc, rows, changes)
        return len(rows)

    def _finish(self, image: _Image) -> None:
        """The image is over (its process gone, or exec'd): read it all, close it."""
        image.proc.modules.pid = 0  # /proc/PID/maps is no longer this image's
        while self._deliver(image, final=True):
            pass
        self.images.remove(image)
        if image.pidfd is not None:
            self.selector.unregister(image.pidfd)
            os.close(image.pidfd)
        proc, area = image.proc, image.area
        if area.exited:
            proc.events_sent = area.taken
        if area.lost:
            self.errors.append(
                f"pid {proc.pid} LOST {area.lost} events: its trace area "
                f"({area.buffer_mib:.0f} MiB) was full because the collector fell behind; "
                f"raise MEMHOOK_TRACE_BUFFER_MB (4-4096)")
        if area.stacks_lost:
            self.errors.append(
                f"pid {proc.pid}: {area.stacks_lost} allocations have no --stacks frames: "
                f"the area's stack records (64 MiB) were used up")
        if area.python_lost:
            self.errors.append(
                f"pid {proc.pid}: {area.python_lost} allocations have no --python frames: "
                f"the area's Python records (64 MiB) were used up")
        if area.codes_lost:
            self.errors.append(
                f"pid {proc.pid}: {area.codes_lost} Python code objects found no room for "
                f"their names (64 MiB); their frames are named '?'")
        if area.modules_lost:
            self.errors.append(
                f"pid {proc.pid}: {area.modules_lost} module records found no room (1 MiB); "
                f"callers in those objects are named '?'")
        area.close()
        changes = self.ledger.process_ended(proc)
        for w in self.writers:
            w.process_ended(proc, changes)

    def _gone(self, image: _Image) -> bool:
        if image.pidfd is None:
            return not (image.watched and _alive(image.proc.pid))
        return bool(select.select([image.pidfd], [], [], 0)[0])

    def poll(self, timeout: float) -> bool:
        """Handle what is ready within ``timeout`` s and read every area;
        True if anything came."""
        ready = self.selector.select(0 if self._behind else timeout)
        self._behind = False
        busy = False
        for key, _ in ready:
            if key.fileobj is self.listener:
                self._accept()
            elif key.fileobj in self.pending:
                self._hello(key.fileobj)  # type: ignore[arg-type]
            busy = True
        for image in list(self.images):
            if self._gone(image):
                self._finish(image)
            else:
                n = self._deliver(image, final=False)
                busy = busy or n > 0
                self._behind = self._behind or n >= _BATCH  # more is waiting: no pause
        for w in self.writers:  # held events go out even when none arrive
            w.tick()
        return busy

    # ------------------------------------------------------------------ run

    def run(self, child: subprocess.Popen, grace_s: float = 1.0) -> int:
        """Collect until ``child`` has exited and every process image it
        made is read to its end (or ``grace_s`` after the child's exit, for
        processes it left running).  Returns the child's return code."""
        # Every batch makes ~1000s of tuples and no cycles: the cyclic GC
        # would only rescan them.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(child, grace_s)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _run(self, child: subprocess.Popen, grace_s: float) -> int:
        status: int | None = None
        deadline = 0.0
        while True:
            self.poll(_POLL_S)
            if status is None:
                status = child.poll()
                if status is not None:
                    deadline = time.monotonic() + grace_s
                continue
            if not self.images and not self.pending:
                if not self.poll(0):  # a last look for connections not yet accepted
                    break
            elif time.monotonic() > deadline:
                break
        for image in self.images:  # still running: what they wrote so far
            while self._deliver(image, final=False):
                pass
        return status

    def close(self) -> None:
        for conn in list(self.pending):
            self._drop(conn)
        for image in self.images:
            if image.pidfd is not None:
                os.close(image.pidfd)
            image.area.close()
        self.images.clear()
        self.selector.close()
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Without a pidfd: the process exists and is not a zombie.  (A pid
    reused after the process ended reads as alive until the next HELLO of
    that pid, which finishes the old image first: nothing is lost.)"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2:][:1]
    return state not in (b"Z", b"X", b"")
