"""The second of the two files whose allocations tests/pyframes names: the
driver through cuda-python's bindings (cuda.bindings.driver)."""

from __future__ import annotations

from cuda.bindings import driver as cu


def alloc_cudapy(size: int) -> int:
    err, ptr = cu.cuMemAlloc(size)  # ALLOC: alloc_cudapy
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return int(ptr)
