/*
 * cuda_signatures.h - the real signature of every hooked function (CUDA 13
 * ABI; the version-1 spellings use the 32-bit pre-3.2 ABI), as a pointer
 * type `name_fn` and the prototype of memhook's wrapper `mh_w_name`.
 */
#ifndef MEMHOOK_CUDA_SIGNATURES_H
#define MEMHOOK_CUDA_SIGNATURES_H

#include "caller.h"
#include "cuda_hooks.h"
#include "emit_inline.h"

/* The runtime's types, as cuda_runtime_api.h declares them. */
typedef int cudaError_t;
typedef CUstream cudaStream_t;
typedef CUmemoryPool cudaMemPool_t;
/* CUDA 13's layout (driver_types.h). */
struct cudaPointerAttributes {
    int type;  /* enum cudaMemoryType */
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8];
};

#define MH_SIGNATURE(ret, name, params)                                       \
    typedef ret(*name##_fn) params;                                           \
    MH_HIDDEN ret mh_w_##name params;

/* driver */
MH_SIGNATURE(CUresult, cuMemAlloc, (CUdeviceptr_v1 *dptr, unsigned int bytesize))
MH_SIGNATURE(CUresult, cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize))
MH_SIGNATURE(CUresult, cuMemAllocPitch, (CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                         unsigned int WidthInBytes, unsigned int Height,
                                         unsigned int ElementSizeBytes))
MH_SIGNATURE(CUresult, cuMemAllocPitch_v2, (CUdeviceptr *dptr, size_t *pPitch,
                                            size_t WidthInBytes, size_t Height,
                                            unsigned int ElementSizeBytes))
MH_SIGNATURE(CUresult, cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytesize,
                                           unsigned int flags))
MH_SIGNATURE(CUresult, cuMemFree, (CUdeviceptr_v1 dptr))
MH_SIGNATURE(CUresult, cuMemFree_v2, (CUdeviceptr dptr))
MH_SIGNATURE(CUresult, cuMemAllocHost, (void **pp, unsigned int bytesize))
MH_SIGNATURE(CUresult, cuMemAllocHost_v2, (void **pp, size_t bytesize))
MH_SIGNATURE(CUresult, cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int Flags))
MH_SIGNATURE(CUresult, cuMemFreeHost, (void *p))
MH_SIGNATURE(CUresult, cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset,
                                  CUmemGenericAllocationHandle handle,
                                  unsigned long long flags))
MH_SIGNATURE(CUresult, cuMemUnmap, (CUdeviceptr ptr, size_t size))
MH_SIGNATURE(CUresult, cuMemAllocAsync, (CUdeviceptr *dptr, size_t bytesize, CUstream hStream))
MH_SIGNATURE(CUresult, cuMemAllocAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize,
                                              CUstream hStream))
MH_SIGNATURE(CUresult, cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream))
MH_SIGNATURE(CUresult, cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream))
MH_SIGNATURE(CUresult, cuMemAllocFromPoolAsync, (CUdeviceptr *dptr, size_t bytesize,
                                                 CUmemoryPool pool, CUstream hStream))
MH_SIGNATURE(CUresult, cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr *dptr, size_t bytesize,
                                                      CUmemoryPool pool, CUstream hStream))
MH_SIGNATURE(CUresult, cuModuleGetGlobal, (CUdeviceptr_v1 *dptr, unsigned int *bytes,
                                           CUmodule hmod, const char *name))
MH_SIGNATURE(CUresult, cuModuleGetGlobal_v2, (CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                              const char *name))
MH_SIGNATURE(CUresult, cuLibraryGetGlobal, (CUdeviceptr *dptr, size_t *bytes,
                                            CUlibrary library, const char *name))
MH_SIGNATURE(CUresult, cuLibraryGetManaged, (CUdeviceptr *dptr, size_t *bytes,
                                             CUlibrary library, const char *name))
MH_SIGNATURE(CUresult, cuIpcOpenMemHandle, (CUdeviceptr *pdptr, CUipcMemHandle handle,
                                            unsigned int Flags))
MH_SIGNATURE(CUresult, cuIpcOpenMemHandle_v2, (CUdeviceptr *pdptr, CUipcMemHandle handle,
                                               unsigned int Flags))
MH_SIGNATURE(CUresult, cuIpcCloseMemHandle, (CUdeviceptr dptr))
MH_SIGNATURE(CUresult, cuMemHostRegister, (void *p, size_t bytesize, unsigned int Flags))
MH_SIGNATURE(CUresult, cuMemHostRegister_v2, (void *p, size_t bytesize, unsigned int Flags))
MH_SIGNATURE(CUresult, cuMemHostUnregister, (void *p))
MH_SIGNATURE(CUresult, cuDevicePrimaryCtxReset, (CUdevice dev))
MH_SIGNATURE(CUresult, cuDevicePrimaryCtxReset_v2, (CUdevice dev))
MH_SIGNATURE(CUresult, cuDevicePrimaryCtxRelease, (CUdevice dev))
MH_SIGNATURE(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice dev))
MH_SIGNATURE(CUresult, cuCtxDestroy, (CUcontext ctx))
MH_SIGNATURE(CUresult, cuCtxDestroy_v2, (CUcontext ctx))
MH_SIGNATURE(CUresult, cuPointerGetAttribute, (void *data, CUpointer_attribute attribute,
                                               CUdeviceptr ptr))
MH_SIGNATURE(CUresult, cuPointerGetAttributes, (unsigned int numAttributes,
                                                CUpointer_attribute *attributes, void **data,
                                                CUdeviceptr ptr))

/* runtime */
MH_SIGNATURE(cudaError_t, cudaMalloc, (void **devPtr, size_t size))
MH_SIGNATURE(cudaError_t, cudaMallocManaged, (void **devPtr, size_t size, unsigned int flags))
MH_SIGNATURE(cudaError_t, cudaMallocPitch, (void **devPtr, size_t *pitch, size_t width,
                                            size_t height))
MH_SIGNATURE(cudaError_t, cudaMallocAsync, (void **devPtr, size_t size, cudaStream_t hStream))
MH_SIGNATURE(cudaError_t, cudaMallocAsync_ptsz, (void **devPtr, size_t size,
                                                 cudaStream_t hStream))
MH_SIGNATURE(cudaError_t, cudaMallocFromPoolAsync, (void **ptr, size_t size,
                                                    cudaMemPool_t memPool,
                                                    cudaStream_t stream))
MH_SIGNATURE(cudaError_t, cudaMallocFromPoolAsync_ptsz, (void **ptr, size_t size,
                                                         cudaMemPool_t memPool,
                                                         cudaStream_t stream))
MH_SIGNATURE(cudaError_t, cudaMallocHost, (void **ptr, size_t size))
MH_SIGNATURE(cudaError_t, cudaHostAlloc, (void **pHost, size_t size, unsigned int flags))
MH_SIGNATURE(cudaError_t, cudaFree, (void *devPtr))
MH_SIGNATURE(cudaError_t, cudaFreeAsync, (void *devPtr, cudaStream_t hStream))
MH_SIGNATURE(cudaError_t, cudaFreeAsync_ptsz, (void *devPtr, cudaStream_t hStream))
MH_SIGNATURE(cudaError_t, cudaFreeHost, (void *ptr))
MH_SIGNATURE(cudaError_t, cudaGetSymbolAddress, (void **devPtr, const void *symbol))
MH_SIGNATURE(cudaError_t, cudaHostRegister, (void *ptr, size_t size, unsigned int flags))
MH_SIGNATURE(cudaError_t, cudaHostUnregister, (void *ptr))
MH_SIGNATURE(cudaError_t, cudaPointerGetAttributes, (struct cudaPointerAttributes *attributes,
                                                     const void *ptr))

#undef MH_SIGNATURE

/* ---- the two shapes most wrappers share ---- */

/* How every wrapper starts: find what it calls (real_), and pass straight
 * through when not recording - hooks off, nested inside another wrapper, or
 * `pass_through` (a call that hands out no memory). */
#define MH_WRAPPER_ENTER(ret_t, name, args, pass_through)                      \
    name##_fn real_ = (name##_fn)mh_next(MH_FN_##name);                       \
    if (real_ == NULL)                                                        \
        return (ret_t)mh_unresolved(MH_FN_##name);                            \
    if ((pass_through) || !mh_record_begin())                                 \
        return real_ args;                                                    \
    MH_CALLER_NOTE();

/* An allocating call: pass through when not recording; else call, then
 * emit one ALLOC with the address and size the expressions compute (they
 * may read the call's outputs; they are only evaluated on success). */
#define MH_ALLOC_WRAPPER(ret_t, name, params, args, addr_expr, size_expr, mem_type, device)  \
    ret_t mh_w_##name params                                                  \
    {                                                                         \
        MH_WRAPPER_ENTER(ret_t, name, args, false)                            \
        ret_t r_ = real_ args;                                                \
        mh_stamp stamp_ = mh_stamp_now(true);                                 \
        uint64_t addr_ = r_ == 0 ? (uint64_t)(addr_expr) : 0;                 \
        uint64_t size_ = (uint64_t)(size_expr);                               \
        mh_emit_alloc(MH_FN_##name, stamp_, (int)r_, addr_, size_, mem_type, device); \
        mh_record_end();                                                      \
        return r_;                                                            \
    }

/* A freeing call: free(NULL) is silent; otherwise the FREE is planned (and
 * usually emitted) before the real call - see mh_free_begin. */
#define MH_FREE_WRAPPER(ret_t, name, params, args, addr_expr, given_size)     \
    ret_t mh_w_##name params                                                  \
    {                                                                         \
        MH_WRAPPER_ENTER(ret_t, name, args, false)                            \
        uint64_t addr_ = (uint64_t)(addr_expr);                               \
        if (addr_ == 0) {                                                     \
            ret_t r0_ = real_ args;                                           \
            mh_record_end();                                                  \
            return r0_;                                                       \
        }                                                                     \
        mh_free_plan plan_;                                                   \
        mh_free_begin(MH_FN_##name, addr_, (uint64_t)(given_size), &plan_);   \
        ret_t r_ = real_ args;                                                \
        mh_free_end(MH_FN_##name, &plan_, (int)r_);                           \
        mh_record_end();                                                      \
        return r_;                                                            \
    }

#endif
