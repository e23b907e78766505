"""memhook's memory-type answers against asking the CUDA driver, on a real GPU.

    python3 bench/cache_vs_driver.py

Needs cuda-python, numpy and sortedcontainers; not memhook's native parts (on
a machine where they are not built, memhook's pure-Python cache modules are
imported straight from this source tree).  Baseline, measured in the same run:
cuda-python's ``cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)``
(for a plain host pointer it fails with CUDA_ERROR_INVALID_VALUE, which is its
answer "not CUDA memory").  Goal: memhook at least 3x faster for device and
for host pointers.

memhook figures:
* ``MemtypeCache.memory_type``: the cache as the hooks keep it (the pointer's
  region recorded; a host pointer simply not in it);
* ``memhook.memory_type`` with the hook layer vouching for coverage (what the
  module-level query costs once hooks are installed);
* ``memhook.memory_type`` today, without hooks: device pointers are resolved
  through the driver once and then answered from the cache; host pointers are
  asked of the driver each time (nothing can vouch that they are not CUDA's),
  through ctypes ``cuPointerGetAttributes``.
"""

from __future__ import annotations

import ctypes
import sys
import time
import types
from pathlib import Path


def _import_memhook():  # type: ignore[no-untyped-def]
    try:
        import memhook
        import memhook.cache
        return memhook
    except ImportError:  # native parts not built here: the pure-Python modules only
        root = Path(__file__).resolve().parent.parent
        pkg = types.ModuleType("memhook")
        pkg.__path__ = [str(root / "memhook")]  # type: ignore[attr-defined]
        sys.modules["memhook"] = pkg
        import memhook.cache
        from memhook._types import MemoryType, Region
        pkg.MemoryType, pkg.Region = MemoryType, Region  # type: ignore[attr-defined]
        pkg.memory_type = memhook.cache.memory_type  # type: ignore[attr-defined]
        pkg.MemtypeCache = memhook.cache.MemtypeCache  # type: ignore[attr-defined]
        return pkg


def per_call_ns(fn, arg, n: int = 200_000, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e9


def main() -> int:
    from cuda.bindings import driver as cu

    memhook = _import_memhook()
    from memhook import cache as cache_mod
    M = memhook.MemoryType

    def ok(result):  # type: ignore[no-untyped-def]
        err, *values = result if isinstance(result, tuple) else (result,)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        return values[0] if len(values) == 1 else tuple(values)

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    name = ok(cu.cuDeviceGetName(128, dev)).split(b"\0")[0].decode()
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    dptr = int(ok(cu.cuMemAlloc(1 << 20)))
    host_buf = ctypes.create_string_buffer(1 << 20)
    hptr = ctypes.addressof(host_buf) + 4096
    attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    get_attr = cu.cuPointerGetAttribute
    assert get_attr(attr, dptr)[1] == cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    assert get_attr(attr, hptr)[0] == cu.CUresult.CUDA_ERROR_INVALID_VALUE

    # Some allocations around, so the cache is not trivially small.
    others = [int(ok(cu.cuMemAlloc(1 << 16))) for _ in range(1000)]

    standalone = memhook.MemtypeCache()
    for p in others:
        standalone.update(p, 1 << 16, M.CUDA, 0)
    standalone.update(dptr, 1 << 20, M.CUDA, 0)

    assert memhook.memory_type(dptr) is M.CUDA  # resolved through the driver, remembered
    assert memhook.memory_type(hptr) is M.HOST
    assert standalone.memory_type(dptr) is M.CUDA and standalone.memory_type(hptr) is M.HOST

    rows = []
    for label, ptr in (("device pointer", dptr), ("host pointer", hptr)):
        base = per_call_ns(lambda p: get_attr(attr, p), ptr)
        c = per_call_ns(standalone.memory_type, ptr)
        cache_mod.set_hook_layer(None, lambda: True)
        vouched = per_call_ns(memhook.memory_type, ptr)
        cache_mod.set_hook_layer(None, None)
        today = per_call_ns(memhook.memory_type, ptr, n=50_000)
        rows.append((label, base, c, vouched, today))

    print(f"GPU: {name}; python {sys.version.split()[0]}")
    print(f"{'':16} {'cuPointerGetAttribute':>22} {'MemtypeCache':>14} "
          f"{'memory_type, hooks':>19} {'memory_type, no hooks':>22}")
    for label, base, c, vouched, today in rows:
        print(f"{label:16} {base:>19.0f} ns {c:>11.0f} ns {vouched:>16.0f} ns {today:>19.0f} ns")
        print(f"{'  speed-up':16} {'':>22} {base / c:>13.1f}x {base / vouched:>18.1f}x "
              f"{base / today:>21.1f}x")
    # Batch lookups: memory_types() over 10,000 pointers, ns per pointer,
    # against the same per-pointer driver call.
    import numpy as np
    batch = {"device pointer": np.array([p + 64 * (i % 1000) for i, p in
                                         enumerate(others * 10)], dtype=np.uint64),
             "host pointer": np.array([hptr + 64 * (i % 1000) for i in range(10_000)],
                                      dtype=np.uint64)}
    print(f"batch of 10,000: {'':>5} {'cuPointerGetAttribute':>22} {'MemtypeCache':>14} "
          f"{'memory_types, hooks':>20}  (ns per pointer)")
    for label, base, *_ in rows:
        arr = batch[label]
        c = per_call_ns(standalone.memory_types, arr, n=20) / len(arr)
        cache_mod.set_hook_layer(None, lambda: True)
        vouched = per_call_ns(memhook.memory_types, arr, n=20) / len(arr)
        cache_mod.set_hook_layer(None, None)
        print(f"{label:21} {base:>19.0f} ns {c:>11.1f} ns {vouched:>17.1f} ns   "
              f"speed-up {base / c:.0f}x / {base / vouched:.0f}x")
    goal = all(base / c >= 3 and base / v >= 3 for _, base, c, v, _ in rows)
    print("goal (>= 3x faster than the driver, cache and hooked memory_type):",
          "met" if goal else "MISSED")
    for p in others + [dptr]:
        ok(cu.cuMemFree(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
