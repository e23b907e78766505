"""A process's images are ordered by when they connected, not by when the
collector read their HELLOs.

An image connects at its load and says HELLO after its install; the
collector may accept that connection in between, then accept and read the
HELLO of the image it exec'd before it reads the first one's.  Taking the
HELLO read last for the newest image, the collector finished the running
program's image at once (its area read while still empty, then closed)
and read the exec'd-from one instead: every later event of the program
was lost, and the summary showed it "exec'd" with 0 events.  Seen with
four `sh -c 'exec prog'` started at once (2 runs in 20 lost one program's
20 events).  Here the two connections are made by hand, in that order.
"""

from __future__ import annotations

import array
import os
import socket
from collections.abc import Callable

from test_trace_area import _make

from memhook.tracing import protocol
from memhook.tracing.collector import Collector
from memhook.tracing.ledger import Ledger


def _hello(start_ns: int, name: str) -> bytes:
    exe, cmdline = os.fsencode(f"/bin/{name}"), os.fsencode(name) + b"\0"
    body = protocol.HELLO_FIXED.pack(os.getpid(), os.getppid(), 0, 0, 0, 0, start_ns,
                                     len(exe), len(cmdline), 0, 0)
    return (protocol.HEADER.pack(protocol.MAGIC, protocol.VERSION, protocol.HELLO, 0, 0)
            + body + exe + cmdline)


def _send(sock: socket.socket, start_ns: int, name: str) -> None:
    fd, _ = _make()
    try:
        sock.sendmsg([_hello(start_ns, name)],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    finally:
        os.close(fd)


def _poll_until(collector: Collector, done: Callable[[], bool]) -> None:
    for _ in range(500):  # 500 polls of up to 20 ms: far more than two messages need
        collector.poll(0.02)
        if done():
            return
    raise AssertionError("the collector never read the HELLO")


def test_the_image_that_connected_last_is_the_running_one() -> None:
    collector = Collector(Ledger([], []))
    shell = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    program = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        shell.connect(collector.path)  # the shell's load
        _poll_until(collector, lambda: len(collector.pending) == 1)  # accepted, no HELLO yet
        program.connect(collector.path)  # the program it exec'd, loaded
        _send(program, 2_000, "program")
        _poll_until(collector, lambda: len(collector.images) == 1)
        _send(shell, 1_000, "shell")  # the shell's HELLO, read last
        _poll_until(collector, lambda: not collector.pending)
        running = [image.proc.hello.argv for image in collector.images if image.proc.hello]
        assert running == [["program"]]  # still read; the shell's image is over
        by_name = {p.hello.argv[0]: p for p in collector.ledger.processes if p.hello}
        assert by_name["shell"].ended and by_name["shell"].execed
        assert not by_name["program"].ended and not by_name["program"].execed
    finally:
        shell.close()
        program.close()
        collector.close()
