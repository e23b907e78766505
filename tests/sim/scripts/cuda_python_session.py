"""A cuda-python (cuda.bindings.driver) session; run on the simulator by
tests/sim/test_cuda_python.py, and on a real GPU as-is.

Every step asserts what the driver must answer; the script prints one line
per step and "ALL OK" at the end.
"""

from __future__ import annotations

import sys

from cuda.bindings import driver as cu

R = cu.CUresult
A = cu.CUpointer_attribute


def ok(result):
    err, *values = result if isinstance(result, tuple) else (result,)
    assert err == R.CUDA_SUCCESS, f"expected CUDA_SUCCESS, got {err!r}"
    return values[0] if len(values) == 1 else tuple(values)


def fails(result, expected):
    err = result[0] if isinstance(result, tuple) else result
    assert err == expected, f"expected {expected!r}, got {err!r}"


def attr(name, ptr):
    return ok(cu.cuPointerGetAttribute(getattr(A, name), ptr))


def step(label):
    print(label, flush=True)


def main() -> int:
    step("before cuInit: NOT_INITIALIZED")
    fails(cu.cuMemAlloc(16), R.CUDA_ERROR_NOT_INITIALIZED)
    ok(cu.cuInit(0))
    assert ok(cu.cuDriverGetVersion()) >= 12000
    assert ok(cu.cuDeviceGetCount()) >= 1
    dev = ok(cu.cuDeviceGet(0))

    step("no context: INVALID_CONTEXT")
    fails(cu.cuMemAlloc(16), R.CUDA_ERROR_INVALID_CONTEXT)

    step("primary context")
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    assert int(ok(cu.cuCtxGetCurrent())) == int(ctx)
    assert int(ok(cu.cuCtxGetDevice())) == int(dev)

    step("cuMemAlloc / attributes / range / cuMemFree")
    ptr = ok(cu.cuMemAlloc(1000))
    assert attr("CU_POINTER_ATTRIBUTE_MEMORY_TYPE", ptr) == cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    assert attr("CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL", ptr) == 0
    assert not attr("CU_POINTER_ATTRIBUTE_IS_MANAGED", ptr)
    base, size = ok(cu.cuMemGetAddressRange(int(ptr) + 10))
    assert (int(base), int(size)) == (int(ptr), 1000)
    host = bytes(range(256)) * 4
    ok(cu.cuMemcpyHtoD(ptr, host, 1000))
    back = bytearray(1000)
    ok(cu.cuMemcpyDtoH(back, ptr, 1000))
    assert bytes(back) == host[:1000]
    ok(cu.cuMemFree(ptr))
    fails(cu.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr),
          R.CUDA_ERROR_INVALID_VALUE)

    step("cuMemAllocManaged")
    managed = ok(cu.cuMemAllocManaged(4096, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value))
    assert attr("CU_POINTER_ATTRIBUTE_IS_MANAGED", managed)
    ok(cu.cuMemFree(managed))

    step("cuMemAllocHost")
    hptr = ok(cu.cuMemAllocHost(8192))
    assert attr("CU_POINTER_ATTRIBUTE_MEMORY_TYPE", hptr) == cu.CUmemorytype.CU_MEMORYTYPE_HOST
    ok(cu.cuMemFreeHost(hptr))

    step("cuMemAllocAsync / cuMemFreeAsync")
    stream = ok(cu.cuStreamCreate(0))
    aptr = ok(cu.cuMemAllocAsync(5000, stream))
    pool = attr("CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE", aptr)
    assert int(pool) != 0
    assert int(pool) == int(ok(cu.cuDeviceGetDefaultMemPool(dev)))
    assert attr("CU_POINTER_ATTRIBUTE_MEMORY_TYPE", aptr) == cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    base, size = ok(cu.cuMemGetAddressRange(aptr))
    assert (int(base), int(size)) == (int(aptr), 5000)
    ok(cu.cuMemFreeAsync(aptr, stream))
    ok(cu.cuStreamSynchronize(stream))
    fails(cu.cuMemGetAddressRange(aptr), R.CUDA_ERROR_NOT_FOUND)
    ok(cu.cuStreamDestroy(stream))

    step("pointer attributes (plural)")
    ptr = ok(cu.cuMemAlloc(4096))
    names = [A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
             A.CU_POINTER_ATTRIBUTE_IS_MANAGED, A.CU_POINTER_ATTRIBUTE_RANGE_SIZE]
    values = ok(cu.cuPointerGetAttributes(len(names), names, ptr))
    assert values[0] == cu.CUmemorytype.CU_MEMORYTYPE_DEVICE and values[1] == 0
    assert not values[2] and values[3] == 4096
    ok(cu.cuMemFree(ptr))

    step("VMM: create / reserve / map / set access / unmap / release")
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    gran = ok(cu.cuMemGetAllocationGranularity(
        prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
    assert gran > 0
    handle = ok(cu.cuMemCreate(2 * gran, prop, 0))
    va = ok(cu.cuMemAddressReserve(4 * gran, 0, 0, 0))
    ok(cu.cuMemMap(int(va) + gran, 2 * gran, 0, handle, 0))
    desc = cu.CUmemAccessDesc()
    desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = 0
    desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    ok(cu.cuMemSetAccess(int(va) + gran, 2 * gran, [desc], 1))
    mapped = int(va) + gran
    assert attr("CU_POINTER_ATTRIBUTE_MEMORY_TYPE", mapped) == cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    assert int(attr("CU_POINTER_ATTRIBUTE_RANGE_START_ADDR", mapped)) == int(va)
    assert attr("CU_POINTER_ATTRIBUTE_RANGE_SIZE", mapped) == 4 * gran
    base, size = ok(cu.cuMemGetAddressRange(mapped + 100))
    assert (int(base), int(size)) == (mapped, 2 * gran)
    ok(cu.cuMemsetD8(mapped, 0x5A, 64))
    out = bytearray(64)
    ok(cu.cuMemcpyDtoH(out, mapped, 64))
    assert out == b"\x5a" * 64
    ok(cu.cuMemUnmap(mapped, 2 * gran))
    fails(cu.cuMemGetAddressRange(mapped), R.CUDA_ERROR_NOT_FOUND)
    ok(cu.cuMemRelease(handle))
    ok(cu.cuMemAddressFree(va, 4 * gran))

    step("errors")
    fails(cu.cuMemFree(0xDEAD0000), R.CUDA_ERROR_INVALID_VALUE)
    name = ok(cu.cuGetErrorName(R.CUDA_ERROR_OUT_OF_MEMORY))
    assert name == b"CUDA_ERROR_OUT_OF_MEMORY"

    ok(cu.cuDevicePrimaryCtxRelease(dev))
    print("ALL OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
