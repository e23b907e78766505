"""What the event queue's tests (csrc/queue/) share: their C fixtures."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIXTURES"]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
