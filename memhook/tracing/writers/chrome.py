# %-formatting builds the per-event lines: cheaper than f-strings here (docs/performance.md).
# ruff: noqa: UP031
"""``memhook trace -f chrome``: Chrome trace / Perfetto JSON (Trace Event
Format): an instant event per call on its process and thread, and a counter
track "live bytes <device>" per device (pinned host memory on its own
track)."""

from __future__ import annotations

import json
import time
from typing import IO, Any

from ..._objects.symbolize import Caller
from ..ledger import ALLOC, Ledger, Process, device_label, mem_type_name
from ..sites import binding_name
from .base import Writer, Padded

__all__ = ["ChromeWriter"]


def _short(c: Caller | None) -> str:
    return c.short if c is not None else "?"


class ChromeWriter(Writer):
    """Trace Event Format JSON, written as it goes: ``{"traceEvents":[...]}``.

    Instant events (``ph: "i"``, thread scope) named by the function, with
    address/size/type/device/result in ``args``; counters (``ph: "C"``)
    named ``live bytes cuda:N`` / ``live bytes host (pinned)`` on the
    traced command's process; ``ts`` in microseconds since the trace began.
    """

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int, counter_pid: int = 0) -> None:
        super().__init__(out, ledger, t0_ns)
        self.counter_pid = counter_pid
        self._names = Padded(ledger.function_name, 0)
        self._types = Padded(mem_type_name, 0)
        self.first = True
        self.pids: dict[int, str] = {}
        self._callers: dict[Caller | None, str] = {}
        out.write('{"displayTimeUnit":"ns","otherData":{"tool":"memhook trace"},'
                  '"traceEvents":[\n')

    def _caller(self, caller: Caller | None) -> str:
        """``args.caller`` (and ``binding``, where it is one), cached."""
        text = self._callers.get(caller)
        if text is None:
            text = json.dumps(_short(caller))
            binding = binding_name(caller)
            if binding is not None:
                text += ',"binding":' + json.dumps(binding)
            if len(self._callers) > 100_000:
                self._callers.clear()
            self._callers[caller] = text
        return text

    def _emit(self, items: list[str]) -> None:
        if not items:
            return
        text = ",\n".join(items)
        if not self.first:
            text = ",\n" + text
        self.first = False
        self.out.write(text)

    def process_started(self, proc: Process) -> None:
        if proc.hello is not None:
            self.pids[proc.pid] = proc.hello.command

    def _counter(self, d: int, key: int, total: int) -> str:
        return ('{"name":"live bytes %s","ph":"C","ts":%d.%03d,"pid":%d,"args":{"bytes":%d}}'
                % (device_label(key), d // 1000, d % 1000, self.counter_pid, total))

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        ledger = self.ledger
        t0 = self.t0_ns
        names, types = self._names, self._types
        items: list[str] = []
        append = items.append
        ci = 0
        nchanges = len(changes)
        for i, (_, address, size, ts, kind, fn, mem_type, device, pid, tid, result,
                _, caller, _, python) in enumerate(rows):
            d = ts - t0 if ts > t0 else 0
            if result:
                cat = ('alloc,failed' if kind == ALLOC else 'free,failed')
                err = ',"error":"%s"' % ledger.error_name(fn, result)
            else:
                cat = 'alloc' if kind == ALLOC else 'free'
                err = ''
            append('{"name":"%s","cat":"%s","ph":"i","s":"t","ts":%d.%03d,"pid":%d,"tid":%d,'
                   '"args":{"address":"%#x","size":%d,"mem_type":"%s","device":%d,'
                   '"result":%d%s,"caller":%s%s}}' % (
                       names[fn], cat, d // 1000, d % 1000, pid, tid, address, size,
                       types[mem_type], device, result, err,
                       self._caller(caller),
                       "" if python is None else ',"python":%s' % json.dumps(
                           python.site if python.frames else "(no Python: %s)" % python.why)))
            while ci < nchanges and changes[ci][0] == i:
                append(self._counter(d, changes[ci][1], changes[ci][2]))
                ci += 1
        self._emit(items)

    def process_ended(self, proc: Process, changes: list[tuple],
                      ts_ns: int | None = None) -> None:
        d = max((time.monotonic_ns() if ts_ns is None else ts_ns) - self.t0_ns, 0)
        self._emit([self._counter(d, key, total) for _, key, total in changes])

    def close(self, summary_text: str) -> None:
        meta = [json.dumps({"name": "process_name", "ph": "M", "pid": pid,
                            "args": {"name": f"{command} (pid {pid})"}})
                for pid, command in self.pids.items()]
        if self.counter_pid not in self.pids:
            meta.append(json.dumps({"name": "process_name", "ph": "M", "pid": self.counter_pid,
                                    "args": {"name": "memhook: live bytes"}}))
        self._emit(meta)
        self.out.write("\n]}\n")
        self.out.flush()
