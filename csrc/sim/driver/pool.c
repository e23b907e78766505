/*
 * pool.c - memory pools and stream-ordered allocation.
 *
 * All work is synchronous: cuMemAllocAsync allocates at once and
 * cuMemFreeAsync frees at once, so a pool never holds memory that is not in
 * use, and its reserved counters equal its used counters.  A host-located
 * pool (location HOST / HOST_NUMA) takes VA from the host slice and reports
 * CU_MEMORYTYPE_HOST with device ordinal -1.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_mem.h"

#define POOL_MAGIC 0x504f4f4cu

typedef struct sim_pool {
    uint32_t magic;
    bool destroyed;
    bool is_default;
    CUmemPoolProps props;
    int device;                  /* -1: host-located */
    uint64_t threshold;
    int reuse[3];                /* the three REUSE_* attributes */
    uint64_t used, used_high, reserved, reserved_high;
    size_t live;
    struct sim_pool *next;
} sim_pool;

/* Process-wide, like the driver state it simulates (one per process, shared
 * by every thread and context); guarded by sim_lock. */
static sim_pool *pools;
static sim_pool *default_pool[SIM_MAX_DEVICES];
static sim_pool *current_pool[SIM_MAX_DEVICES];

static sim_pool *pool_lookup(CUmemoryPool handle)
{
    for (sim_pool *p = pools; p; p = p->next)
        if ((CUmemoryPool)p == handle && !p->destroyed)
            return p;
    return NULL;
}

static sim_pool *pool_new(const CUmemPoolProps *props, int device)
{
    sim_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->magic = POOL_MAGIC;
    p->props = *props;
    p->device = device;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->next = pools;
    pools = p;
    return p;
}

static void pool_unlink_free(sim_pool *p)
{
    for (sim_pool **pp = &pools; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    p->magic = 0;
    free(p);
}

static bool device_ok(CUdevice dev)
{
    return dev >= 0 && dev < sim_cfg()->device_count && dev < SIM_MAX_DEVICES;
}

static sim_pool *default_for(int dev)
{
    if (!default_pool[dev]) {
        CUmemPoolProps props;
        memset(&props, 0, sizeof(props));
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        default_pool[dev] = pool_new(&props, dev);
        if (default_pool[dev])
            default_pool[dev]->is_default = true;
    }
    return default_pool[dev];
}

static sim_pool *current_for(int dev)
{
    return current_pool[dev] ? current_pool[dev] : default_for(dev);
}

SIM_HIDDEN void sim_pool_piece_freed(sim_mrec *r)
{
    sim_pool *p = r->a.owner;
    if (!p)
        return;
    p->used -= r->a.mapped_size;
    p->reserved -= r->a.mapped_size;
    p->live--;
    if (p->destroyed && p->live == 0)
        pool_unlink_free(p);
}

static CUresult pool_alloc(sim_pool *p, sim_ctx *ctx, uint64_t size, CUdeviceptr *out)
{
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t msz = SIM_ALIGN_UP(size, SIM_PAGE_SIZE);
    if (msz < size || (p->props.maxSize && p->used + msz > p->props.maxSize))
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_mrec *r;
    bool host = p->device < 0;
    /* DEVICE_ORDINAL: the H200's driver reports the allocating context's
     * device for host-pool memory too (not -1). */
    CUresult rc = sim_mrec_create(ctx, SIM_ALLOC_POOL, host ? SIM_SPACE_HOST : SIM_SPACE_DEVICE,
                                  host ? ctx->device : p->device,
                                  host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE, size, p, &r);
    if (rc != CUDA_SUCCESS)
        return rc;
    r->no_ctx_attr = true; /* pool memory reports no CONTEXT */
    r->handle_types = (unsigned long long)p->props.handleTypes;
    p->used += r->a.mapped_size;
    p->reserved += r->a.mapped_size;
    if (p->used > p->used_high)
        p->used_high = p->used;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    p->live++;
    *out = r->a.base;
    return CUDA_SUCCESS;
}

/* ---- pools ---------------------------------------------------------------- */

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult rc = sim_enter(pool == NULL || poolProps == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    const CUmemPoolProps *pp = poolProps;
    int dev = -1;
    unsigned ht = (unsigned)pp->handleTypes;
    if (pp->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        (ht & ~(unsigned)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC))) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (pp->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (!device_ok(pp->location.id))
            rc = CUDA_ERROR_INVALID_DEVICE;
        else
            dev = pp->location.id;
    } else if (pp->location.type == CU_MEM_LOCATION_TYPE_HOST ||
               (pp->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && pp->location.id >= 0)) {
        dev = -1;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS) {
        sim_pool *p = pool_new(pp, dev);
        if (p)
            *pool = (CUmemoryPool)p;
        else
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult rc = sim_enter(false, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_pool *p = pool_lookup(pool);
    if (!p || p->is_default) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (int d = 0; d < SIM_MAX_DEVICES; d++)
            if (current_pool[d] == p)
                current_pool[d] = NULL;
        /* Outstanding allocations keep the pool alive until freed. */
        p->destroyed = true;
        if (p->live == 0)
            pool_unlink_free(p);
    }
    sim_unlock();
    return rc;
}

/* cuDeviceGetDefaultMemPool / cuDeviceGetMemPool: the same checks, a
 * different pool of the device. */
static CUresult device_pool(CUmemoryPool *out, CUdevice dev, sim_pool *(*pick)(int))
{
    CUresult rc = sim_enter(out == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device_ok(dev)) {
        rc = CUDA_ERROR_INVALID_DEVICE;
    } else {
        sim_pool *p = pick(dev);
        if (p)
            *out = (CUmemoryPool)p;
        else
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    return device_pool(pool_out, dev, default_for);
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return device_pool(pool, dev, current_for);
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult rc = sim_enter(false, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_pool *p = pool_lookup(pool);
    if (!device_ok(dev))
        rc = CUDA_ERROR_INVALID_DEVICE;
    else if (!p || p->device != dev)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        current_pool[dev] = p;
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = sim_enter(value == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_pool *p = pool_lookup(pool);
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value ? 1 : 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p->reserved_high = p->reserved;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        if (*(cuuint64_t *)value != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            p->used_high = p->used;
        break;
    default: /* the CURRENT counters are read-only */
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc = sim_enter(value == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_pool *p = pool_lookup(pool);
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = p->threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        *(cuuint64_t *)value = p->reserved;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = p->reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = p->used;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = p->used_high;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    (void)minBytesToKeep; /* a synchronous pool holds nothing unused */
    CUresult rc = sim_enter(false, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool_lookup(pool))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

/* ---- stream-ordered allocation -------------------------------------------- */

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, bool explicit_pool,
                            CUstream stream)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter(dptr == NULL, &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_pool *p = NULL;
    if ((rc = sim_stream_check(stream)) == CUDA_SUCCESS) {
        p = explicit_pool ? pool_lookup(pool) : current_for(ctx->device);
        if (!p)
            rc = explicit_pool ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
        else if (size == 0)
            *dptr = 0; /* the recorded H200 driver succeeds on 0 bytes (legacy_v1 facts) */
        else
            rc = pool_alloc(p, ctx, size, dptr);
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr_v2 *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, false, hStream);
}

SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr_v2 *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, false, hStream);
}

SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr_v2 *dptr, size_t bytesize,
                                         CUmemoryPool pool, CUstream hStream)
{
    return alloc_async(dptr, bytesize, pool, true, hStream);
}

SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr_v2 *dptr, size_t bytesize,
                                              CUmemoryPool pool, CUstream hStream)
{
    return alloc_async(dptr, bytesize, pool, true, hStream);
}

static CUresult free_async(CUdeviceptr dptr, CUstream stream)
{
    CUresult rc = sim_enter(false, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = sim_stream_check(stream);
    if (rc == CUDA_SUCCESS && dptr != 0) {
        sim_mrec *r = sim_mrec_at(dptr);
        bool ok = r && (r->a.kind == SIM_ALLOC_POOL ||
                        ((r->a.kind == SIM_ALLOC_DEVICE || r->a.kind == SIM_ALLOC_MANAGED) &&
                         r->a.owner == NULL && !sim_alloc_is_module_global(&r->a)));
        if (ok)
            sim_mrec_destroy(r); /* synchronous: the free happens now */
        else
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr_v2 dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr_v2 dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}
