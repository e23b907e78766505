/*
 * memory.c - cuMemAlloc*, cuMemFree*, pinned and registered host memory,
 * address ranges and cuMemGetInfo.
 *
 * Every allocation gets VA of its own (page-rounded) and pages of the
 * memfd, mapped read-write; freeing maps the range back to no-access and
 * punches the pages out of the memfd.
 *
 * The legacy v1 entry points (32-bit pointers and sizes) need a current
 * context created by the v1 cuCtxCreate, else they answer INVALID_CONTEXT
 * as the H200's driver does (sim_enter_v1; see sim_internal.h).  In such a
 * context cuMemAlloc / cuMemAllocPitch allocate from the window below 4 GiB
 * (OUT_OF_MEMORY when it cannot be reserved or is full).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_mem.h"

#define PITCH_ALIGN 512ull

/* ---- internal ---------------------------------------------------------- */

SIM_HIDDEN CUresult sim_mrec_create(sim_ctx *ctx, sim_alloc_kind kind,
                                    sim_space space, int device,
                                    CUmemorytype memtype, uint64_t size,
                                    void *owner, sim_mrec **out)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t msz = SIM_ALIGN_UP(size, SIM_PAGE_SIZE);
    if (msz < size)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_mrec *r = calloc(1, sizeof(*r));
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t va = 0, off = 0;
    int va_dev = space == SIM_SPACE_HOST ? 0 : device;
    CUresult rc = sim_va_reserve(space, va_dev, msz, SIM_PAGE_SIZE, 0, &va);
    if (rc != CUDA_SUCCESS)
        goto fail_rec;
    rc = sim_phys_alloc(space == SIM_SPACE_HOST ? SIM_SPACE_HOST : SIM_SPACE_DEVICE,
                        space == SIM_SPACE_HOST ? -1 : device, msz, &off);
    if (rc != CUDA_SUCCESS)
        goto fail_va;
    if (sim_map(va, msz, off, PROT_READ | PROT_WRITE) != 0) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail_phys;
    }
    r->a.base = va;
    r->a.size = size;
    r->a.mapped_size = msz;
    r->a.kind = kind;
    r->a.memtype = memtype;
    r->a.device = device;
    r->a.ctx = ctx;
    r->a.buffer_id = sim_next_buffer_id();
    r->a.phys_offset = off;
    r->a.owner = owner;
    r->space = space;
    r->va_size = msz;
    r->range_base = va;
    r->range_size = size;
    r->block_id = r->a.buffer_id;
    r->prot = PROT_READ | PROT_WRITE;
    /* As the H200's driver reports them: only plain device memory is
     * GPUDirect-RDMA and decompression capable; managed memory starts
     * with SYNC_MEMOPS set. */
    r->gdr = kind == SIM_ALLOC_DEVICE;
    r->hw_decompress = kind == SIM_ALLOC_DEVICE;
    r->sync_memops = kind == SIM_ALLOC_MANAGED;
    rc = sim_registry_insert(&r->a);
    if (rc != CUDA_SUCCESS)
        goto fail_map;
    *out = r;
    return CUDA_SUCCESS;
fail_map:
    sim_unmap(va, msz);
fail_phys:
    sim_phys_free(off, msz);
fail_va:
    sim_va_release(va, msz);
fail_rec:
    free(r);
    return rc;
}

SIM_HIDDEN void sim_mrec_destroy(sim_mrec *r)
{
    switch (r->a.kind) {
    case SIM_ALLOC_VMM_MAP:
        sim_vmm_piece_destroy(r); /* unregisters and frees r */
        return;
    case SIM_ALLOC_POOL:
        sim_pool_piece_freed(r);
        break;
    default:
        break;
    }
    sim_registry_remove(&r->a);
    if (r->va_size) {
        sim_unmap(r->a.base, r->va_size);
        sim_phys_free(r->a.phys_offset, r->va_size);
        sim_va_release(r->a.base, r->va_size);
    }
    free(r);
}

SIM_HIDDEN sim_mrec *sim_mrec_at(uint64_t addr)
{
    sim_alloc *a = sim_registry_find(addr);
    return a && a->base == addr ? sim_mrec_of(a) : NULL;
}

SIM_HIDDEN CUresult sim_mem_alloc_locked(sim_ctx *ctx, sim_alloc_kind kind,
                                         uint64_t size, void *owner,
                                         uint64_t *out)
{
    if (!ctx || !out || (kind != SIM_ALLOC_DEVICE && kind != SIM_ALLOC_MANAGED))
        return CUDA_ERROR_INVALID_VALUE;
    sim_mrec *r;
    CUresult rc = sim_mrec_create(ctx, kind, SIM_SPACE_DEVICE, ctx->device,
                                  CU_MEMORYTYPE_DEVICE, size, owner, &r);
    if (rc == CUDA_SUCCESS) {
        if (kind == SIM_ALLOC_MANAGED)
            r->a.flags = CU_MEM_ATTACH_GLOBAL;
        /* Module/library globals, as the H200's driver reports them
         * (tests/data/h200-driver-facts.json, "globals"): neither
         * GPUDirect-RDMA nor decompression capable, and a managed global
         * has no CONTEXT. */
        r->gdr = false;
        r->hw_decompress = false;
        r->no_ctx_attr = kind == SIM_ALLOC_MANAGED;
        *out = r->a.base;
    }
    return rc;
}

SIM_HIDDEN CUresult sim_mem_free_locked(uint64_t base)
{
    sim_mrec *r = sim_mrec_at(base);
    if (!r || r->a.kind == SIM_ALLOC_VMM_MAP)
        return CUDA_ERROR_INVALID_VALUE;
    sim_mrec_destroy(r);
    return CUDA_SUCCESS;
}

SIM_HIDDEN void sim_mem_free_ctx_locked(sim_ctx *ctx)
{
    size_t i = 0;
    while (i < sim_registry_count()) {
        sim_alloc *a = sim_registry_at(i);
        bool global = (a->kind == SIM_ALLOC_DEVICE || a->kind == SIM_ALLOC_MANAGED) &&
                      (a->owner != NULL || sim_alloc_is_module_global(a));
        if (a->ctx == ctx && a->kind != SIM_ALLOC_VMM_MAP && !global)
            sim_mrec_destroy(sim_mrec_of(a)); /* entry i now holds the next one */
        else
            i++;
    }
}

/* ---- device memory ----------------------------------------------------- */

/* space SIM_SPACE_LEGACY32: the v1 spelling. */
static CUresult mem_alloc(CUdeviceptr *dptr, uint64_t size, sim_space space)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter_api(space == SIM_SPACE_LEGACY32, dptr == NULL, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_mrec *r;
    if (size == 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = sim_mrec_create(ctx, SIM_ALLOC_DEVICE, space, ctx->device,
                             CU_MEMORYTYPE_DEVICE, size, NULL, &r);
    if (rc == CUDA_SUCCESS) {
        r->legacy_ipc = true;
        *dptr = r->a.base;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr_v2 *dptr, size_t bytesize)
{
    return mem_alloc(dptr, bytesize, SIM_SPACE_DEVICE);
}

SIM_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    CUdeviceptr p = 0;
    CUresult rc = mem_alloc(dptr ? &p : NULL, bytesize, SIM_SPACE_LEGACY32);
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr_v1)p;
    return rc;
}

static CUresult mem_alloc_pitch(CUdeviceptr *dptr, uint64_t *pitch_out, uint64_t width,
                                uint64_t height, unsigned int elem, sim_space space)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter_api(space == SIM_SPACE_LEGACY32,
                                dptr == NULL || pitch_out == NULL, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t pitch = SIM_ALIGN_UP(width, PITCH_ALIGN);
    if (width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16) ||
        pitch < width) {
        sim_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (height > UINT64_MAX / pitch) {
        sim_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_mrec *r;
    rc = sim_mrec_create(ctx, SIM_ALLOC_DEVICE, space, ctx->device, CU_MEMORYTYPE_DEVICE,
                         pitch * height, NULL, &r);
    if (rc == CUDA_SUCCESS) {
        r->legacy_ipc = true;
        *dptr = r->a.base;
        *pitch_out = pitch;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr_v2 *dptr, size_t *pPitch,
                                    size_t WidthInBytes, size_t Height,
                                    unsigned int ElementSizeBytes)
{
    uint64_t pitch = 0;
    CUresult rc = mem_alloc_pitch(dptr, pPitch ? &pitch : NULL, WidthInBytes, Height,
                                  ElementSizeBytes, SIM_SPACE_DEVICE);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

SIM_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                 unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes)
{
    uint64_t pitch = 0;
    CUdeviceptr p = 0;
    CUresult rc = mem_alloc_pitch(dptr ? &p : NULL, pPitch ? &pitch : NULL, WidthInBytes,
                                  Height, ElementSizeBytes, SIM_SPACE_LEGACY32);
    if (rc == CUDA_SUCCESS) {
        *dptr = (CUdeviceptr_v1)p;
        *pPitch = (unsigned int)pitch;
    }
    return rc;
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr_v2 *dptr, size_t bytesize, unsigned int flags)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter(dptr == NULL, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_mrec *r;
    if (bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = sim_mrec_create(ctx, SIM_ALLOC_MANAGED, SIM_SPACE_DEVICE, ctx->device,
                             CU_MEMORYTYPE_DEVICE, bytesize, NULL, &r);
    if (rc == CUDA_SUCCESS) {
        r->a.flags = flags;
        *dptr = r->a.base;
    }
    sim_unlock();
    return rc;
}

/* The v1 spelling needs a legacy current context (sim_internal.h). */
static CUresult mem_free(CUdeviceptr dptr, bool v1)
{
    CUresult rc = v1 ? sim_ctx_require_legacy(NULL) : sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dptr == 0)
        return CUDA_SUCCESS;
    sim_lock();
    sim_mrec *r = sim_mrec_at(dptr);
    bool ok = r && (r->a.kind == SIM_ALLOC_POOL ||
                    ((r->a.kind == SIM_ALLOC_DEVICE || r->a.kind == SIM_ALLOC_MANAGED) &&
                     r->a.owner == NULL && !sim_alloc_is_module_global(&r->a)));
    if (ok)
        sim_mrec_destroy(r);
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr_v2 dptr)
{
    return mem_free(dptr, false);
}

SIM_API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    return mem_free(dptr, true);
}

/* ---- pinned host memory ------------------------------------------------- */

#define HOSTALLOC_FLAGS \
    (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED)

static CUresult host_alloc(void **pp, uint64_t size, unsigned int flags, bool v1)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter_api(v1, pp == NULL, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_mrec *r;
    if (size == 0 || (flags & ~(unsigned int)HOSTALLOC_FLAGS))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = sim_mrec_create(ctx, SIM_ALLOC_HOST, SIM_SPACE_HOST, ctx->device,
                             CU_MEMORYTYPE_HOST, size, NULL, &r);
    if (rc == CUDA_SUCCESS) {
        r->a.flags = flags;
        *pp = (void *)(uintptr_t)r->a.base;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, 0, false);
}

SIM_API CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return host_alloc(pp, bytesize, 0, true);
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return host_alloc(pp, bytesize, Flags, false);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (p == NULL)
        return CUDA_SUCCESS;
    sim_lock();
    sim_mrec *r = sim_mrec_at((uint64_t)(uintptr_t)p);
    bool ok = r && r->a.kind == SIM_ALLOC_HOST;
    if (ok)
        sim_mrec_destroy(r);
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- registered host memory --------------------------------------------- */

#define HOSTREGISTER_FLAGS                                                      \
    (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |              \
     CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)

/* Whether every page of [p, p+size) is mapped in this process. */
static bool host_range_mapped(uint64_t p, uint64_t size)
{
    uint64_t lo = p & ~(SIM_PAGE_SIZE - 1);
    uint64_t hi = SIM_ALIGN_UP(p + size, SIM_PAGE_SIZE);
    if (hi < lo)
        return false;
    return msync((void *)(uintptr_t)lo, hi - lo, MS_ASYNC) == 0;
}

static CUresult host_register(void *p, size_t size, unsigned int flags)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter(p == NULL || size == 0 ||
                                (flags & ~(unsigned int)HOSTREGISTER_FLAGS),
                            &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t lo = (uint64_t)(uintptr_t)p, hi = lo + size;
    sim_mrec *r = NULL;
    if (hi < lo) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (sim_registry_find_overlap(lo, hi)) {
        rc = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    } else if (sim_va_is_ours(lo, size) || !host_range_mapped(lo, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!(r = calloc(1, sizeof(*r)))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        r->a.base = lo;
        r->a.size = size;
        r->a.mapped_size = size;
        r->a.kind = SIM_ALLOC_REGISTERED;
        r->a.memtype = CU_MEMORYTYPE_HOST;
        r->a.device = ctx->device;
        r->a.ctx = ctx;
        r->a.buffer_id = sim_next_buffer_id();
        r->a.phys_offset = UINT64_MAX;
        r->a.flags = flags;
        r->space = SIM_SPACE_HOST;
        r->range_base = lo;
        r->range_size = size;
        r->block_id = r->a.buffer_id;
        r->prot = (flags & CU_MEMHOSTREGISTER_READ_ONLY) ? PROT_READ : PROT_READ | PROT_WRITE;
        rc = sim_registry_insert(&r->a);
        if (rc != CUDA_SUCCESS)
            free(r);
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
    CUresult rc = sim_enter(p == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_mrec *r = sim_mrec_at((uint64_t)(uintptr_t)p);
    if (r && r->a.kind == SIM_ALLOC_REGISTERED)
        sim_mrec_destroy(r);
    else
        rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    sim_unlock();
    return rc;
}

static CUresult host_device_pointer(CUdeviceptr *pdptr, void *p, unsigned int flags,
                                    bool v1)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter_api(v1, pdptr == NULL || p == NULL || flags != 0, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc *a = sim_registry_find((uint64_t)(uintptr_t)p);
    if (a && (a->kind == SIM_ALLOC_HOST || a->kind == SIM_ALLOC_REGISTERED))
        *pdptr = (uint64_t)(uintptr_t)p; /* UVA: the same address */
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr_v2 *pdptr, void *p,
                                              unsigned int Flags)
{
    return host_device_pointer(pdptr, p, Flags, false);
}

SIM_API CUresult cuMemHostGetDevicePointer(CUdeviceptr_v1 *pdptr, void *p, unsigned int Flags)
{
    CUdeviceptr d = 0;
    CUresult rc = host_device_pointer(pdptr ? &d : NULL, p, Flags, true);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (d > UINT_MAX) /* not expressible as a 32-bit device pointer */
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr_v1)d;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    CUresult rc = sim_enter(pFlags == NULL || p == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc *a = sim_registry_find((uint64_t)(uintptr_t)p);
    if (a && a->kind == SIM_ALLOC_HOST)
        *pFlags = a->flags | CU_MEMHOSTALLOC_DEVICEMAP; /* UVA: always mapped */
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

/* ---- queries ----------------------------------------------------------- */

static CUresult address_range(uint64_t *pbase, uint64_t *psize, uint64_t dptr, bool v1)
{
    CUresult rc = sim_enter_api(v1, false, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc *a = sim_registry_find(dptr);
    /* The H200's driver does not find host-pool memory, nor a VMM piece
     * before access is granted. */
    if (a && ((a->kind == SIM_ALLOC_POOL && a->memtype == CU_MEMORYTYPE_HOST) ||
              (a->kind == SIM_ALLOC_VMM_MAP && sim_mrec_of(a)->prot == PROT_NONE)))
        a = NULL;
    if (a) {
        if (pbase)
            *pbase = a->base;
        if (psize)
            *psize = a->size;
    } else {
        rc = CUDA_ERROR_NOT_FOUND;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr_v2 *pbase, size_t *psize,
                                         CUdeviceptr_v2 dptr)
{
    uint64_t b = 0, s = 0;
    CUresult rc = address_range(&b, &s, dptr, false);
    if (rc != CUDA_SUCCESS)
        return rc; /* CUDA_ERROR_NOT_FOUND for an unknown address, as the driver */
    if (pbase)
        *pbase = b;
    if (psize)
        *psize = s;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize,
                                      CUdeviceptr_v1 dptr)
{
    uint64_t b = 0, s = 0;
    CUresult rc = address_range(&b, &s, dptr, true);
    if (rc != CUDA_SUCCESS)
        return rc; /* CUDA_ERROR_NOT_FOUND for an unknown address, as the driver */
    if (b > UINT_MAX || s > UINT_MAX || b + s > (uint64_t)UINT_MAX + 1)
        return CUDA_ERROR_INVALID_VALUE;
    if (pbase)
        *pbase = (CUdeviceptr_v1)b;
    if (psize)
        *psize = (unsigned int)s;
    return CUDA_SUCCESS;
}

static CUresult mem_info(uint64_t *pfree, uint64_t *ptotal, bool bad_arg, bool v1)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter_api(v1, bad_arg, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = sim_vaspace_init();
    if (rc == CUDA_SUCCESS) {
        uint64_t total = sim_phys_capacity(ctx->device);
        uint64_t used = sim_phys_used(ctx->device);
        *ptotal = total;
        *pfree = used < total ? total - used : 0;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    uint64_t f, t;
    CUresult rc = mem_info(&f, &t, !free || !total, false);
    if (rc == CUDA_SUCCESS) {
        *free = f;
        *total = t;
    }
    return rc;
}

SIM_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    uint64_t f, t;
    CUresult rc = mem_info(&f, &t, !free || !total, true);
    if (rc == CUDA_SUCCESS) {
        *free = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
        *total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    }
    return rc;
}
