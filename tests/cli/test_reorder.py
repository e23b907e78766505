"""The reorder window (memhook/tracing/reorder.py) on its own, with a fake clock:
rows of several processes come out in timestamp order, held no longer than
the window, marks in their place, memory bounded, late rows counted."""

from __future__ import annotations

import io
import types

from memhook.tracing.ledger import Process
from memhook.tracing.reorder import Reorder

MS = 1_000_000


def _row(ts: int, pid: int, tid: int | None = None) -> tuple:
    return (0, 0x1000 + ts, 64, ts, 1, 0, 1, 0, pid, tid or pid, 0, 0, None, None, None)


class _Recorder:
    """A writer that notes what it gets."""

    summary_inline = False

    def __init__(self) -> None:
        self.out = io.StringIO()
        self.got: list[tuple] = []
        self.closed = ""

    def process_started(self, proc: Process) -> None:
        self.got.append(("started", proc.pid))

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        assert changes == []
        self.got.extend(("row", r[3], r[8]) for r in rows)

    def process_ended(self, proc: Process, changes: list[tuple], ts: int) -> None:
        self.got.append(("ended", proc.pid, ts))

    def close(self, summary: str) -> None:
        self.closed = summary


class _Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _proc(pid: int, start_ns: int) -> Process:
    # Only what Reorder reads of a HELLO (protocol.Hello has more).
    hello = types.SimpleNamespace(pid=pid, start_ns=start_ns)
    return Process(conn_id=pid, hello=hello)  # type: ignore[arg-type]


def test_rows_of_processes_merge_in_timestamp_order() -> None:
    clock = _Clock(0)
    w = _Recorder()
    r = Reorder(w, window_ns=100 * MS, clock=clock)
    a, b = _proc(10, 1 * MS), _proc(20, 2 * MS)
    r.process_started(a)
    r.process_started(b)
    # A's batch of 0-40 ms arrives before B's batch of 5-45 ms, each with
    # its threads slightly out of order.
    clock.now = 50 * MS
    r.events(a, [_row(t * MS, 10) for t in (3, 10, 20, 15, 30, 40)], [])
    r.events(b, [_row(t * MS, 20) for t in (5, 12, 25, 45)], [])
    assert w.got == []  # nothing is 100 ms old yet
    clock.now = 125 * MS
    r.tick()  # releases everything up to 25 ms
    assert w.got == [("started", 10), ("started", 20)] + [
        ("row", t * MS, p) for t, p in ((3, 10), (5, 20), (10, 10), (12, 20), (15, 10),
                                        (20, 10), (25, 20))]
    clock.now = 200 * MS
    r.process_ended(a, [])
    r.tick()
    assert [g[1] for g in w.got if g[0] == "row"] == sorted(
        t * MS for t in (3, 10, 20, 15, 30, 40, 5, 12, 25, 45))
    assert w.got[-1] != ("ended", 10, 200 * MS)  # its end is not 100 ms old yet
    r.close("summary")
    assert w.got[-1] == ("ended", 10, 200 * MS) and w.closed == "summary"
    assert r.out_of_order == 0 and r.held == 0


def test_a_process_end_comes_after_its_rows() -> None:
    clock = _Clock(10 * MS)
    w = _Recorder()
    r = Reorder(w, window_ns=100 * MS, clock=clock)
    a = _proc(10, 0)
    r.process_started(a)
    r.events(a, [_row(9 * MS, 10)], [])
    r.process_ended(a, [])
    r.events(a, [], [])
    r.close("")
    assert w.got == [("started", 10), ("row", 9 * MS, 10), ("ended", 10, 10 * MS)]


def test_late_rows_are_written_and_counted() -> None:
    clock = _Clock(500 * MS)
    w = _Recorder()
    r = Reorder(w, window_ns=100 * MS, clock=clock)
    r.events(_proc(1, 0), [_row(300 * MS, 1)], [])   # 200 ms old: out at once
    assert [g[1] for g in w.got] == [300 * MS]
    r.events(_proc(2, 0), [_row(250 * MS, 2), _row(350 * MS, 2)], [])  # late, partly
    r.close("")
    assert [g[1] for g in w.got] == [300 * MS, 250 * MS, 350 * MS]  # nothing lost
    assert r.out_of_order == 1


def test_held_rows_are_bounded() -> None:
    clock = _Clock(0)
    w = _Recorder()
    r = Reorder(w, window_ns=10_000 * MS, max_held=270, clock=clock)
    # Two processes in a storm: each batch covers 60 ns, the other's batch
    # of the same stretch comes next: a lag of 60 rows, less than the half
    # of the bound that stays held, so order survives the early releases
    # (releasing all held at the bound would not: it trips after process
    # 1's batch, before process 2's of the same stretch).
    for i in range(10):
        r.events(_proc(1, 0), [_row(i * 120 + 2 * j, 1) for j in range(60)], [])
        r.events(_proc(2, 0), [_row(i * 120 + 2 * j + 1, 2) for j in range(60)], [])
        assert r.held <= 270
    assert w.got  # the bound made the oldest go out before their window ended
    r.close("")
    assert [g[1] for g in w.got] == list(range(1200))  # and still in order
    assert r.out_of_order == 0
