"""The C fast path's functions (csrc/pyext/query_fast.c), taken once from
the cffi extension, where they are built as CPython builtins (cffi would
release the GIL around each call).  memhook._query arms and feeds it;
memhook._coverage hands it the coverage memo as it stores it.  Without the
native extension, or on a free-threaded CPython, there is none: every
query takes the Python path."""

from __future__ import annotations

import ctypes
from typing import Any, Callable, NamedTuple

__all__ = ["FastPath", "FAST"]


class FastPath(NamedTuple):
    """csrc/pyext/query_fast.c's methods[], in its order."""

    fast_type: Callable[[Any], Any]
    fast_region: Callable[[Any, Any], Any]
    configure: Callable[..., None]
    publish: Callable[..., None]
    coverage_memo: Callable[[int, int, bool], None]
    coverage_epoch: Callable[[int], None]


def _take() -> FastPath | None:
    try:
        from ._core import lib
    except ImportError:  # pragma: no cover - an unbuilt tree (memhook._core says why)
        return None
    address = int(lib.memhook_query_fast_functions())
    if not address:  # pragma: no cover - a free-threaded CPython, or out of memory
        return None
    return FastPath(*ctypes.cast(address, ctypes.py_object).value)


FAST: FastPath | None = _take()
"""The functions, or None where there is no fast path."""
