/*
 * copy.c - cuMemcpy* and cuMemsetD* (every spelling: v1 32-bit, _v2,
 * _ptds/_ptsz).  All work is synchronous.
 *
 * A device range must lie inside live allocations whose pages allow the
 * access, else CUDA_ERROR_INVALID_VALUE: a bad device pointer never
 * faults.  Host pointers are trusted, as the driver trusts them, except
 * that a "host" pointer inside the simulator's own reserved VA (where
 * nothing is allocated) is refused rather than faulted on.
 *
 * The v1 spellings (32-bit pointers and counts) need a current context
 * created by the v1 cuCtxCreate, else INVALID_CONTEXT (sim_internal.h).
 */
#include <string.h>
#include <sys/mman.h>

#include "sim_mem.h"

typedef enum { P_DEV, P_HOST, P_ANY } ptr_kind;

SIM_HIDDEN CUresult sim_dev_range_ok(uint64_t addr, uint64_t n, bool write)
{
    uint64_t end = addr + n;
    if (end < addr)
        return CUDA_ERROR_INVALID_VALUE;
    int need = write ? PROT_WRITE : PROT_READ;
    uint64_t cur = addr;
    do {
        sim_alloc *a = sim_registry_find(cur);
        if (!a || !(sim_mrec_of(a)->prot & need))
            return CUDA_ERROR_INVALID_VALUE;
        cur = a->base + (a->size ? a->size : 1);
    } while (cur < end);
    return CUDA_SUCCESS;
}

static CUresult check_ptr(uint64_t p, uint64_t n, ptr_kind k, bool write)
{
    if (p == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (k == P_DEV)
        return sim_dev_range_ok(p, n, write);
    if (p + n < p)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_registry_find(p))
        return sim_dev_range_ok(p, n, write);
    if (k == P_ANY && sim_va_is_ours(p, n))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS; /* host memory: trusted */
}

static CUresult do_copy(bool v1, uint64_t dst, ptr_kind dk, uint64_t src, ptr_kind sk,
                        uint64_t n, bool async, CUstream stream)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter_api(v1, false, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (async)
        rc = sim_stream_check(stream);
    if (rc == CUDA_SUCCESS && n != 0) {
        rc = check_ptr(dst, n, dk, true);
        if (rc == CUDA_SUCCESS)
            rc = check_ptr(src, n, sk, false);
        if (rc == CUDA_SUCCESS)
            memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    }
    sim_unlock();
    return rc;
}

static CUresult do_set(bool v1, uint64_t dst, unsigned int value, unsigned int width,
                       uint64_t count, bool async, CUstream stream)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter_api(v1, false, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (async)
        rc = sim_stream_check(stream);
    if (rc == CUDA_SUCCESS && count != 0) {
        if (dst % width || count > UINT64_MAX / width)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            rc = sim_dev_range_ok(dst, count * width, true);
        if (rc == CUDA_SUCCESS) {
            if (width == 1) {
                memset((void *)(uintptr_t)dst, (int)(value & 0xff), count);
            } else if (width == 2) {
                uint16_t *p = (uint16_t *)(uintptr_t)dst, v = (uint16_t)value;
                for (uint64_t i = 0; i < count; i++)
                    p[i] = v;
            } else {
                uint32_t *p = (uint32_t *)(uintptr_t)dst, v = (uint32_t)value;
                for (uint64_t i = 0; i < count; i++)
                    p[i] = v;
            }
        }
    }
    sim_unlock();
    return rc;
}

/* First argument of do_copy / do_set: V1 for the 32-bit v1 spellings (which
 * need a legacy context), V2 for every other one. */
#define V1 true
#define V2 false

#define HP(p) ((uint64_t)(uintptr_t)(p))

/* ---- unified ----------------------------------------------------------- */

SIM_API CUresult cuMemcpy(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount)
{
    return do_copy(V2, dst, P_ANY, src, P_ANY, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpy_ptds(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount)
{
    return do_copy(V2, dst, P_ANY, src, P_ANY, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyAsync(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount,
                               CUstream hStream)
{
    return do_copy(V2, dst, P_ANY, src, P_ANY, ByteCount, true, hStream);
}

SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount,
                                    CUstream hStream)
{
    return do_copy(V2, dst, P_ANY, src, P_ANY, ByteCount, true, hStream);
}

/* ---- host to device -------------------------------------------------------- */

SIM_API CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost,
                              unsigned int ByteCount)
{
    return do_copy(V1, dstDevice, P_DEV, HP(srcHost), P_HOST, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr_v2 dstDevice, const void *srcHost, size_t ByteCount)
{
    return do_copy(V2, dstDevice, P_DEV, HP(srcHost), P_HOST, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr_v2 dstDevice, const void *srcHost,
                                      size_t ByteCount)
{
    return do_copy(V2, dstDevice, P_DEV, HP(srcHost), P_HOST, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{
    return do_copy(V1, dstDevice, P_DEV, HP(srcHost), P_HOST, ByteCount, true, hStream);
}

SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr_v2 dstDevice, const void *srcHost,
                                      size_t ByteCount, CUstream hStream)
{
    return do_copy(V2, dstDevice, P_DEV, HP(srcHost), P_HOST, ByteCount, true, hStream);
}

SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr_v2 dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{
    return do_copy(V2, dstDevice, P_DEV, HP(srcHost), P_HOST, ByteCount, true, hStream);
}

/* ---- device to host -------------------------------------------------------- */

SIM_API CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{
    return do_copy(V1, HP(dstHost), P_HOST, srcDevice, P_DEV, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount)
{
    return do_copy(V2, HP(dstHost), P_HOST, srcDevice, P_DEV, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount)
{
    return do_copy(V2, HP(dstHost), P_HOST, srcDevice, P_DEV, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice,
                                   unsigned int ByteCount, CUstream hStream)
{
    return do_copy(V1, HP(dstHost), P_HOST, srcDevice, P_DEV, ByteCount, true, hStream);
}

SIM_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount,
                                      CUstream hStream)
{
    return do_copy(V2, HP(dstHost), P_HOST, srcDevice, P_DEV, ByteCount, true, hStream);
}

SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr_v2 srcDevice,
                                           size_t ByteCount, CUstream hStream)
{
    return do_copy(V2, HP(dstHost), P_HOST, srcDevice, P_DEV, ByteCount, true, hStream);
}

/* ---- device to device ------------------------------------------------------ */

SIM_API CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                              unsigned int ByteCount)
{
    return do_copy(V1, dstDevice, P_DEV, srcDevice, P_DEV, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice,
                                 size_t ByteCount)
{
    return do_copy(V2, dstDevice, P_DEV, srcDevice, P_DEV, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice,
                                      size_t ByteCount)
{
    return do_copy(V2, dstDevice, P_DEV, srcDevice, P_DEV, ByteCount, false, NULL);
}

SIM_API CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                   unsigned int ByteCount, CUstream hStream)
{
    return do_copy(V1, dstDevice, P_DEV, srcDevice, P_DEV, ByteCount, true, hStream);
}

SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice,
                                      size_t ByteCount, CUstream hStream)
{
    return do_copy(V2, dstDevice, P_DEV, srcDevice, P_DEV, ByteCount, true, hStream);
}

SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice,
                                           size_t ByteCount, CUstream hStream)
{
    return do_copy(V2, dstDevice, P_DEV, srcDevice, P_DEV, ByteCount, true, hStream);
}

/* ---- memset ------------------------------------------------------------------ */

SIM_API CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N)
{
    return do_set(V1, dstDevice, uc, 1, N, false, NULL);
}

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N)
{
    return do_set(V2, dstDevice, uc, 1, N, false, NULL);
}

SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N)
{
    return do_set(V2, dstDevice, uc, 1, N, false, NULL);
}

SIM_API CUresult cuMemsetD16(CUdeviceptr_v1 dstDevice, unsigned short us, unsigned int N)
{
    return do_set(V1, dstDevice, us, 2, N, false, NULL);
}

SIM_API CUresult cuMemsetD16_v2(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N)
{
    return do_set(V2, dstDevice, us, 2, N, false, NULL);
}

SIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N)
{
    return do_set(V2, dstDevice, us, 2, N, false, NULL);
}

SIM_API CUresult cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N)
{
    return do_set(V1, dstDevice, ui, 4, N, false, NULL);
}

SIM_API CUresult cuMemsetD32_v2(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N)
{
    return do_set(V2, dstDevice, ui, 4, N, false, NULL);
}

SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N)
{
    return do_set(V2, dstDevice, ui, 4, N, false, NULL);
}

SIM_API CUresult cuMemsetD8Async(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream)
{
    return do_set(V2, dstDevice, uc, 1, N, true, hStream);
}

SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N,
                                      CUstream hStream)
{
    return do_set(V2, dstDevice, uc, 1, N, true, hStream);
}

SIM_API CUresult cuMemsetD16Async(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N,
                                  CUstream hStream)
{
    return do_set(V2, dstDevice, us, 2, N, true, hStream);
}

SIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N,
                                       CUstream hStream)
{
    return do_set(V2, dstDevice, us, 2, N, true, hStream);
}

SIM_API CUresult cuMemsetD32Async(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream)
{
    return do_set(V2, dstDevice, ui, 4, N, true, hStream);
}

SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N,
                                       CUstream hStream)
{
    return do_set(V2, dstDevice, ui, 4, N, true, hStream);
}
