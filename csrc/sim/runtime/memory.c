/*
 * memory.c - the runtime's allocation entry points, each a thin layer over
 * the driver entry it corresponds to (so that memhook sees exactly one
 * driver call per runtime call):
 *
 *   cudaMalloc               cuMemAlloc_v2
 *   cudaMallocManaged        cuMemAllocManaged
 *   cudaMallocPitch          cuMemAllocPitch_v2 (element size 4, see below)
 *   cudaMallocHost           cuMemHostAlloc (flags 0)
 *   cudaHostAlloc            cuMemHostAlloc
 *   cudaFree / cudaFreeHost  cuMemFree_v2 / cuMemFreeHost
 *   cudaHostRegister/...     cuMemHostRegister_v2 / cuMemHostUnregister
 *   cudaMallocAsync(_ptsz)   cuMemAllocAsync(_ptsz)
 *   cudaMallocFromPoolAsync  cuMemAllocFromPoolAsync(_ptsz)
 *   cudaFreeAsync(_ptsz)     cuMemFreeAsync(_ptsz)
 *
 * Runtime behaviour that differs from the driver: a zero-byte request
 * succeeds with a NULL pointer and calls no driver allocator; freeing NULL
 * succeeds.  Both still initialise the runtime and the thread's context
 * (cudaFree(0) is the customary way to create the context).
 */
#include <stdint.h>

#include "cudart_internal.h"

/* The runtime's flag values are the driver's; keep it that way. */
_Static_assert(cudaHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE, "flag");
_Static_assert(cudaHostAllocMapped == CU_MEMHOSTALLOC_DEVICEMAP, "flag");
_Static_assert(cudaHostAllocWriteCombined == CU_MEMHOSTALLOC_WRITECOMBINED, "flag");
_Static_assert(cudaHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE, "flag");
_Static_assert(cudaHostRegisterMapped == CU_MEMHOSTREGISTER_DEVICEMAP, "flag");
_Static_assert(cudaHostRegisterIoMemory == CU_MEMHOSTREGISTER_IOMEMORY, "flag");
_Static_assert(cudaHostRegisterReadOnly == CU_MEMHOSTREGISTER_READ_ONLY, "flag");
_Static_assert(cudaMemAttachGlobal == CU_MEM_ATTACH_GLOBAL, "flag");
_Static_assert(cudaMemAttachHost == CU_MEM_ATTACH_HOST, "flag");
_Static_assert(sizeof(struct cudaMemPoolProps) == sizeof(CUmemPoolProps), "layout");
_Static_assert(offsetof(struct cudaMemPoolProps, maxSize) == offsetof(CUmemPoolProps, maxSize),
               "layout");
_Static_assert(offsetof(struct cudaMemPoolProps, usage) == offsetof(CUmemPoolProps, usage),
               "layout");

#define HOST_ALLOC_FLAGS (cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)
#define HOST_REGISTER_FLAGS                                                       \
    (cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory | \
     cudaHostRegisterReadOnly)

/* cuMemAllocPitch's ElementSizeBytes must be 4, 8 or 16; the runtime has no
 * element size to pass, so it passes the smallest value the driver accepts.
 * The simulated driver's pitch does not depend on it either way. */
#define PITCH_ELEMENT_SIZE 4u

/* Store a driver pointer in a void ** out-parameter: NULL on failure. */
static cudaError_t out_ptr(void **out, CUdeviceptr p, cudaError_t err)
{
    *out = err == cudaSuccess ? (void *)(uintptr_t)p : NULL;
    return memhook_cudart_ret(err);
}

CUDART_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (devPtr == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    return out_ptr(devPtr, p, CUDART_CALL(cuMemAlloc, &p, size));
}

CUDART_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    if (devPtr == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    /* The documentation calls size 0 invalid, but libcudart 13 answers
     * cudaSuccess (tests/data/h200-runtime-facts.json): follow the library. */
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    return out_ptr(devPtr, p, CUDART_CALL(cuMemAllocManaged, &p, size, flags));
}

CUDART_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width,
                                       size_t height)
{
    if (devPtr == NULL || pitch == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    if (width == 0 || height == 0) {
        *devPtr = NULL;
        *pitch = width;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    size_t pp = 0;
    cudaError_t err = CUDART_CALL(cuMemAllocPitch, &p, &pp, width, height, PITCH_ELEMENT_SIZE);
    *pitch = err == cudaSuccess ? pp : 0;
    return out_ptr(devPtr, p, err);
}

static cudaError_t host_alloc(void **pHost, size_t size, unsigned int flags)
{
    if (pHost == NULL || (flags & ~(unsigned int)HOST_ALLOC_FLAGS) != 0)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    if (size == 0) {
        *pHost = NULL;
        return cudaSuccess;
    }
    void *p = NULL;
    cudaError_t err = CUDART_CALL(cuMemHostAlloc, &p, size, flags);
    *pHost = err == cudaSuccess ? p : NULL;
    return memhook_cudart_ret(err);
}

CUDART_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return host_alloc(ptr, size, cudaHostAllocDefault);
}

CUDART_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    return host_alloc(pHost, size, flags);
}

CUDART_API cudaError_t cudaFree(void *devPtr)
{
    CUDART_ENSURE();
    if (devPtr == NULL)
        return cudaSuccess;
    return memhook_cudart_ret(CUDART_CALL(cuMemFree, (CUdeviceptr)(uintptr_t)devPtr));
}

CUDART_API cudaError_t cudaFreeHost(void *ptr)
{
    CUDART_ENSURE();
    if (ptr == NULL)
        return cudaSuccess;
    return memhook_cudart_ret(CUDART_CALL(cuMemFreeHost, ptr));
}

CUDART_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    if (ptr == NULL || size == 0 || (flags & ~(unsigned int)HOST_REGISTER_FLAGS) != 0)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    return memhook_cudart_ret(CUDART_CALL(cuMemHostRegister, ptr, size, flags));
}

CUDART_API cudaError_t cudaHostUnregister(void *ptr)
{
    if (ptr == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    return memhook_cudart_ret(CUDART_CALL(cuMemHostUnregister, ptr));
}

CUDART_API cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    if (free == NULL || total == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    return memhook_cudart_ret(CUDART_CALL(cuMemGetInfo, free, total));
}

/* ---- stream-ordered allocation ------------------------------------------------ */

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t stream, bool ptsz)
{
    if (devPtr == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    cudaError_t err = ptsz ? CUDART_CALL(cuMemAllocAsync_ptsz, &p, size, stream)
                           : CUDART_CALL(cuMemAllocAsync, &p, size, stream);
    return out_ptr(devPtr, p, err);
}

CUDART_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, hStream, false);
}

CUDART_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, hStream, true);
}

static cudaError_t malloc_from_pool(void **ptr, size_t size, cudaMemPool_t pool,
                                    cudaStream_t stream, bool ptsz)
{
    if (ptr == NULL || pool == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    cudaError_t err = ptsz ? CUDART_CALL(cuMemAllocFromPoolAsync_ptsz, &p, size, pool, stream)
                           : CUDART_CALL(cuMemAllocFromPoolAsync, &p, size, pool, stream);
    return out_ptr(ptr, p, err);
}

CUDART_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                               cudaStream_t stream)
{
    return malloc_from_pool(ptr, size, memPool, stream, false);
}

CUDART_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
                                                    cudaMemPool_t memPool,
                                                    cudaStream_t stream)
{
    return malloc_from_pool(ptr, size, memPool, stream, true);
}

static cudaError_t free_async(void *devPtr, cudaStream_t stream, bool ptsz)
{
    CUDART_ENSURE();
    if (devPtr == NULL)
        return cudaSuccess;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)devPtr;
    return memhook_cudart_ret(ptsz ? CUDART_CALL(cuMemFreeAsync_ptsz, p, stream)
                                   : CUDART_CALL(cuMemFreeAsync, p, stream));
}

CUDART_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, false);
}

CUDART_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, true);
}

/* ---- pools ----------------------------------------------------------------------- */

CUDART_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    if (memPool == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    if (device < 0 || device >= memhook_cudart_device_count())
        return memhook_cudart_ret(cudaErrorInvalidDevice);
    return memhook_cudart_ret(CUDART_CALL(cuDeviceGetDefaultMemPool, memPool, (CUdevice)device));
}

CUDART_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool,
                                         const struct cudaMemPoolProps *poolProps)
{
    if (memPool == NULL || poolProps == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    /* Same layout (checked above): hand the struct through. */
    return memhook_cudart_ret(
        CUDART_CALL(cuMemPoolCreate, memPool, (const CUmemPoolProps *)(const void *)poolProps));
}

CUDART_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    if (memPool == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    return memhook_cudart_ret(CUDART_CALL(cuMemPoolDestroy, memPool));
}
