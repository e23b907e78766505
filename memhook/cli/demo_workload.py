"""The workload of ``memhook demo``: a few CUDA allocations of each kind.

It uses cuda-python's driver bindings, so it runs the same on a GPU and on
memhook's simulator.  ``memhook demo`` runs it under ``memhook trace``; each
numbered step below shows up as one or a few lines of that trace, and the
last two are there to fill the summary's "failed calls" and "allocations
never freed" sections.  Run it yourself with::

    memhook trace --sim -- python -m memhook.cli.demo_workload

(not from the repository root after a plain ``pip install .``: Python would
import the unbuilt source tree there; see docs/architecture.md.)
"""

from __future__ import annotations

from cuda.bindings import driver as cu

MiB = 1 << 20


def check(result):
    """cuda-python returns (CUresult, values...): raise on an error."""
    err, *values = result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA call failed: {err.name}")
    return values[0] if len(values) == 1 else tuple(values)


def main() -> None:
    check(cu.cuInit(0))
    device = check(cu.cuDeviceGet(0))
    context = check(cu.cuDevicePrimaryCtxRetain(device))
    check(cu.cuCtxSetCurrent(context))

    # 1. Device memory: 64 B, 1 MiB and 256 MiB, freed in reverse order.
    buffers = [check(cu.cuMemAlloc(size)) for size in (64, 1 * MiB, 256 * MiB)]
    for buffer in reversed(buffers):
        check(cu.cuMemFree(buffer))

    # 2. Page-locked host memory, as a staging buffer would be.
    staging = check(cu.cuMemAllocHost(4 * MiB))
    check(cu.cuMemFreeHost(staging))

    # 3. Managed (unified) memory.
    managed = check(cu.cuMemAllocManaged(2 * MiB, cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value))
    check(cu.cuMemFree(managed))

    # 4. Stream-ordered allocation: the free is an event at call time.
    stream = check(cu.cuStreamCreate(0))
    scratch = check(cu.cuMemAllocAsync(32 * MiB, stream))
    check(cu.cuMemFreeAsync(scratch, stream))
    check(cu.cuStreamSynchronize(stream))
    check(cu.cuStreamDestroy(stream))

    # 5. A request no GPU can meet: CUDA_ERROR_OUT_OF_MEMORY, in "failed calls".
    err, _ = cu.cuMemAlloc(1 << 50)
    assert err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, err

    # 6. A leak: allocated and never freed, in "allocations never freed".
    check(cu.cuMemAlloc(8 * MiB))

    print("demo workload: done")


if __name__ == "__main__":
    main()
