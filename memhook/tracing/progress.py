"""A progress bar for ``memhook diff`` and ``memhook merge``: bytes of
input read out of the total, on stderr, only when stderr is a terminal
(nothing at all when it is piped or a file), redrawn at most a few times a
second and wiped when the work is done."""

from __future__ import annotations

import sys
import time
from typing import IO, Any

__all__ = ["Progress"]

_WIDTH = 30
_EVERY_S = 0.2


class Progress:
    """``advance(nbytes)`` as input is read; ``done()`` at the end."""

    def __init__(self, total_bytes: int, label: str, stream: IO[Any] | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        try:
            self.enabled = bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            self.enabled = False
        self.total = max(total_bytes, 1)
        self.label = label
        self.read = 0
        self.started = time.monotonic()
        self.shown_at = 0.0
        self.drawn = False

    def advance(self, nbytes: int) -> None:
        self.read += nbytes
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.shown_at >= _EVERY_S:
            self.shown_at = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = min(self.read / self.total, 1.0)
        filled = int(frac * _WIDTH)
        rate = self.read / max(now - self.started, 1e-6) / (1 << 20)
        text = (f"\r{self.label} [{'#' * filled}{'.' * (_WIDTH - filled)}] {frac:6.1%} "
                f"{self.read / (1 << 20):,.1f}/{self.total / (1 << 20):,.1f} MiB "
                f"{rate:,.0f} MiB/s")
        self._write(text)
        self.drawn = True

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False

    def done(self) -> None:
        if self.enabled and self.drawn:
            self._write("\r\x1b[K")
            self.drawn = False
