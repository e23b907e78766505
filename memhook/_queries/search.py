"""Searches over a cache snapshot: numpy's ``searchsorted(side="left")``
over a sorted uint64 array (:func:`lower_bounds`), and memory types of many
pointers at once (:func:`snapshot_memory_types`), done by
csrc/pyext/batch_search.c where the native extension has it (a branchless
search of many keys in lockstep: it says why that is faster), else by
numpy."""

from __future__ import annotations

import numpy as np

__all__ = ["lower_bounds", "snapshot_memory_types"]

try:
    from .._binding.core import ffi, lib

    _c_lower_bounds = lib.memhook_lower_bounds
    _c_memory_types = lib.memhook_memory_types
except (ImportError, AttributeError):  # pragma: no cover - an unbuilt or older extension
    _c_lower_bounds = _c_memory_types = None


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


def snapshot_memory_types(starts: np.ndarray, lasts: np.ndarray, types: np.ndarray,
                          keys: np.ndarray, want_absent: bool,
                          native: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """Memory type codes (uint8) of the flat uint64 ``keys`` in a snapshot of
    ``len(types) - 1`` sorted, disjoint regions and a sentinel: ``starts``
    and ``lasts`` (uint64 first and last bytes, the sentinel's start past
    every region) and ``types`` (uint8 codes).  A key no region holds is
    HOST (0); with ``want_absent``, also a bool mask of those keys, else
    None.  ``native=False`` takes numpy's path (what tests compare with).

    >>> import numpy as np
    >>> starts = np.array([10, 30, 2**64 - 1], dtype=np.uint64)
    >>> lasts = np.array([19, 39, 2**64 - 1], dtype=np.uint64)
    >>> types = np.array([1, 3, 0], dtype=np.uint8)
    >>> keys = np.array([9, 10, 19, 20, 35], dtype=np.uint64)
    >>> codes, absent = snapshot_memory_types(starts, lasts, types, keys, True)
    >>> codes.tolist(), absent.tolist()
    ([0, 1, 1, 0, 3], [True, False, False, True, False])
    """
    regions = len(types) - 1
    if native and _c_memory_types is not None:
        flat = np.ascontiguousarray(keys, dtype=np.uint64)
        codes = np.empty(flat.shape, dtype=np.uint8)
        absent = np.empty(flat.shape, dtype=np.uint8) if want_absent else None
        _c_memory_types(ffi.from_buffer("uint64_t[]", starts), ffi.from_buffer("uint64_t[]", lasts),
                        ffi.from_buffer("uint8_t[]", types), regions,
                        ffi.from_buffer("uint64_t[]", flat), len(flat),
                        ffi.from_buffer("uint8_t[]", codes),
                        ffi.from_buffer("uint8_t[]", absent) if absent is not None else ffi.NULL)
        return codes, absent.view(np.bool_) if absent is not None else None
    idx = lasts.searchsorted(keys)  # first region whose last byte >= key
    codes = types.take(idx)
    inside = starts.take(idx) <= keys
    if want_absent:
        inside &= idx != regions
    np.multiply(codes, inside, out=codes)  # HOST is 0
    return codes, ~inside if want_absent else None
