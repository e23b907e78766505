"""The output formats of ``memhook trace``, one module each, and the one
place that names them:

* :mod:`.text`   - one line per event, written as it arrives, then the summary;
* :mod:`.jsonl`  - one JSON object per event (its keys: that module's docstring);
* :mod:`.chrome` - Chrome trace / Perfetto JSON, with a live-bytes counter
  track per device;
* :mod:`.memviz` - a pickle PyTorch's memory_viz page opens.

:mod:`.base` holds the :class:`Writer` interface the collector calls and
what the writers share.
"""

from __future__ import annotations

from typing import IO, Any

from ..ledger import Ledger
from .base import TEXT_ERRORS, Writer
from .chrome import ChromeWriter
from .jsonl import JsonlWriter
from .memviz import MemvizWriter
from .text import TextWriter

__all__ = ["FORMATS", "TEXT_ERRORS", "ChromeWriter", "JsonlWriter", "MemvizWriter", "TextWriter",
           "Writer", "make_writer"]

FORMATS = ("text", "jsonl", "chrome", "memviz")


def make_writer(fmt: str, out: IO[Any], ledger: Ledger, t0_ns: int,
                counter_pid: int = 0, memviz_entries: int | None = None) -> Writer:
    if fmt == "text":
        return TextWriter(out, ledger, t0_ns)
    if fmt == "jsonl":
        return JsonlWriter(out, ledger, t0_ns)
    if fmt == "chrome":
        return ChromeWriter(out, ledger, t0_ns, counter_pid)
    if fmt == "memviz":
        return MemvizWriter(out, ledger, t0_ns, memviz_entries or 100_000)
    raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
