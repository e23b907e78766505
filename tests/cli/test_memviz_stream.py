"""memviz's snapshot, written as a stream (memhook/tracing/writers/
pickle_stream.py, memviz.py): what ``pickle.load`` reads back is exactly
the snapshot, shared objects stay shared, and the ring keeps the last N
entries in order."""

from __future__ import annotations

import io
import pickle

import pytest

from memhook._objects.symbolize import Caller
from memhook.tracing.ledger import ALLOC, Ledger
from memhook.tracing.writers.memviz import MemvizWriter
from memhook.tracing.writers.pickle_stream import PickleStream

VALUES = [None, True, False, 0, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31,
          -2**31 - 1, 2**63, 2**64 - 1, -2**70, 10**700, "", "é\udc80\x1b\n", (0, 0), (),
          [], {}, list(range(2500)), {i: str(i) for i in range(2100)}, [[1, [2, (3,)]]]]


def _load(write) -> object:
    out = io.BytesIO()
    stream = PickleStream(out)
    write(stream)
    stream.close()
    return pickle.loads(out.getvalue())


def test_every_kind_of_value_reads_back_equal() -> None:
    """Ints at each opcode's edges, a 10**700, surrogates (a non-UTF-8
    file name), lists and dicts past a batch (1,000), nesting."""
    assert _load(lambda s: s.value(VALUES)) == VALUES


def test_shared_values_are_written_once_and_load_as_one_object() -> None:
    def write(s: PickleStream) -> None:
        s.begin_list()
        for round_ in range(2):
            for i in range(300):  # past 256: the long memo opcodes too
                s.shared(("site", i), (lambda i=i: [{"n": i}]) if round_ == 0 else
                         (lambda: pytest.fail("made twice")))
        s.end_list()

    got = _load(write)
    assert isinstance(got, list) and len(got) == 600
    assert got[:300] == [[{"n": i}] for i in range(300)]
    assert all(got[i] is got[i + 300] for i in range(300))


def test_an_unsupported_value_is_named() -> None:
    with pytest.raises(TypeError, match="does not write float"):
        PickleStream(io.BytesIO()).value(1.5)


def _row(kind: int, address: int, ts: int, caller: Caller, result: int = 0) -> tuple:
    # (seq, address, size, ts, kind, function, mem_type, device, pid, tid, result, flags,
    #  caller, stack, python), as the collector hands rows to writers
    return (0, address, 4096, ts, kind, 0, 1, 0, 7, 7, result, 0, caller, None, None)


def test_the_ring_keeps_the_last_entries_in_order_and_the_live_set_whole() -> None:
    ledger = Ledger(["cuMemAlloc_v2", "cuMemFree_v2"], [False, False])
    out = io.BytesIO()
    writer = MemvizWriter(out, ledger, 0, max_entries=7)
    sites = [Caller(f"/lib/lib{i}.so", "f", 1, 0x1000 + i) for i in range(3)]
    rows = []
    for i in range(10):  # ALLOC (2 entries) and FREE (3) of 10 addresses
        rows.append(_row(ALLOC, 0x10000 * (i + 1), 1000 * (2 * i), sites[i % 3]))
        rows.append(_row(2, 0x10000 * (i + 1), 1000 * (2 * i + 1), sites[i % 3]))
    rows.append(_row(ALLOC, 0xF0000, 99_000, sites[0]))  # never freed
    writer.events(None, rows, [])  # type: ignore[arg-type]
    writer.finish()
    snap = pickle.loads(out.getvalue())
    trace = snap["device_traces"][0]
    # The last 7 of 52 entries: the 10th pair's 5, then the live ALLOC's 2.
    assert [(e["action"], e["addr"], e["time_us"]) for e in trace] == [
        ("segment_alloc", 0xA0000, 18), ("alloc", 0xA0000, 18),
        ("free_requested", 0xA0000, 19), ("free_completed", 0xA0000, 19),
        ("segment_free", 0xA0000, 19), ("segment_alloc", 0xF0000, 99),
        ("alloc", 0xF0000, 99)]
    assert trace[0]["frames"][1]["filename"] == "/lib/lib0.so"  # 10th pair: site 9 % 3
    assert trace[0]["frames"] is trace[4]["frames"]  # one call site, one object
    (segment,) = snap["segments"]
    assert (segment["address"], segment["total_size"], segment["segment_pool_id"]) == (
        0xF0000, 4096, (0, 0))
    assert segment["frames"] is segment["blocks"][0]["frames"]
