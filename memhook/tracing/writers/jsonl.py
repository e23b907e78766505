# %-formatting builds the per-event lines: cheaper than f-strings here (docs/performance.md).
# ruff: noqa: UP031
"""``memhook trace -f jsonl``: one JSON object per event, with the keys
``kind`` ("alloc"/"free"), ``function``, ``address``,
``size``, ``mem_type`` (name), ``device``, ``pid``, ``tid``, ``ts_ns``
(CLOCK_MONOTONIC), ``result``, ``caller`` (and ``stack``, ``python``).

An allocation that failed for lack of memory is followed by an object of
``"kind": "oom"``: the OOM report of :mod:`memhook.tracing.oom` (the
request's keys, then ``device_free``/``device_total`` (null: not
recorded), ``live_bytes``, ``live_count``, ``processes``, ``by_library``,
``by_python_site``, ``largest``).  The first line is a header record;
readers skip kinds they do not know."""

from __future__ import annotations

import json
from typing import IO, Any

from ..._objects.symbolize import Caller
from ..ledger import ALLOC, Ledger, Process, mem_type_name
from ..oom import OOM_RESULT
from ..pyframes import PyStack
from ..sites import binding_name
from .base import Writer, Padded

__all__ = ["JsonlWriter"]

_PYTHON_CHARS = 32 << 20  # the most text JsonlWriter keeps of Python stacks


def _python_json(python: PyStack) -> str:
    """jsonl's ``python`` (and why it is empty, or ends early), and the
    program call site it names."""
    text = ',"python":' + json.dumps([{"file": f.file, "line": f.line, "function": f.function}
                                      for f in python.frames])
    if python.frames:
        text += ',"site":' + json.dumps(python.site)
    if python.why:
        text += ',"python_note":' + json.dumps(python.why)
    if python.more:
        text += ',"python_truncated":true'
    return text



def _frame_json(c: Caller | None) -> dict | None:
    if c is None:
        return None
    return {"object": c.object, "symbol": c.symbol, "offset": c.offset, "address": c.address}


class JsonlWriter(Writer):
    """One object per event (the keys are in this module's docstring).  ``caller``:
    ``{"object", "symbol", "offset", "address"}`` (null when unknown);
    with --stacks, ALLOCs have ``stack``, a list of the same, innermost
    first; with --python, ``python``, a list of ``{"file", "line",
    "function"}``, innermost first (line 0: unknown), and where it is empty
    or ends early ``python_note`` says why (``python_truncated``: more
    frames than the depth); ``site``, the program call site the summary
    counts it by (:attr:`memhook.tracing.pyframes.PyStack.site`).  Where
    the caller is a binding layer (:mod:`memhook.tracing.bindings`),
    ``binding`` names it (``"ctypes"``, ``"cuda-python"``...): the Python
    caller is then ``python[0]``."""

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int) -> None:
        super().__init__(out, ledger, t0_ns)
        self._names = Padded(ledger.function_name, 0)
        self._types = Padded(mem_type_name, 0)
        self._callers: dict[Caller | None, str] = {}
        self._python: dict[PyStack, str] = {}
        self._python_chars = 0  # what _python holds: bounded, however long the names

    def _caller(self, caller: Caller | None) -> str:
        text = self._callers.get(caller)
        if text is None:
            text = json.dumps(_frame_json(caller))
            binding = binding_name(caller)
            if binding is not None:
                text += ',"binding":' + json.dumps(binding)
            if len(self._callers) > 100_000:
                self._callers.clear()
            self._callers[caller] = text
        return text

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        names, types = self._names, self._types
        lines: list[str] = []
        append = lines.append
        pys = self._python
        for row in rows:
            _, address, size, ts, kind, fn, mem_type, device, pid, tid, result, _, caller, \
                frames, python = row
            # Names are C identifiers: no JSON escaping needed (paths and
            # symbols go through json.dumps).
            stack = ""
            if frames:
                stack = ',"stack":' + json.dumps([_frame_json(c) for c in frames])
            if python is not None:
                text = pys.get(python)
                if text is None:
                    text = _python_json(python)
                    if len(pys) > 100_000 or self._python_chars + len(text) > _PYTHON_CHARS:
                        pys.clear()
                        self._python_chars = 0
                    self._python_chars += len(text)
                    pys[python] = text
                stack += text
            append('{"kind":"%s","function":"%s","address":%d,"size":%d,"mem_type":"%s",'
                   '"device":%d,"pid":%d,"tid":%d,"ts_ns":%d,"result":%d,"caller":%s%s}\n' % (
                       "alloc" if kind == ALLOC else "free", names[fn], address, size,
                       types[mem_type], device, pid, tid, ts, result,
                       self._caller(caller), stack))
            if result == OOM_RESULT and kind == ALLOC:
                oom = self.ledger.oom_of(row)
                if oom is not None:
                    append(json.dumps(self.ledger.oom_json(oom)) + "\n")
        self.out.write("".join(lines))
        self.out.flush()
