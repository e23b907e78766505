"""The first bound at or above each of many pointers: numpy's
``searchsorted(side="left")`` over a sorted uint64 array, done by
csrc/pyext/batch_search.c where the native extension has it (a branchless
search of many keys in lockstep: it says why that is faster), else by
numpy."""

from __future__ import annotations

import numpy as np

__all__ = ["lower_bounds"]

try:
    from ._core import ffi, lib

    _c_lower_bounds = lib.memhook_lower_bounds
except (ImportError, AttributeError):  # pragma: no cover - an unbuilt or older extension
    _c_lower_bounds = None


def lower_bounds(sorted_bounds: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``sorted_bounds.searchsorted(keys)`` (both uint64, ``keys`` flat):
    for each key the index of the first bound ``>= key``, ``len`` when
    none is, as int64.

    >>> import numpy as np
    >>> bounds = np.array([10, 20, 30], dtype=np.uint64)
    >>> lower_bounds(bounds, np.array([0, 10, 11, 30, 31], dtype=np.uint64)).tolist()
    [0, 0, 1, 2, 3]
    """
    if _c_lower_bounds is None or sorted_bounds.dtype != np.uint64 or keys.dtype != np.uint64:
        return sorted_bounds.searchsorted(keys)
    bounds = np.ascontiguousarray(sorted_bounds)
    flat = np.ascontiguousarray(keys)
    out = np.empty(flat.shape, dtype=np.int64)
    _c_lower_bounds(ffi.from_buffer("uint64_t[]", bounds), len(bounds),
                    ffi.from_buffer("uint64_t[]", flat), len(flat),
                    ffi.from_buffer("int64_t[]", out))
    return out
