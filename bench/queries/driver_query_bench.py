#!/usr/bin/env python3
"""The cost of memhook's driver query binding, beside ctypes, in one run.

    python bench/queries/driver_query_bench.py [ROUNDS]     # after `pip install -e .`; ROUNDS=9

memhook asks an already-loaded driver about pointers it cannot vouch for
(memhook/_binding/driver.py) with ``cuPointerGetAttributes``, called through a
function-pointer type of its cffi extension.  This times that call (one
attribute, MEMORY_TYPE, on a device pointer) on the bundled simulator, beside
the same call through a ctypes binding (what _binding/driver.py used before), and
beside ``memhook._binding.driver.is_cuda`` (the whole Python path), in alternating
rounds of 20,000 calls; it prints the median and the best round, ns per call.
The simulator's own work is in every figure alike.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import sys
import time
from typing import Any, Callable

import memhook.sim
from memhook._binding import driver as _driver
from memhook._binding.core import ffi, lib

CALLS = 20_000


def _device_pointer(cuda: ctypes.CDLL) -> int:
    ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
    for rc in (cuda.cuInit(0), cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0),
               cuda.cuCtxSetCurrent(ctx), cuda.cuMemAlloc_v2(ctypes.byref(ptr),
                                                             ctypes.c_size_t(1 << 20))):
        if rc != 0:
            raise SystemExit(f"the simulated driver failed: CUresult {rc}")
    return int(ptr.value)


def _round(call: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    for _ in range(CALLS):
        call()
    return (time.perf_counter() - t0) / CALLS * 1e9


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    dev = _device_pointer(memhook.sim.activate())

    # the baseline: ctypes, bound as _binding/driver.py did before
    c_fn = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOW | os.RTLD_NOLOAD).cuPointerGetAttributes
    c_fn.restype = ctypes.c_int
    c_fn.argtypes = [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    c_attr, c_val = (ctypes.c_int * 1)(2), (ctypes.c_uint64 * 1)()
    c_data = (ctypes.c_void_p * 1)(ctypes.addressof(c_val))

    # memhook's binding
    handle = lib.dlopen(b"libcuda.so.1", lib.RTLD_NOW | lib.RTLD_NOLOAD)
    f_fn = ffi.cast("mh_cuPointerGetAttributes_fn", lib.dlsym(handle, b"cuPointerGetAttributes"))
    f_attr, f_val = ffi.new("CUpointer_attribute[1]", [2]), ffi.new("uint64_t[1]")
    f_data = ffi.new("void *[1]", [f_val])

    if c_fn(1, c_attr, c_data, dev) != 0 or f_fn(1, f_attr, f_data, dev) != 0:
        raise SystemExit("cuPointerGetAttributes failed on the simulator")
    if not (c_val[0] == f_val[0] == 2 and _driver.is_cuda(dev)):  # CU_MEMORYTYPE_DEVICE
        raise SystemExit("the two bindings disagree")

    cases: dict[str, Callable[[], Any]] = {
        "ctypes cuPointerGetAttributes (baseline)": lambda: c_fn(1, c_attr, c_data, dev),
        "cffi cuPointerGetAttributes (memhook)": lambda: f_fn(1, f_attr, f_data, dev),
        "memhook._binding.driver.is_cuda (whole path)": lambda: _driver.is_cuda(dev),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, call in cases.items():
            times[name].append(_round(call))
    base = statistics.median(times["ctypes cuPointerGetAttributes (baseline)"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<42} {med:7.0f} ns median, {min(ts):7.0f} best  ({med / base:.2f}x the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
