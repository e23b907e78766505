"""A first look at memhook's CUDA simulator, through cuda-python.

Run it on the simulator (no GPU needed):

    memhook sim run -- python examples/sim_quickstart.py

It allocates each kind of CUDA memory with the driver API and asks the driver
what each pointer is - the question memhook answers from its cache, without
asking the driver, once ``memhook.install()`` has put the hooks in (see the
README's "The hooks").  On a machine with a GPU, run it without
``memhook sim run`` to see the real driver give the same answers.
"""

from __future__ import annotations

import sys

from cuda.bindings import driver as cu


def check(result):
    """cuda-python returns (CUresult, values...); raise on error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise RuntimeError(f"CUDA call failed: {name.decode()}")
    return values[0] if len(values) == 1 else tuple(values)


def describe(label: str, ptr: int) -> None:
    mem_type = check(cu.cuPointerGetAttribute(
        cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr))
    managed = check(cu.cuPointerGetAttribute(
        cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr))
    base, size = check(cu.cuMemGetAddressRange(ptr))
    kind = cu.CUmemorytype(mem_type).name
    print(f"{label:<22} {int(ptr):#018x}  {kind:<22} managed={bool(managed)!s:<5} "
          f"range=[{int(base):#x}, +{int(size)})")


def main() -> int:
    check(cu.cuInit(0))
    version = check(cu.cuDriverGetVersion())
    device = check(cu.cuDeviceGet(0))
    name = check(cu.cuDeviceGetName(64, device)).split(b"\0")[0].decode()
    print(f"driver {version}, device 0: {name}")
    ctx = check(cu.cuDevicePrimaryCtxRetain(device))
    check(cu.cuCtxSetCurrent(ctx))

    dev = check(cu.cuMemAlloc(1 << 20))
    managed = check(cu.cuMemAllocManaged(4096, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL))
    host = check(cu.cuMemAllocHost(8192))
    stream = check(cu.cuStreamCreate(0))
    pooled = check(cu.cuMemAllocAsync(65536, stream))
    describe("cuMemAlloc", int(dev))
    describe("cuMemAllocManaged", int(managed))
    describe("cuMemAllocHost", int(host))
    describe("cuMemAllocAsync", int(pooled))

    check(cu.cuMemFreeAsync(pooled, stream))
    check(cu.cuStreamDestroy(stream))
    check(cu.cuMemFreeHost(host))
    check(cu.cuMemFree(managed))
    check(cu.cuMemFree(dev))
    err = cu.cuPointerGetAttribute(cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dev)[0]
    print(f"after cuMemFree the driver no longer knows {int(dev):#x}: {err.name}")
    check(cu.cuDevicePrimaryCtxRelease(device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
