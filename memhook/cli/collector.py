"""The collector of ``memhook trace``: one listening socket, one connection
per traced process, everything in one thread with :mod:`selectors`.

Each message is handled as it arrives (HELLO, EVENTS, BYE; see
:mod:`memhook.cli.protocol`): events go to the :class:`~memhook.cli.ledger.Ledger`
and then to the writers, one batch (at most 1024 events) at a time, so the
collector holds no more than one batch of events at once.
"""

from __future__ import annotations

import gc
import os
import selectors
import shutil
import socket
import subprocess
import tempfile
import time

from . import protocol
from .formats import Writer
from .ledger import Ledger, Process

__all__ = ["Collector"]

_SUN_PATH_MAX = 107


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
        self.listener.listen(512)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.open: dict[socket.socket, Process] = {}
        self.errors: list[str] = []
        self._next_id = 0

    # ----------------------------------------------------------- connections

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            proc = Process(conn_id=self._next_id)
            self._next_id += 1
            self.open[conn] = proc
            self.selector.register(conn, selectors.EVENT_READ)

    def _read(self, conn: socket.socket, budget: int = 64) -> None:
        """Up to ``budget`` messages from ``conn`` (then others get a turn)."""
        proc = self.open[conn]
        for _ in range(budget):
            try:
                data = conn.recv(protocol.MAX_MESSAGE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._close(conn)
                return
            try:
                self._message(proc, data)
            except protocol.ProtocolError as exc:
                self.errors.append(f"pid {proc.pid}: {exc}; connection dropped")
                self._close(conn)
                return

    def _message(self, proc: Process, data: bytes) -> None:
        kind, _ = protocol.parse_header(data)
        if kind == protocol.EVENTS:
            rows = protocol.events(data)
            changes = self.ledger.add(proc, rows)
            for w in self.writers:
                w.events(proc, rows, changes)
        elif kind == protocol.HELLO:
            proc.hello = protocol.parse_hello(data)
            self.ledger.process_started(proc)
            for w in self.writers:
                w.process_started(proc)
        elif kind == protocol.BYE:
            proc.events_sent = protocol.parse_bye(data)
        else:
            raise protocol.ProtocolError(f"unknown message type {kind}")

    def _close(self, conn: socket.socket) -> None:
        proc = self.open.pop(conn)
        self.selector.unregister(conn)
        conn.close()
        if proc.hello is None:  # connected and went away (exec'd at once, or refused)
            proc.ended = True
            return
        if proc.events_sent is not None and proc.events_sent != proc.events:
            self.errors.append(f"pid {proc.pid} sent {proc.events_sent} events but "
                               f"{proc.events} arrived")
        changes = self.ledger.process_ended(proc)
        for w in self.writers:
            w.process_ended(proc, changes)

    def poll(self, timeout: float) -> bool:
        """Handle what is ready within ``timeout`` s; True if anything was."""
        ready = self.selector.select(timeout)
        for key, _ in ready:
            if key.fileobj is self.listener:
                self._accept()
            elif key.fileobj in self.open:
                self._read(key.fileobj)  # type: ignore[arg-type]
        for w in self.writers:  # held events go out even when none arrive
            w.tick()
        return bool(ready)

    # ------------------------------------------------------------------ run

    def run(self, child: subprocess.Popen, grace_s: float = 1.0) -> int:
        """Collect until ``child`` has exited and every connection closed
        (or ``grace_s`` after the child's exit, for processes it left
        running).  Returns the child's return code."""
        # Every batch makes ~1000 tuples and no cycles: the cyclic GC would
        # only rescan them (about 10% of the collector's time).
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
            self.poll(0.05)
            if status is None:
                status = child.poll()
                if status is not None:
                    deadline = time.monotonic() + grace_s
                continue
            if not self.open:
                if not self.poll(0):  # a last look for connections not yet accepted
                    break
            elif time.monotonic() > deadline:
                break
        return status

    def close(self) -> None:
        for conn in list(self.open):
            self.selector.unregister(conn)
            conn.close()
        self.open.clear()
        self.selector.close()
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)
