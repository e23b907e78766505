"""The collector of ``memhook trace``: one listening socket, one trace area
per traced process image, everything in one thread with :mod:`selectors`.

A traced process image connects once: its HELLO (see
:mod:`memhook.tracing.protocol`) carries, as ``SCM_RIGHTS``, the memfd of its
trace area (:mod:`memhook.tracing.area`), which the hooks write every event
into.  The collector reads it every poll, in batches (at most 4,096 events
an area at a time), handing events to the
:class:`~memhook.tracing.ledger.Ledger` and then to the writers; it keeps no
events.  It learns that a process is gone from its pidfd, or that an image
is over when the same process says HELLO again (exec), and then reads the
area to its end before it closes it: events recorded just before
``_exit``, a SIGKILL, a crash or an exec are in the area, not in the
process, so they are all read.

A process is who the kernel says it is (:mod:`memhook.tracing.peers`): its
kernel pid (``SO_PEERCRED``, this namespace's number), a pidfd taken from
the connection, and its pids in every PID namespace.  A HELLO whose pid is
not its sender in any of them is refused with a warning naming both; an
image is known, exec'd and shown by its kernel pid - the outputs' ``pid``
is the one a user here can act on, and a process in a PID namespace of
its own has its own number beside it in the "process started" line and
the summary (its events' tids stay as it numbers them).

Nothing a traced process sends can end the trace: a malformed or hostile
HELLO or area is refused, a failure while reading one area closes that
area alone (what it held unread is lost, and said), and each of these is
recorded in :attr:`Collector.failures`, which makes ``memhook trace`` exit
nonzero once CMD ends (:mod:`memhook.cli.trace`).
"""

from __future__ import annotations

import array
import dataclasses
import gc
import itertools
import os
import resource
import select
import selectors
import socket
import subprocess
import time
from collections.abc import Callable

from . import protocol
from .area import SEG_EVENTS, AreaTruncated, TraceArea
from .writers.base import Writer
from .ledger import Ledger, Process
from .modules import parse_modules
from .peers import Peer, identify, pidfd_ended, pidfd_pid
from .sockdir import SocketFolder

__all__ = ["Collector"]


def _machine_ns_per_tick() -> float | None:
    """The TSC's rate as this process measures it (the core's, loaded here
    with the library): every traced process reads the same TSC."""
    from .._binding.core import lib  # (the collector's only use of the core)

    rate = float(lib.memhook_clock_ns_per_tick())
    return rate if rate > 0 else None

_SUN_PATH_MAX = 107
_POLL_S = 0.02
_BATCH = 4096  # events an area a read: the most the collector holds at once
_ESCAPES_SHOWN = 32  # programs that escaped the trace named one by one; the rest counted


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
        # (Locked while this trace lives: the next trace removes it if a
        # kill -9 left it behind; see memhook.tracing.sockdir.)
        self._folder = SocketFolder()
        if len(os.fsencode(self._folder.socket_path)) > _SUN_PATH_MAX:  # a long TMPDIR
            self._folder.close()
            self._folder = SocketFolder("/tmp")
        self.folder = self._folder.path
        self.path = self._folder.socket_path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        self.listener.bind(self.path)
        self.listener.listen(4096)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.pending: dict[socket.socket, Peer] = {}  # accepted, HELLO not read yet
        self.images: list[_Image] = []
        # Processes announced by EXPECT (kernel pid -> its pidfd): waited
        # for until one of their images says HELLO or they end.
        self.expected: dict[int, int] = {}
        self.failures: list[str] = []
        """What the trace lost or refused (events not traced): memhook
        trace then exits nonzero after CMD (unless CMD's own status is)."""
        self.warnings: list[str] = []
        """What else the summary should say (no event lost)."""
        self._escapes_shown = 0
        self._escapes_unshown = 0
        self.on_orphans: Callable[[list[Process]], None] | None = None
        """Called once when the run starts waiting for processes that
        outlived the child (those still running, read up to now)."""
        self._accepts = itertools.count(1)  # orders connections: see Peer.accepted
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
            except OSError:  # EMFILE and the like: the connection waits in the queue
                return
            conn.setblocking(False)
            # Now, while it is likely still there to be asked about.
            peer = identify(conn)
            peer.accepted = next(self._accepts)
            self.pending[conn] = peer
            self.selector.register(conn, selectors.EVENT_READ)
            self._hello(conn)

    def _drop(self, conn: socket.socket) -> Peer | None:
        peer = self.pending.pop(conn, None)
        self.selector.unregister(conn)
        conn.close()
        return peer

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
        peer = self._drop(conn)  # one message a connection
        held = list(fds)
        try:
            if data and peer is not None:
                self._message(peer, data, held)
        except Exception as exc:  # noqa: BLE001 - a message cannot end the trace
            assert peer is not None
            self._refuse(peer, f"the collector failed reading it ({type(exc).__name__}: "
                               f"{exc})")
        finally:
            for fd in held:  # what was not taken
                os.close(fd)
            if peer is not None:
                peer.close()

    def _refuse(self, peer: Peer, what: str, command: str = "") -> None:
        who = f"pid {peer.pid} ({command})" if command else f"pid {peer.pid}"
        self.failures.append(f"{who} sent a HELLO that is refused: {what}; the events of "
                             f"that trace area are not traced")

    def _message(self, peer: Peer, data: bytes, fds: list[int]) -> None:
        """The one message of ``peer``'s connection; what it takes of ``fds``
        (and ``peer.pidfd``) it removes from them."""
        try:
            kind, _ = protocol.parse_header(data)
            if kind == protocol.NESTED and not fds:
                self.warnings.append(
                    f"pid {peer.pid} runs a nested `memhook trace`: the events of the "
                    f"command it traces go to that trace, not to this one")
                return
            if kind == protocol.ESCAPE and not fds:
                self.note_escape(peer.pid, protocol.parse_escape(data))
                return
            if kind == protocol.EXPECT and len(fds) == 1:
                self._expect(fds.pop())
                return
            if kind != protocol.HELLO or len(fds) != 1:
                raise protocol.ProtocolError(f"expected HELLO with one descriptor, got type "
                                             f"{kind} with {len(fds)}")
            hello = protocol.parse_hello(data)
        except protocol.ProtocolError as exc:
            self._refuse(peer, str(exc))
            return
        if peer.pid <= 0:
            self._refuse(peer, f"it claims pid {hello.pid}, and the kernel names no process "
                               f"of this PID namespace as its sender", hello.command)
            return
        if peer.claims(hello.pid) is False:
            assert peer.nspids is not None
            self._refuse(peer, f"it claims pid {hello.pid}, but its sender is pid {peer.pid} "
                               f"(in its PID namespaces: "
                               f"{', '.join(str(n) for n in peer.nspids)})", hello.command)
            return
        try:
            area = TraceArea(fds.pop())
        except (protocol.ProtocolError, OSError, ValueError) as exc:
            self._refuse(peer, str(exc), hello.command)
            return
        if TraceArea.machine_ns_per_tick is None:  # (the first area: its raw stamps may come soon)
            TraceArea.machine_ns_per_tick = _machine_ns_per_tick()
        self._unexpect(peer.pid)  # (announced, and here now)
        # The same process, another image: the older one exec'd.  Older by
        # connect order, not by HELLO order: an image connects at its load
        # and says HELLO after its install, and the connection of the image
        # it then exec'd may be accepted and read between the two.
        same = [image for image in self.images if image.proc.pid == peer.pid]
        superseded = any(image.proc.conn_id > peer.accepted for image in same)
        for image in same:
            if image.proc.conn_id < peer.accepted:
                try:
                    self._finish(image)
                except Exception as exc:  # noqa: BLE001 - that area's failure alone
                    self._fail(image, exc)
        pidfd, peer.pidfd = peer.pidfd, None
        # No pidfd: the process had ended, or this kernel has no pidfds
        # (gVisor, < 5.3): then it is polled while it is alive.
        watched = pidfd is None and _alive(peer.pid)
        proc = Process(conn_id=peer.accepted, hello=hello, kernel_pid=peer.pid)
        if hello.forked:
            # A fork child has its parent's mappings: its objects are named
            # from the parent's records too (its own, written at once, add
            # to them; a child gone before they are read still has names).
            parent = self._parent(peer, hello)
            if parent is not None:
                proc.modules.inherit(parent.proc.modules)
        image = _Image(proc, area, pidfd, watched)
        proc.modules.pid = peer.pid
        proc.modules.alive = lambda: not self._gone(image)
        self.images.append(image)
        if pidfd is not None:
            self.selector.register(pidfd, selectors.EVENT_READ, image)
        self.ledger.process_started(proc)
        for w in self.writers:
            w.process_started(proc)
        if superseded:  # it exec'd already: read it to its end
            try:
                self._finish(image)
            except Exception as exc:  # noqa: BLE001 - that area's failure alone
                self._fail(image, exc)

    def _expect(self, pidfd: int) -> None:
        """An EXPECT: the process of ``pidfd`` is to say HELLO from an
        image still to come (a posix_spawn or vfork child: trace_proto.h).
        Waited for like a connection that has said nothing, until then or
        its end.  Nothing to wait for when it has ended already, or
        already said HELLO (its image is read and waited for)."""
        pid = pidfd_pid(pidfd)
        if pid <= 0 or pid in self.expected or any(i.proc.pid == pid for i in self.images):
            os.close(pidfd)
            return
        self.expected[pid] = pidfd
        self.selector.register(pidfd, selectors.EVENT_READ, pid)

    def _unexpect(self, pid: int) -> None:
        pidfd = self.expected.pop(pid, None)
        if pidfd is not None:
            self.selector.unregister(pidfd)
            os.close(pidfd)

    def note_escape(self, pid: int, escape: protocol.Escape) -> None:
        """Process ``pid`` starts a program the trace cannot follow into
        (its ESCAPE message; or CMD itself, by :mod:`memhook.cli.trace`)."""
        how = "spawned" if escape.spawned else "exec'd"
        if self._escapes_shown < _ESCAPES_SHOWN:
            self._escapes_shown += 1
            self.failures.append(f"pid {pid} {how} {escape.path}, which is not traced: "
                                 f"{escape.reason}")
        else:  # a loop of them: one line in the end (_run) counts the rest
            self._escapes_unshown += 1

    def _parent(self, peer: Peer, hello: protocol.Hello) -> _Image | None:
        """The image a fork child was forked from, by kernel pid.

        ``hello.ppid`` is its parent as the child numbers it, in its own PID
        namespace: the kernel pid only when the child is in this one.  The
        kernel's own word is ``peer.ppid`` (its parent when the connection
        was accepted), believed when that image is the parent the child
        names - its own pid there is ``hello.ppid``, or the parent is
        outside the child's namespace (``hello.ppid`` 0) - and not a
        reaper that took the child over after the parent ended."""
        if peer.ppid:
            for image in reversed(self.images):
                if image.proc.pid != peer.ppid:
                    continue
                own = image.proc.hello.pid if image.proc.hello is not None else None
                if hello.ppid == 0 or own == hello.ppid:
                    return image
                break
        if peer.nspids is not None and len(peer.nspids) == 1:  # this namespace's numbers
            return next((i for i in reversed(self.images) if i.proc.pid == hello.ppid), None)
        return None

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
        # The pid becomes the kernel's (the process wrote its own, which
        # in a PID namespace of its own is not this one's number).
        resolve = image.proc.modules.resolve
        stacks = image.area.last_stacks
        python = image.area.last_python or itertools.repeat(None)
        pid = image.proc.pid
        if stacks is None:
            rows = [(*r[:8], pid, *r[9:12], resolve(r[12], r[3]), None, p)
                    for r, p in zip(ev.tolist(), python)]
        else:
            rows = [(*r[:8], pid, *r[9:12], resolve(r[12], r[3]),
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
        self._report(image)
        self._close(image)

    def _report(self, image: _Image) -> None:
        """What the image's area says it could not hold."""
        proc, area = image.proc, image.area
        pid = proc.pid
        corrupt = area.header_problem()
        if corrupt is not None:
            # Its counters (and its exit flag) are whatever was written over
            # them: say what was read, never a loss the area cannot vouch for.
            self.failures.append(
                f"pid {pid}: the area's header is corrupt: the program wrote over its "
                f"own trace area ({corrupt}); {area.taken} events were read from it, and how "
                f"many more it recorded and lost is unknown")
            return
        if area.exited:
            proc.events_sent = area.taken
        if area.lost:
            self.failures.append(
                f"pid {pid} LOST {area.lost} events: its trace area "
                f"({area.buffer_mib:.0f} MiB) was full because the collector fell behind; "
                f"raise MEMHOOK_TRACE_BUFFER_MB (4-4096)")
        if area.lost_owned:
            self.failures.append(
                f"pid {pid} LOST {area.lost_owned} events: more of its threads were live at "
                f"once than its trace area has segments ({area.nseg}: each thread that "
                f"records holds one, {SEG_EVENTS} events); raise MEMHOOK_TRACE_BUFFER_MB "
                f"(4-4096; each MiB is 64 segments)")
        if area.lost_forked:
            self.failures.append(
                f"pid {pid}: {area.lost_forked} events of its children made by a raw fork or "
                f"clone system call were not traced (no fork handler runs there, so such "
                f"a child has no trace area of its own)")
        if area.give_back_failed:
            self.warnings.append(
                f"pid {pid}: its trace area could not be given back to it "
                f"({area.give_back_failed}), so it only filled")
        if area.stacks_lost:
            self.warnings.append(
                f"pid {pid}: {area.stacks_lost} allocations have no --stacks frames: "
                f"the area's stack records (64 MiB) were used up")
        if area.python_lost:
            self.warnings.append(
                f"pid {pid}: {area.python_lost} allocations have no --python frames: "
                f"the area's Python records (64 MiB) were used up")
        if area.codes_lost:
            self.warnings.append(
                f"pid {pid}: {area.codes_lost} Python code objects found no room for "
                f"their names (64 MiB); their frames are named '?'")
        if area.modules_lost:
            self.warnings.append(
                f"pid {pid}: {area.modules_lost} module records found no room (1 MiB); "
                f"callers in those objects are named '?'")

    def _close(self, image: _Image) -> None:
        if image not in self.images:
            return
        self.images.remove(image)
        if image.pidfd is not None:
            self.selector.unregister(image.pidfd)
            os.close(image.pidfd)
        image.area.close()
        image.proc.modules.pid = 0
        changes = self.ledger.process_ended(image.proc)
        for w in self.writers:
            w.process_ended(image.proc, changes)

    def _fail(self, image: _Image, exc: Exception) -> None:
        """Reading the image's area failed: close it alone, and say so."""
        proc = image.proc
        if isinstance(exc, AreaTruncated):
            why = str(exc)
        else:
            why = f"the collector failed reading its trace area ({type(exc).__name__}: {exc})"
        self.failures.append(f"pid {proc.pid} ({proc.hello.command if proc.hello else '?'}): "
                             f"{why}; {proc.events} of its events were read, the rest of its "
                             f"trace area is lost")
        try:
            self._close(image)
        except Exception as again:  # noqa: BLE001 - the trace goes on without it
            self.failures.append(f"pid {proc.pid}: closing its trace area failed too "
                                 f"({type(again).__name__}: {again})")
            if image in self.images:
                self.images.remove(image)

    def _gone(self, image: _Image) -> bool:
        if image.pidfd is None:
            return not (image.watched and _alive(image.proc.pid))
        return pidfd_ended(image.pidfd)

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
            elif isinstance(key.data, int):  # an announced process ended, no HELLO
                # (a HELLO it sent before is still in the listen queue: the
                # run's last look takes it)
                self._unexpect(key.data)
            busy = True
        for image in list(self.images):
            try:
                if self._gone(image):
                    self._finish(image)
                else:
                    n = self._deliver(image, final=False)
                    busy = busy or n > 0
                    self._behind = self._behind or n >= _BATCH  # more is waiting: no pause
            except Exception as exc:  # noqa: BLE001 - one area's failure is that area's
                self._fail(image, exc)
        for w in self.writers:  # held events go out even when none arrive
            w.tick()
        return busy

    # ------------------------------------------------------------------ run

    def run(self, child: subprocess.Popen, grace_s: float = 1.0,
            stop: Callable[[], bool] | None = None, wait_orphans: bool = True) -> int | None:
        """Collect until ``child`` has exited and every process image it
        made is read to its end, or until ``stop()`` says so.  A process
        that outlives ``child`` (an orphan: a background job, a daemon) is
        waited for, as ``strace -f`` waits for every descendant; with
        ``wait_orphans`` False, only ``grace_s`` after the child's exit.
        What is still running then is in :attr:`open`, read up to now.
        Returns the child's return code (None: stopped while it ran)."""
        _more_descriptors()
        # Every batch makes ~1000s of tuples and no cycles: the cyclic GC
        # would only rescan them.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(child, grace_s, stop or (lambda: False), wait_orphans)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _run(self, child: subprocess.Popen, grace_s: float,
             stop: Callable[[], bool], wait_orphans: bool) -> int | None:
        status: int | None = None
        deadline = 0.0
        while True:
            self.poll(_POLL_S)
            if status is None:
                status = child.poll()
                if status is not None:
                    deadline = time.monotonic() + grace_s
                elif stop():
                    break
                continue
            if not self.images and not self.pending and not self.expected:
                if not self.poll(0):  # a last look for connections not yet accepted
                    break
            elif stop() or (not wait_orphans and time.monotonic() > deadline):
                break
            elif deadline and time.monotonic() > deadline and self.images:
                deadline = 0.0  # (once)
                if self.on_orphans is not None:
                    self.on_orphans([i.proc for i in self.images])
        if self._escapes_unshown:
            self.failures.append(f"{self._escapes_unshown} more programs were started that "
                                 f"are not traced (not named: only the first "
                                 f"{_ESCAPES_SHOWN} are)")
        for image in list(self.images):  # still running: what they wrote so far
            try:
                while self._deliver(image, final=False):
                    pass
                self._report(image)
            except Exception as exc:  # noqa: BLE001
                self._fail(image, exc)
        return status

    def close_listener(self) -> None:
        """Take no more connections (the collector failed): a process that
        starts from now on finds no collector and runs untraced, rather
        than retrying a hand-over nobody takes."""
        try:
            self.selector.unregister(self.listener)
        except (KeyError, ValueError):
            pass
        self.listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def close(self) -> None:
        for conn in list(self.pending):
            peer = self._drop(conn)
            if peer is not None:
                peer.close()
        for pid in list(self.expected):
            self._unexpect(pid)
        for image in self.images:
            if image.pidfd is not None:
                os.close(image.pidfd)
            image.area.close()
        self.images.clear()
        self.selector.close()
        self.listener.close()  # (again: harmless)
        self._folder.close()


def _more_descriptors() -> None:
    """Each live process image holds two descriptors here (its area's memfd,
    read with pread, and its pidfd): raise the soft limit to the hard one,
    so a tree of a thousand processes is not refused for want of them.
    Called once CMD runs, so CMD keeps the limits it was given."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (OSError, ValueError):
        pass


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
