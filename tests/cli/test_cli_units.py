"""The CLI's pieces on their own: the wire format matches trace_proto.h, the
CUDA error tables match the headers, and the ledger's accounting rules."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from memhook_testing import CSRC

from memhook._binding import cuda_errors
from memhook._values.printable import printable
from memhook.tracing import protocol
from memhook.tracing.ledger import HOST_KEY, Ledger, Process, human_size


def _defines(path: Path) -> dict[str, int]:
    out = {}
    for name, value in re.findall(r"#define (MH_TRACE_\w+) (0x[0-9A-Fa-f]+|\d+)u?",
                                  path.read_text()):
        out[name] = int(value, 0)
    return out


def test_protocol_matches_trace_proto_h() -> None:
    d = _defines(CSRC / "trace" / "trace_proto.h")
    assert d["MH_TRACE_MAGIC"] == protocol.MAGIC
    assert d["MH_TRACE_VERSION"] == protocol.VERSION
    assert (d["MH_TRACE_HELLO"], d["MH_TRACE_NESTED"]) == (protocol.HELLO, protocol.NESTED)
    assert (d["MH_TRACE_ESCAPE"], d["MH_TRACE_EXPECT"]) == (protocol.ESCAPE, protocol.EXPECT)
    assert d["MH_TRACE_HELLO_FORKED"] == protocol.HELLO_FORKED
    assert protocol.HEADER.size == 16 and protocol.HELLO_FIXED.size == 48


def test_the_receive_buffer_holds_the_longest_hello() -> None:
    """A HELLO longer than MAX_MESSAGE would arrive cut short (SEQPACKET)
    and be refused: the buffer holds the header, mh_trace_hello and the
    most string bytes trace.c sends."""
    limits = dict(re.findall(r"#define (EXE_MAX|CMDLINE_MAX|WHY_MAX) (\d+)",
                             (CSRC / "trace" / "trace.c").read_text()))
    assert sorted(limits) == ["CMDLINE_MAX", "EXE_MAX", "WHY_MAX"], limits
    longest = protocol.HEADER.size + protocol.HELLO_FIXED.size + sum(map(int, limits.values()))
    assert longest <= protocol.MAX_MESSAGE, (longest, protocol.MAX_MESSAGE)


def test_event_layout_matches_the_core() -> None:
    from memhook._binding.core import ffi

    assert ffi.sizeof("memhook_event") == protocol.EVENT_DTYPE.itemsize
    for name in protocol.EVENT_DTYPE.names:
        assert ffi.offsetof("memhook_event", name) == protocol.EVENT_DTYPE.fields[name][1]


def _enum(path: Path, start: str, prefix: str) -> dict[int, str]:
    text = path.read_text()
    body = text[text.index(start):]
    body = body[:body.index("}")]
    out: dict[int, str] = {}
    for name, value in re.findall(rf"\b({prefix}\w*)\s*=\s*(\d+)", body):
        out.setdefault(int(value), name)
    return out


def test_error_tables_match_the_headers() -> None:
    driver = _enum(CSRC / "include" / "memhook" / "cuda_abi.h", "typedef enum cudaError_enum",
                   "CUDA_")
    runtime = _enum(CSRC / "sim" / "runtime" / "include" / "cudart_sim.h", "enum cudaError {",
                    "cuda")
    assert cuda_errors.DRIVER_ERRORS == driver
    assert cuda_errors.RUNTIME_ERRORS == runtime
    assert cuda_errors.error_name(2, runtime=False) == "CUDA_ERROR_OUT_OF_MEMORY"
    assert cuda_errors.error_name(2, runtime=True) == "cudaErrorMemoryAllocation"
    assert cuda_errors.error_name(123456, runtime=False) == "error 123456"


def _row(kind, fn, address, size, *, mem_type=1, device=0, result=0, pid=1, ts=0):
    return (0, address, size, ts, kind, fn, mem_type, device, pid, pid, result, 0, None, None,
            None)  # caller, stack, python: none


@pytest.fixture()
def ledger() -> Ledger:
    names = ["cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocHost_v2", "cuModuleGetGlobal",
             "cudaMalloc"]
    return Ledger(names, [False, False, False, False, True])


def test_ledger_accounting(ledger: Ledger) -> None:
    a, b = Process(0), Process(1)
    ledger.process_started(a)
    ledger.process_started(b)
    ledger.add(a, [_row(1, 0, 0x1000, 100), _row(1, 0, 0x2000, 50),
                   _row(1, 2, 0x9000, 7, mem_type=3),          # pinned host
                   _row(1, 3, 0x5000, 11),                      # a module global
                   _row(1, 4, 0, 1 << 40, result=2),            # a failed runtime call
                   _row(2, 1, 0x1000, 0)])                      # size from the ledger
    ledger.add(b, [_row(1, 0, 0x1000, 30, device=1)])            # same address, other process
    assert ledger.peak_bytes[0] == 150 and ledger.peak_bytes[1] == 30
    assert ledger.peak_bytes[HOST_KEY] == 7
    assert ledger.bytes[1] == 100  # the FREE's size came from the ALLOC
    changes = ledger.process_ended(a)
    assert sorted(c[1:] for c in changes) == [(HOST_KEY, 0), (0, 0)]
    ledger.finish()
    summary = ledger.summary()
    assert summary["failed"] == [{"function": "cudaMalloc", "result": 2,
                                  "error": "cudaErrorMemoryAllocation", "count": 1,
                                  "max_size": 1 << 40}]
    never = {f["function"]: (f["count"], f["bytes"]) for f in summary["never_freed"]}
    assert never == {"cuMemAlloc_v2": (2, 80), "cuMemAllocHost_v2": (1, 7)}  # no global
    assert list(summary["peak_bytes"]) == ["cuda:0", "cuda:1", "host (pinned)"]


def test_human_size() -> None:
    assert [human_size(n) for n in (0, 1023, 1024, 1536, 256 << 20, 3 << 40)] == [
        "0 B", "1023 B", "1 KiB", "1.5 KiB", "256 MiB", "3 TiB"]


def test_a_peer_is_who_the_kernel_says() -> None:
    """memhook.tracing.peers on a connected pair: the pid is SO_PEERCRED's, the
    pidfd is that process's, and a claim is checked against its pids in
    every PID namespace."""
    import os
    import socket

    from memhook.tracing.peers import identify

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        peer = identify(a)
        try:
            assert peer.pid == os.getpid() and peer.uid == os.geteuid()
            assert peer.pidfd is not None
            assert peer.nspids is not None and peer.nspids[0] == os.getpid()
            assert peer.ppid == os.getppid()  # (a fork child's parent, by the kernel)
            assert peer.claims(os.getpid()) is True
            assert peer.claims(os.getpid() + 1) is False
        finally:
            peer.close()
        assert peer.pidfd is None


def test_printable_escapes_every_control_and_nothing_else() -> None:
    name = "/srv/libtorch_cuda.so (café, 東京)"
    assert printable(name) is name
    assert printable("a\x1b[2J\x07\n\r\t\x00\x7f\u0085b") == \
        "a\\x1b[2J\\x07\\n\\r\\t\\x00\\x7f\\x85b"
    assert printable("\u202egnp.so\u2028x") == "\\u202egnp.so\\u2028x"  # bidi, line separator
    assert printable("back\\slash") == "back\\\\slash"  # so an escape is never ambiguous
    # A name that was not UTF-8 (os.fsdecode): its C1 bytes are escaped; the
    # others stay surrogates, which the text streams write back as the bytes.
    assert printable(os.fsdecode(b"lib\x9b\xe9.so")) == "lib\\x9b\udce9.so"
