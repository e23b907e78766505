"""What every writer of ``memhook trace`` shares: the :class:`Writer`
interface the collector calls, the text streams' error handler
(:data:`TEXT_ERRORS`) and :class:`Padded`, the per-value text cache the
line-per-event formats build their fields from.

Every writer streams: it gets each batch of events once, in the order the
collector received them (text, jsonl and memviz: in timestamp order, through
:mod:`memhook.tracing.reorder`), and keeps nothing per event - except memviz,
whose history is a bounded ring of fixed-size records (like PyTorch's own
recorder), written out as a stream, see
:class:`~memhook.tracing.writers.memviz.MemvizWriter`.
"""

from __future__ import annotations

import codecs
from typing import IO, Any

from ..ledger import Ledger, Process

__all__ = ["TEXT_ERRORS", "Padded", "Writer"]

TEXT_ERRORS = "memhook-bytes"
"""The ``errors`` of every text stream memhook trace writes: a name that
was not UTF-8 (a latin-1 file name in a command line, decoded with
surrogateescape as :func:`os.fsdecode` does) goes out as the bytes it was;
anything else the stream's encoding cannot hold, as a backslash escape.
Never an exception."""


def _as_bytes(exc: UnicodeError) -> tuple[str | bytes, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = bytearray()
    for ch in exc.object[exc.start:exc.end]:
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:
            out.append(cp - 0xDC00)  # the byte surrogateescape decoded it from
        else:
            out += ch.encode("ascii", "backslashreplace")
    return bytes(out), exc.end


codecs.register_error(TEXT_ERRORS, _as_bytes)


class Writer:
    """Base: what the collector calls, in this order."""

    binary = False

    def __init__(self, out: IO[Any], ledger: Ledger, t0_ns: int) -> None:
        self.out = out
        self.ledger = ledger
        self.t0_ns = t0_ns

    def process_started(self, proc: Process) -> None:
        pass

    def events(self, proc: Process, rows: list[tuple], changes: list[tuple]) -> None:
        pass

    def process_ended(self, proc: Process, changes: list[tuple],
                      ts_ns: int | None = None) -> None:
        """``proc`` is gone (at ``ts_ns``, CLOCK_MONOTONIC; None: now)."""

    def tick(self) -> None:
        """Called every collector turn, events or not."""

    def finish(self) -> None:
        """No more events come: write what is still held (memviz writes its
        whole snapshot here), before the summary is made, so that the
        summary's figure of the collector's peak memory counts it."""

    def close(self, summary_text: str) -> None:
        """The trace is over (``summary_text`` is the printed summary)."""
        self.out.flush()

    @property
    def summary_inline(self) -> bool:
        """True when the summary belongs in this output (text)."""
        return False


class Padded(dict):
    """value -> its text, padded to a width; computed once per value (a
    bounded number of them: functions, types, and the sizes a program uses,
    forgotten when there are too many)."""

    def __init__(self, fmt: Any, width: int, right: bool = False, limit: int = 4096) -> None:
        super().__init__()
        self.fmt, self.width, self.right, self.limit = fmt, width, right, limit

    def __missing__(self, key: Any) -> str:
        text = self.fmt(key)
        text = text.rjust(self.width) if self.right else text.ljust(self.width)
        if len(self) >= self.limit:
            self.clear()
        self[key] = text
        return text
