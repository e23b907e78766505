"""Steps that an exception from a signal handler cannot split, and locks
that one cannot leak.

A Python signal handler runs between two bytecodes of the main thread -
in CPython 3.11+ as a call returns, as a function begins and on a
backward jump; in 3.9 and 3.10 at almost any instruction - and whatever it
raises (``KeyboardInterrupt`` for ^C) comes out there.  A write that
changes two lists, or a drain that takes rows out of the core and then
notes that it holds them, is torn in two by it.  No bytecode runs inside
a call into C that calls only C, so:

* :func:`commit` runs a list of prepared ``(function, *args)`` steps in
  one C-level loop (``deque(maxlen=0)`` consuming ``itertools.starmap``
  over ``operator.call``):
  with functions implemented in C (``operator.setitem``, ``setattr``,
  ``list.append``, a cffi pointer's item store), either every step runs or
  none does.  Everything a write computes beforehand only reads.
* A lock taken with ``acquire()`` and released in a ``finally`` has two
  windows - after the acquiring call returns and before the ``try``, and
  in the ``finally`` before the releasing call - in which an exception
  leaves it held by a thread that has left the code holding it.  Such a
  lock is still owned by that thread (an RLock knows its owner), and no
  frame of that thread that takes it is running: :func:`held_here` tells
  that case (a leak, which the thread takes back at its next call) from a
  signal handler or a subscriber nested in the frame that holds it.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, starmap
from types import CodeType
from typing import Any

__all__ = ["commit", "held_here"]

_consume: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend  # (runs an iterator out, in C)


def commit(steps: Iterable[tuple[Any, ...]]) -> None:
    """Make each step ``(function, *args)`` of ``steps``, in order, in one
    call into C: every function must be implemented in C, so that no
    bytecode - and so no signal handler - runs between the first and the
    last."""
    _consume(_calls(steps))


if sys.version_info >= (3, 11):
    from operator import call as _call

    def _calls(steps: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
        return starmap(_call, steps)
else:  # pragma: no cover - Python 3.9 and 3.10: no operator.call
    def _calls(steps: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
        return chain.from_iterable([starmap(step[0], (step[1:],)) for step in steps])


def held_here(codes: frozenset[CodeType], above: int = 2) -> bool:
    """Whether a frame running one of ``codes`` (the functions that take a
    lock and release it before they return) is on this thread's stack: a
    lock this thread owns is then held by that frame (this call comes from
    a signal handler or a callback nested in it); otherwise it was left
    behind by an exception in one of the two windows."""
    frame = sys._getframe(above)  # (2: above the caller, which asks about the frames below it)
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False
