/*
 * wrap_runtime.c - wrappers of the runtime API entry points of
 * hook_table.def.  reloc routes calls here (GOT slots of objects that link
 * libcudart dynamically, and dlsym answers).  The runtime reaches the driver
 * through entry points that are hooked too; those inner calls pass through
 * unrecorded (mh_hook_depth), so one runtime call is one event, named after
 * the runtime function.
 */
#include "cuda_signatures.h"

#define CUR MH_DEVICE_CURRENT
#define PTR(pp) ((uint64_t)(uintptr_t)*(pp))

MH_ALLOC_WRAPPER(cudaError_t, cudaMalloc, (void **devPtr, size_t size), (devPtr, size),
                 PTR(devPtr), size, MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(cudaError_t, cudaMallocManaged,
                 (void **devPtr, size_t size, unsigned int flags), (devPtr, size, flags),
                 PTR(devPtr), size, MEMHOOK_MEM_CUDA_MANAGED, CUR)
MH_ALLOC_WRAPPER(cudaError_t, cudaMallocPitch,
                 (void **devPtr, size_t *pitch, size_t width, size_t height),
                 (devPtr, pitch, width, height), PTR(devPtr),
                 r_ == 0 ? (uint64_t)*pitch * height : (uint64_t)width * height,
                 MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(cudaError_t, cudaMallocAsync, (void **devPtr, size_t size, cudaStream_t s),
                 (devPtr, size, s), PTR(devPtr), size, MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(cudaError_t, cudaMallocAsync_ptsz,
                 (void **devPtr, size_t size, cudaStream_t s), (devPtr, size, s), PTR(devPtr),
                 size, MEMHOOK_MEM_CUDA, CUR)
MH_ALLOC_WRAPPER(cudaError_t, cudaMallocFromPoolAsync,
                 (void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s),
                 (ptr, size, pool, s), PTR(ptr), size, MEMHOOK_MEM_UNKNOWN, -1)
MH_ALLOC_WRAPPER(cudaError_t, cudaMallocFromPoolAsync_ptsz,
                 (void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t s),
                 (ptr, size, pool, s), PTR(ptr), size, MEMHOOK_MEM_UNKNOWN, -1)
MH_ALLOC_WRAPPER(cudaError_t, cudaMallocHost, (void **ptr, size_t size), (ptr, size), PTR(ptr),
                 size, MEMHOOK_MEM_CUDA_HOST, CUR)
MH_ALLOC_WRAPPER(cudaError_t, cudaHostAlloc, (void **pHost, size_t size, unsigned int flags),
                 (pHost, size, flags), PTR(pHost), size, MEMHOOK_MEM_CUDA_HOST, CUR)
MH_ALLOC_WRAPPER(cudaError_t, cudaHostRegister, (void *ptr, size_t size, unsigned int flags),
                 (ptr, size, flags), (uintptr_t)ptr, size, MEMHOOK_MEM_CUDA_HOST, CUR)

MH_FREE_WRAPPER(cudaError_t, cudaFree, (void *devPtr), (devPtr), (uintptr_t)devPtr, 0)
MH_FREE_WRAPPER(cudaError_t, cudaFreeAsync, (void *devPtr, cudaStream_t s), (devPtr, s),
                (uintptr_t)devPtr, 0)
MH_FREE_WRAPPER(cudaError_t, cudaFreeAsync_ptsz, (void *devPtr, cudaStream_t s), (devPtr, s),
                (uintptr_t)devPtr, 0)
MH_FREE_WRAPPER(cudaError_t, cudaFreeHost, (void *ptr), (ptr), (uintptr_t)ptr, 0)
MH_FREE_WRAPPER(cudaError_t, cudaHostUnregister, (void *ptr), (ptr), (uintptr_t)ptr, 0)

/* A __device__ variable: its size comes from the same runtime's
 * cudaGetSymbolSize (called nested, so unrecorded). */
static uint64_t symbol_size(cudaError_t r, const void *symbol)
{
    uint64_t size = 0;
    if (r != 0 || !mh_runtime_symbol_size(mh_next(MH_FN_cudaGetSymbolAddress), symbol, &size))
        return 0;
    return size;
}

/* A __managed__ variable is managed memory, a __device__ or __constant__
 * one device memory: the driver says which (a nested, unrecorded query). */
static int symbol_type(cudaError_t r, void **devPtr)
{
    return r == 0 && mh_driver_is_managed(PTR(devPtr)) ? MEMHOOK_MEM_CUDA_MANAGED
                                                       : MEMHOOK_MEM_CUDA;
}

MH_ALLOC_WRAPPER(cudaError_t, cudaGetSymbolAddress, (void **devPtr, const void *symbol),
                 (devPtr, symbol), PTR(devPtr), symbol_size(r_, symbol),
                 symbol_type(r_, devPtr), CUR)
