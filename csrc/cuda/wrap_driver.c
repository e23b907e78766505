/*
 * wrap_driver.c - wrappers of the driver API entry points of
 * hook_table.def.  Sizes: the requested bytes; pitched: pitch * height; globals:
 * the global's size; IPC: the mapped allocation's size.  Types: what the
 * call decides (VMM maps: where their handle's memory lives; UNKNOWN for
 * explicit pools, which may be host-located: memory_type() asks the driver).
 * Context teardowns free a context's every allocation at once: one marker.
 */
#include "cuda_signatures.h"

#define CUR MH_DEVICE_CURRENT

/* ---- device memory ---- */

MH_ALLOC_WRAPPER(CUresult, cuMemAlloc, (CUdeviceptr_v1 *dptr, unsigned int bytesize),
                 (dptr, bytesize), *dptr, bytesize, MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(CUresult, cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize),
                 (dptr, bytesize), *dptr, bytesize, MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(CUresult, cuMemAllocPitch,
                 (CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                  unsigned int Height, unsigned int ElementSizeBytes),
                 (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes), *dptr,
                 r_ == 0 ? (uint64_t)*pPitch * Height : (uint64_t)WidthInBytes * Height,
                 MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(CUresult, cuMemAllocPitch_v2,
                 (CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                  unsigned int ElementSizeBytes),
                 (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes), *dptr,
                 r_ == 0 ? (uint64_t)*pPitch * Height : (uint64_t)WidthInBytes * Height,
                 MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(CUresult, cuMemAllocManaged,
                 (CUdeviceptr *dptr, size_t bytesize, unsigned int flags),
                 (dptr, bytesize, flags), *dptr, bytesize, MEMHOOK_MEM_CUDA_MANAGED, CUR)
MH_FREE_WRAPPER(CUresult, cuMemFree, (CUdeviceptr_v1 dptr), (dptr), dptr, 0)
MH_FREE_WRAPPER(CUresult, cuMemFree_v2, (CUdeviceptr dptr), (dptr), dptr, 0)

/* ---- page-locked host memory ---- */

MH_ALLOC_WRAPPER(CUresult, cuMemAllocHost, (void **pp, unsigned int bytesize), (pp, bytesize),
                 (uintptr_t)*pp, bytesize, MEMHOOK_MEM_CUDA_HOST, CUR)
MH_ALLOC_WRAPPER(CUresult, cuMemAllocHost_v2, (void **pp, size_t bytesize), (pp, bytesize),
                 (uintptr_t)*pp, bytesize, MEMHOOK_MEM_CUDA_HOST, CUR)
MH_ALLOC_WRAPPER(CUresult, cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int Flags),
                 (pp, bytesize, Flags), (uintptr_t)*pp, bytesize, MEMHOOK_MEM_CUDA_HOST, CUR)
MH_FREE_WRAPPER(CUresult, cuMemFreeHost, (void *p), (p), (uintptr_t)p, 0)
MH_ALLOC_WRAPPER(CUresult, cuMemHostRegister, (void *p, size_t bytesize, unsigned int Flags),
                 (p, bytesize, Flags), (uintptr_t)p, bytesize, MEMHOOK_MEM_CUDA_HOST, CUR)
MH_ALLOC_WRAPPER(CUresult, cuMemHostRegister_v2, (void *p, size_t bytesize, unsigned int Flags),
                 (p, bytesize, Flags), (uintptr_t)p, bytesize, MEMHOOK_MEM_CUDA_HOST, CUR)
MH_FREE_WRAPPER(CUresult, cuMemHostUnregister, (void *p), (p), (uintptr_t)p, 0)

/* ---- virtual memory management: a map is an allocation of its range ---- */

/* The handle says where the memory lives (device n, or host), so a map is
 * typed like any allocation and adjacent maps of one device merge in the
 * cache - PyTorch's expandable segments map a tensor piece by piece. */
CUresult mh_w_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                       CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    MH_WRAPPER_ENTER(CUresult, cuMemMap, (ptr, size, offset, handle, flags), false)
    CUresult r = real_(ptr, size, offset, handle, flags);
    mh_stamp stamp = mh_stamp_now(true);
    int mem_type = MEMHOOK_MEM_UNKNOWN, device = -1;
    if (r == CUDA_SUCCESS) {
        mh_handle_kind(handle, &mem_type, &device);
        mh_pointer_attributes_note_vmm(ptr, size);  /* RANGE_*: the reservation */
    }
    mh_emit_alloc(MH_FN_cuMemMap, stamp, r, r == CUDA_SUCCESS ? ptr : 0, size, mem_type, device);
    mh_record_end();
    return r;
}
MH_FREE_WRAPPER(CUresult, cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size), ptr, size)

/* ---- stream-ordered allocation: cuMemFreeAsync is a FREE at call time ---- */

MH_ALLOC_WRAPPER(CUresult, cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream s),
                 (dptr, bytesize, s), *dptr, bytesize, MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(CUresult, cuMemAllocAsync_ptsz,
                 (CUdeviceptr *dptr, size_t bytesize, CUstream s), (dptr, bytesize, s), *dptr,
                 bytesize, MEMHOOK_MEM_CUDA, CUR)
MH_FREE_WRAPPER(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream s), (dptr, s), dptr, 0)
MH_FREE_WRAPPER(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream s), (dptr, s), dptr,
                0)
MH_ALLOC_WRAPPER(CUresult, cuMemAllocFromPoolAsync,
                 (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s),
                 (dptr, bytesize, pool, s), *dptr, bytesize, MEMHOOK_MEM_UNKNOWN, -1)
MH_ALLOC_WRAPPER(CUresult, cuMemAllocFromPoolAsync_ptsz,
                 (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s),
                 (dptr, bytesize, pool, s), *dptr, bytesize, MEMHOOK_MEM_UNKNOWN, -1)

/* ---- module and library globals: the size comes from the call itself,
 * through the caller's `bytes` or, when the caller passed NULL, ours ---- */

#define MH_GLOBAL_WRAPPER(name, ptr_t, size_t_, handle_t, mem_type)              \
    CUresult mh_w_##name(ptr_t *dptr, size_t_ *bytes, handle_t h, const char *n)  \
    {                                                                            \
        /* dptr NULL: a size-only query hands out no memory - no event */      \
        MH_WRAPPER_ENTER(CUresult, name, (dptr, bytes, h, n), dptr == NULL)      \
        size_t_ own = 0;                                                         \
        size_t_ *sizep = bytes != NULL ? bytes : &own;                           \
        CUresult r = real_(dptr, sizep, h, n);                                   \
        mh_stamp stamp = mh_stamp_now(true);                                     \
        if (r == CUDA_SUCCESS) /* a __managed__ one is typed CUDA here */       \
            mh_pointer_attributes_note_irregular((uint64_t)*dptr, (uint64_t)*sizep); \
        mh_emit_alloc(MH_FN_##name, stamp, r, r == CUDA_SUCCESS ? (uint64_t)*dptr : 0, \
                      r == CUDA_SUCCESS ? (uint64_t)*sizep : 0, mem_type, CUR);  \
        mh_record_end();                                                         \
        return r;                                                                \
    }

MH_GLOBAL_WRAPPER(cuModuleGetGlobal, CUdeviceptr_v1, unsigned int, CUmodule, MEMHOOK_MEM_CUDA)
MH_GLOBAL_WRAPPER(cuModuleGetGlobal_v2, CUdeviceptr, size_t, CUmodule, MEMHOOK_MEM_CUDA)
MH_GLOBAL_WRAPPER(cuLibraryGetGlobal, CUdeviceptr, size_t, CUlibrary, MEMHOOK_MEM_CUDA)
MH_GLOBAL_WRAPPER(cuLibraryGetManaged, CUdeviceptr, size_t, CUlibrary,
                  MEMHOOK_MEM_CUDA_MANAGED)

/* ---- IPC: the opened mapping's size is the exporter's allocation's ---- */

static uint64_t mapped_size(CUresult r, const CUdeviceptr *pdptr)
{
    uint64_t base = 0, size = 0;
    if (r != CUDA_SUCCESS || !mh_driver_range(*pdptr, &base, &size))
        return 0;
    /* (typed with the current device: the exporter's may be another) */
    mh_pointer_attributes_note_irregular(*pdptr, size);
    return size;
}

MH_ALLOC_WRAPPER(CUresult, cuIpcOpenMemHandle,
                 (CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags),
                 (pdptr, handle, Flags), *pdptr, mapped_size(r_, pdptr), MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(CUresult, cuIpcOpenMemHandle_v2,
                 (CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags),
                 (pdptr, handle, Flags), *pdptr, mapped_size(r_, pdptr), MEMHOOK_MEM_CUDA, CUR)
MH_FREE_WRAPPER(CUresult, cuIpcCloseMemHandle, (CUdeviceptr dptr), (dptr), dptr, 0)

/* ---- context teardown: every allocation of the context is gone ----
 *
 * No FREE is hooked for those allocations, so the call itself is the
 * event: after a successful teardown, the live table starts a new
 * generation (its records of that context name memory that no longer
 * exists, and their addresses will be handed out again: a record of
 * another context is not believed either, its FREE asks the driver -
 * live_table.c), then one marker goes out, its epoch bumped and its
 * stamp taken after the call (mh_emit_context_reset, emit.c, says why
 * after).  A failed call is an ordinary event with its result (the cache
 * ignores it).  A release that is not the last frees nothing and records
 * nothing: the driver says whether the primary context is still active
 * after it (another thread retaining it at once, between the two calls,
 * would hide the last release - a race of the program's own with its own
 * teardown). */

#define MH_PRIMARY_RESET_WRAPPER(name)                                          \
    CUresult mh_w_##name(CUdevice dev)                                           \
    {                                                                            \
        MH_WRAPPER_ENTER(CUresult, name, (dev), false)                           \
        CUresult r = real_(dev);                                                 \
        mh_emit_context_reset(MH_FN_##name, (int)r, dev);                        \
        mh_record_end();                                                         \
        return r;                                                                \
    }

#define MH_PRIMARY_RELEASE_WRAPPER(name)                                        \
    CUresult mh_w_##name(CUdevice dev)                                           \
    {                                                                            \
        MH_WRAPPER_ENTER(CUresult, name, (dev), false)                           \
        CUresult r = real_(dev);                                                 \
        if (r != CUDA_SUCCESS || !mh_primary_ctx_active(dev))                    \
            mh_emit_context_reset(MH_FN_##name, (int)r, dev);                    \
        mh_record_end();                                                         \
        return r;                                                                \
    }

#define MH_CTX_DESTROY_WRAPPER(name)                                            \
    CUresult mh_w_##name(CUcontext ctx)                                          \
    {                                                                            \
        MH_WRAPPER_ENTER(CUresult, name, (ctx), false)                           \
        int device = mh_context_device(ctx); /* before: it names no context after */ \
        CUresult r = real_(ctx);                                                 \
        mh_emit_context_reset(MH_FN_##name, (int)r, device);                     \
        mh_record_end();                                                         \
        return r;                                                                \
    }

MH_PRIMARY_RESET_WRAPPER(cuDevicePrimaryCtxReset)
MH_PRIMARY_RESET_WRAPPER(cuDevicePrimaryCtxReset_v2)
MH_PRIMARY_RELEASE_WRAPPER(cuDevicePrimaryCtxRelease)
MH_PRIMARY_RELEASE_WRAPPER(cuDevicePrimaryCtxRelease_v2)
MH_CTX_DESTROY_WRAPPER(cuCtxDestroy)
MH_CTX_DESTROY_WRAPPER(cuCtxDestroy_v2)
