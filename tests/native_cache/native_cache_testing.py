"""ctypes access to the core's memory-type cache API (csrc/cache/), for the
native cache's tests: the query calls and the private test caches."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

import memhook
from memhook._events.layout import EVENT_DTYPE

__all__ = ["FOUND_ABSENT", "FOUND_IN", "FOUND_MIXED", "FOUND_RUN", "ORIGIN_DRIVER",
           "ORIGIN_HOOKS", "ORIGIN_UNKNOWN", "NativeCache", "NativeRegion", "core"]

ORIGIN_UNKNOWN, ORIGIN_HOOKS, ORIGIN_DRIVER = 0, 1, 2
FOUND_ABSENT, FOUND_IN, FOUND_RUN, FOUND_MIXED = 0, 1, 2, 3


class _Region(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("mem_type", ctypes.c_int),
                ("device", ctypes.c_int), ("base", ctypes.c_uint64), ("size", ctypes.c_uint64),
                ("alloc_id", ctypes.c_uint64), ("origin", ctypes.c_int),
                ("reserved0", ctypes.c_int)]


@dataclass(frozen=True)
class NativeRegion:
    mem_type: int
    device: int
    base: int
    size: int
    alloc_id: int
    origin: int


def _region(r: _Region) -> NativeRegion:
    return NativeRegion(r.mem_type, r.device, r.base, r.size, r.alloc_id, r.origin)


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(memhook.library_path())
    vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
    lib.memhook_testing_cache_new.restype = vp
    lib.memhook_testing_cache_free.argtypes = [vp]
    lib.memhook_testing_cache_apply.argtypes = [vp, vp, sz]
    lib.memhook_testing_cache_remember.argtypes = [vp, u64, u64, ctypes.c_int, ctypes.c_int]
    lib.memhook_testing_cache_hooks.argtypes = [vp, ctypes.c_int, ctypes.c_int]
    lib.memhook_testing_cache_lookup.argtypes = [vp, u64, u64, ctypes.POINTER(_Region)]
    lib.memhook_testing_cache_regions.argtypes = [vp, ctypes.POINTER(_Region), sz]
    lib.memhook_testing_cache_regions.restype = sz
    lib.memhook_testing_cache_types.argtypes = [vp, vp, sz, vp]
    lib.memhook_testing_cache_search_steps.argtypes = [vp]
    lib.memhook_query.argtypes = [vp, sz, ctypes.POINTER(_Region)]
    lib.memhook_query_cached.argtypes = [vp, sz, ctypes.POINTER(_Region)]
    lib.memhook_query_types.argtypes = [vp, sz, vp]
    lib.memhook_query_batch.argtypes = [vp, sz, vp]
    return lib


core = _load()


def query(ptr: int, size: int = 1, *, cached: bool = False,
          struct_size: int = ctypes.sizeof(_Region)) -> tuple[int, NativeRegion]:
    """memhook_query (or _cached): (return code, region)."""
    r = _Region(struct_size=struct_size)
    fn = core.memhook_query_cached if cached else core.memhook_query
    rc = fn(ptr, size, ctypes.byref(r))
    return rc, _region(r)


def query_null_out(ptr: int) -> int:
    return int(core.memhook_query(ptr, 1, None))


def query_types(ptrs: np.ndarray) -> np.ndarray:
    arr = np.ascontiguousarray(ptrs, dtype=np.uint64)
    out = np.empty(len(arr), dtype=np.uint8)
    rc = core.memhook_query_types(arr.ctypes.data, len(arr), out.ctypes.data)
    assert rc == 0, rc
    return out


class NativeCache:
    """A private native cache (memhook_testing_cache_*)."""

    def __init__(self) -> None:
        self._c = core.memhook_testing_cache_new()
        assert self._c

    def close(self) -> None:
        if self._c:
            core.memhook_testing_cache_free(self._c)
            self._c = None

    def __enter__(self) -> NativeCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def apply(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=EVENT_DTYPE)
        core.memhook_testing_cache_apply(self._c, rows.ctypes.data, len(rows))

    def remember(self, base: int, size: int, mem_type: int, device: int) -> None:
        core.memhook_testing_cache_remember(self._c, base, size, mem_type, device)

    def hooks(self, installed: bool, coverage: bool) -> None:
        core.memhook_testing_cache_hooks(self._c, int(installed), int(coverage))

    def lookup(self, ptr: int, size: int) -> tuple[int, NativeRegion]:
        r = _Region(struct_size=ctypes.sizeof(_Region))
        k = core.memhook_testing_cache_lookup(self._c, ptr, size, ctypes.byref(r))
        return k, _region(r)

    def regions(self) -> list[NativeRegion]:
        n = core.memhook_testing_cache_regions(self._c, None, 0)
        buf = (_Region * max(n, 1))()
        n = core.memhook_testing_cache_regions(self._c, buf, n)
        return [_region(buf[i]) for i in range(n)]

    def search_steps(self) -> int:
        """The binary steps a search of the map takes."""
        return int(core.memhook_testing_cache_search_steps(self._c))

    def types(self, ptrs: np.ndarray) -> np.ndarray:
        arr = np.ascontiguousarray(ptrs, dtype=np.uint64)
        out = np.empty(len(arr), dtype=np.uint8)
        core.memhook_testing_cache_types(self._c, arr.ctypes.data, len(arr), out.ctypes.data)
        return out
