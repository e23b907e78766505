/*
 * stream.c - streams, copies and sets.
 *
 * The runtime's stream handles are the driver's.  Copies go through
 * cuMemcpy / cuMemcpyAsync, which infer the direction from the addresses
 * (unified addressing), so every cudaMemcpyKind but HostToHost is the same
 * driver call; HostToHost is a plain memcpy in the runtime, as NVIDIA's does.
 * The _ptds/_ptsz variants call the driver entries that cuGetProcAddress
 * returned for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
 */
#include <stdint.h>
#include <string.h>

#include "cudart_internal.h"

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

static bool valid_kind(enum cudaMemcpyKind kind)
{
    return (unsigned)kind <= (unsigned)cudaMemcpyDefault;
}

/* ---- streams ------------------------------------------------------------------ */

CUDART_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    if (pStream == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    return memhook_cudart_ret(CUDART_CALL(cuStreamCreate, pStream, CU_STREAM_DEFAULT));
}

CUDART_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    if (pStream == NULL || (flags & ~(unsigned int)cudaStreamNonBlocking) != 0)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUDART_ENSURE();
    return memhook_cudart_ret(CUDART_CALL(cuStreamCreate, pStream, flags));
}

CUDART_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    CUDART_ENSURE();
    /* The NULL/legacy/per-thread streams cannot be destroyed. */
    if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
        return memhook_cudart_ret(cudaErrorInvalidResourceHandle);
    return memhook_cudart_ret(CUDART_CALL(cuStreamDestroy, stream));
}

CUDART_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    CUDART_ENSURE();
    return memhook_cudart_ret(CUDART_CALL(cuStreamSynchronize, stream));
}

CUDART_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    CUDART_ENSURE();
    return memhook_cudart_ret(CUDART_CALL(cuStreamSynchronize_ptsz, stream));
}

/* ---- copies ------------------------------------------------------------------- */

cudaError_t memhook_cudart_memcpy(void *dst, const void *src, size_t count,
                                  enum cudaMemcpyKind kind, bool ptds)
{
    if (!valid_kind(kind))
        return cudaErrorInvalidMemcpyDirection;
    cudaError_t err = memhook_cudart_ctx_ensure();
    if (err != cudaSuccess)
        return err;
    if (count == 0)
        return cudaSuccess;
    if (dst == NULL || src == NULL)
        return cudaErrorInvalidValue;
    if (kind == cudaMemcpyHostToHost) {
        memmove(dst, src, count);
        return cudaSuccess;
    }
    return ptds ? CUDART_CALL(cuMemcpy_ptds, DPTR(dst), DPTR(src), count)
                : CUDART_CALL(cuMemcpy, DPTR(dst), DPTR(src), count);
}

CUDART_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                  enum cudaMemcpyKind kind)
{
    return memhook_cudart_ret(memhook_cudart_memcpy(dst, src, count, kind, false));
}

CUDART_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                       enum cudaMemcpyKind kind)
{
    return memhook_cudart_ret(memhook_cudart_memcpy(dst, src, count, kind, true));
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t count,
                                enum cudaMemcpyKind kind, cudaStream_t stream, bool ptsz)
{
    if (!valid_kind(kind))
        return memhook_cudart_ret(cudaErrorInvalidMemcpyDirection);
    CUDART_ENSURE();
    if (count == 0)
        return cudaSuccess;
    if (dst == NULL || src == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    if (kind == cudaMemcpyHostToHost) {
        memmove(dst, src, count);
        return cudaSuccess;
    }
    return memhook_cudart_ret(
        ptsz ? CUDART_CALL(cuMemcpyAsync_ptsz, DPTR(dst), DPTR(src), count, stream)
             : CUDART_CALL(cuMemcpyAsync, DPTR(dst), DPTR(src), count, stream));
}

CUDART_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                       enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return memcpy_async(dst, src, count, kind, stream, false);
}

CUDART_API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                            enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return memcpy_async(dst, src, count, kind, stream, true);
}

/* ---- sets --------------------------------------------------------------------- */

static cudaError_t memset_sync(void *devPtr, int value, size_t count, bool ptds)
{
    CUDART_ENSURE();
    if (count == 0)
        return cudaSuccess;
    if (devPtr == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    unsigned char v = (unsigned char)value;
    return memhook_cudart_ret(ptds ? CUDART_CALL(cuMemsetD8_ptds, DPTR(devPtr), v, count)
                                   : CUDART_CALL(cuMemsetD8, DPTR(devPtr), v, count));
}

CUDART_API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    return memset_sync(devPtr, value, count, false);
}

CUDART_API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
    return memset_sync(devPtr, value, count, true);
}

static cudaError_t memset_async(void *devPtr, int value, size_t count, cudaStream_t stream,
                                bool ptsz)
{
    CUDART_ENSURE();
    if (count == 0)
        return cudaSuccess;
    if (devPtr == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    unsigned char v = (unsigned char)value;
    return memhook_cudart_ret(
        ptsz ? CUDART_CALL(cuMemsetD8Async_ptsz, DPTR(devPtr), v, count, stream)
             : CUDART_CALL(cuMemsetD8Async, DPTR(devPtr), v, count, stream));
}

CUDART_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                                       cudaStream_t stream)
{
    return memset_async(devPtr, value, count, stream, false);
}

CUDART_API cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                            cudaStream_t stream)
{
    return memset_async(devPtr, value, count, stream, true);
}
