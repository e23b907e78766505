"""Run on the simulator (or a GPU) by tests/cache/test_cache_driver.py.

The module-level queries must resolve what the cache does not know through
the driver - only once the process has loaded and initialised it - and
- without hooks, which never tell it of a free - not remember them.  Prints
one line per step, "ALL OK" last.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

import memhook
from memhook import MemoryType as M
from memhook import Region
from memhook.cache import process_cache


def loaded_drivers() -> list[str]:
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "libcuda.so" in line})


def main() -> int:
    cache = process_cache()
    host = np.zeros(4096, dtype=np.uint8)

    print("no driver loaded: HOST, and no driver gets loaded", flush=True)
    assert memhook.memory_type(host) is M.HOST
    assert memhook.memory_type(0x7000_0000_0000) is M.HOST
    assert memhook.lookup(host) is None
    assert memhook.memory_types([host.ctypes.data, 0x1000]).tolist() == [0, 0]
    assert loaded_drivers() == [], loaded_drivers()

    print("driver loaded, not initialised: still HOST, and still not initialised", flush=True)
    from cuda.bindings import driver as cu
    lib = ctypes.CDLL("libcuda.so.1")
    assert loaded_drivers(), "cuda-python did not load the driver?"
    assert memhook.memory_type(host) is M.HOST
    assert memhook.memory_type(0x7000_0000_0000) is M.HOST
    assert cu.cuMemAlloc(16)[0] == cu.CUresult.CUDA_ERROR_NOT_INITIALIZED
    del lib

    def ok(result):  # type: ignore[no-untyped-def]
        err, *values = result if isinstance(result, tuple) else (result,)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        return values[0] if len(values) == 1 else tuple(values)

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    assert len(cache) == 0

    print("cuMemAlloc / cuMemAllocManaged / cuMemAllocHost resolve through the driver", flush=True)
    d = int(ok(cu.cuMemAlloc(1000)))
    m = int(ok(cu.cuMemAllocManaged(5000, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value)))
    h = int(ok(cu.cuMemAllocHost(3000)))
    assert memhook.memory_type(d + 10) is M.CUDA
    assert memhook.lookup(d) == Region(d, 1000, M.CUDA, 0), memhook.lookup(d)
    assert memhook.memory_type(m, 5000) is M.CUDA_MANAGED
    assert memhook.lookup(m + 4999) == Region(m, 5000, M.CUDA_MANAGED, 0)
    assert memhook.memory_type(h) is M.CUDA_HOST
    assert memhook.lookup(h) == Region(h, 3000, M.CUDA_HOST, 0), memhook.lookup(h)
    assert memhook.memory_type(d, 1001) is M.UNKNOWN  # one byte past the allocation
    assert memhook.memory_type(host) is M.HOST and memhook.lookup(host) is None

    print("without hooks the answers are not remembered (no FREE would undo them)", flush=True)
    assert cache.regions() == [], cache.regions()

    print("a fake __cuda_array_interface__ over device memory", flush=True)

    class Dev:
        def __init__(self) -> None:
            self.__cuda_array_interface__ = {"data": (d, False), "shape": (250,),
                                             "typestr": "<f4", "version": 3}

    assert memhook.memory_type(Dev()) is M.CUDA

    print("memory_types resolves unknown pointers in a batch", flush=True)
    d2 = int(ok(cu.cuMemAlloc(1 << 20)))
    codes = memhook.memory_types(np.array([d2 + 5, host.ctypes.data, m + 1, h + 2, d2 + (1 << 20)],
                                          dtype=np.uint64))
    assert codes.tolist() == [1, 0, 2, 3, codes[4]], codes
    assert cache.lookup(d2, 1 << 20) is None

    print("UNKNOWN regions are verified with the driver", flush=True)
    d3 = int(ok(cu.cuMemAlloc(4096)))
    cache.update(d3, 4096, M.UNKNOWN)
    assert cache.memory_type(d3) is M.UNKNOWN
    assert memhook.memory_type(d3) is M.CUDA
    assert memhook.lookup(d3, 4096) == Region(d3, 4096, M.CUDA, 0)
    assert cache.memory_type(d3) is M.UNKNOWN  # (asked again next time: no hooks)

    print("registered host memory", flush=True)
    reg = np.zeros(8192, dtype=np.uint8)
    ok(cu.cuMemHostRegister(reg.ctypes.data, reg.nbytes, 0))
    assert memhook.memory_type(reg) is M.CUDA_HOST
    assert memhook.lookup(reg) == Region(reg.ctypes.data, 8192, M.CUDA_HOST, 0)

    print("frees are not seen without hooks: the driver, asked again, knows", flush=True)
    ok(cu.cuMemFree(d))
    assert memhook.memory_type(d) is M.HOST
    assert memhook.lookup(d) is None
    assert memhook.memory_types([d]).tolist() == [0]
    ok(cu.cuMemFree(d3))
    assert memhook.memory_type(d3) is M.HOST  # (its UNKNOWN region: asked again)

    print("ALL OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
