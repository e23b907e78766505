/*
 * vmm.c - virtual memory management: cuMemCreate / cuMemRelease (physical
 * handles), cuMemAddressReserve / cuMemAddressFree (VA reservations),
 * cuMemMap / cuMemUnmap / cuMemSetAccess / cuMemGetAccess.
 *
 * A handle owns a range of memfd pages; it lives until it is released AND
 * no longer mapped anywhere (the driver's rule).  Each cuMemMap makes one
 * SIM_ALLOC_VMM_MAP registry entry ("piece"), mapped PROT_NONE until
 * cuMemSetAccess grants access.  Reservations come from the VMM slice.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "sim_mem.h"

#define G SIM_VMM_GRANULARITY
#define HANDLE_BASE 0x5100000000000000ull

typedef struct vmm_handle {
    CUmemGenericAllocationHandle id;
    uint64_t size;
    CUmemAllocationProp prop;
    uint64_t phys;
    int device;                  /* -1: host-located */
    int refs;                    /* user references (create + retains) */
    int maps;                    /* live pieces */
    unsigned long long block_id;
} vmm_handle;

typedef struct vmm_resv {
    uint64_t base, size;
} vmm_resv;

/* Process-wide, like the driver state it simulates (one per process, shared
 * by every thread and context); guarded by sim_lock. */
static vmm_handle **H;           /* sorted by id (ids only grow) */
static size_t Hn, Hcap;
static unsigned long long next_id = 1;
static vmm_resv *RS;
static size_t RSn, RScap;

static long handle_index(CUmemGenericAllocationHandle id)
{
    size_t lo = 0, hi = Hn;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (H[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < Hn && H[lo]->id == id ? (long)lo : -1;
}

/* A handle the user may still name (not fully released). */
static vmm_handle *handle_live(CUmemGenericAllocationHandle id)
{
    long i = handle_index(id);
    return i >= 0 && H[i]->refs > 0 ? H[i] : NULL;
}

static void handle_maybe_free(vmm_handle *h)
{
    if (h->refs > 0 || h->maps > 0)
        return;
    long i = handle_index(h->id);
    if (i >= 0) {
        memmove(&H[i], &H[i + 1], (Hn - (size_t)i - 1) * sizeof(*H));
        Hn--;
    }
    sim_phys_free(h->phys, h->size);
    free(h);
}

static CUresult check_location(const CUmemLocation *loc, int *dev)
{
    switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (loc->id < 0 || loc->id >= sim_cfg()->device_count)
            return CUDA_ERROR_INVALID_DEVICE;
        *dev = loc->id;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
        *dev = -1;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (loc->id < 0)
            return CUDA_ERROR_INVALID_VALUE;
        *dev = -1;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult check_prop(const CUmemAllocationProp *prop, int *dev)
{
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = check_location(&prop->location, dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    unsigned ht = (unsigned)prop->requestedHandleTypes;
    if (ht & ~(unsigned)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC))
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST && ht != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static vmm_resv *resv_containing(uint64_t lo, uint64_t size)
{
    for (size_t i = 0; i < RSn; i++)
        if (lo >= RS[i].base && lo - RS[i].base < RS[i].size &&
            size <= RS[i].base + RS[i].size - lo)
            return &RS[i];
    return NULL;
}

/* ---- granularity, create, release ------------------------------------- */

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                               const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!granularity || !prop ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    int dev;
    rc = check_prop(prop, &dev);
    if (rc == CUDA_SUCCESS)
        *granularity = G;
    return rc;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = sim_enter(!handle || !prop || flags != 0 || size == 0 || size % G, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    int dev = 0;
    vmm_handle *h = NULL;
    rc = check_prop(prop, &dev);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (Hn == Hcap) {
        size_t ncap = Hcap ? Hcap * 2 : 64;
        vmm_handle **nh = realloc(H, ncap * sizeof(*nh));
        if (!nh) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        H = nh;
        Hcap = ncap;
    }
    h = calloc(1, sizeof(*h));
    if (!h) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    rc = sim_phys_alloc(dev < 0 ? SIM_SPACE_HOST : SIM_SPACE_DEVICE, dev, size, &h->phys);
    if (rc != CUDA_SUCCESS) {
        free(h);
        goto out;
    }
    h->id = HANDLE_BASE + next_id++;
    h->size = size;
    h->prop = *prop;
    h->device = dev;
    h->refs = 1;
    h->block_id = sim_next_buffer_id();
    H[Hn++] = h;
    *handle = h->id;
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = sim_enter(false, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    vmm_handle *h = handle_live(handle);
    if (h) {
        h->refs--;
        handle_maybe_free(h);
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    CUresult rc = sim_enter(prop == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    vmm_handle *h = handle_live(handle);
    if (h)
        *prop = h->prop;
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = sim_enter(handle == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc *a = sim_registry_find((uint64_t)(uintptr_t)addr);
    if (a && a->kind == SIM_ALLOC_VMM_MAP) {
        vmm_handle *h = a->owner;
        h->refs++;
        *handle = h->id;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    sim_unlock();
    return rc;
}

/* ---- reservations ------------------------------------------------------- */

SIM_API CUresult cuMemAddressReserve(CUdeviceptr_v2 *ptr, size_t size, size_t alignment,
                                     CUdeviceptr_v2 addr, unsigned long long flags)
{
    CUresult rc = sim_enter(!ptr || size == 0 || flags != 0 ||
                                (alignment && !SIM_IS_POW2(alignment)) ||
                                size % SIM_PAGE_SIZE || addr % SIM_PAGE_SIZE,
                            NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t align = alignment > G ? alignment : G;
    uint64_t va = 0;
    if (RSn == RScap) {
        size_t ncap = RScap ? RScap * 2 : 16;
        vmm_resv *nr = realloc(RS, ncap * sizeof(*nr));
        if (!nr) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        RS = nr;
        RScap = ncap;
    }
    /* A hint that is not aligned enough is only a hint: ignore it. */
    rc = sim_va_reserve(SIM_SPACE_DEVICE, -1, size, align, addr % align ? 0 : addr, &va);
    if (rc != CUDA_SUCCESS)
        goto out;
    RS[RSn].base = va;
    RS[RSn].size = size;
    RSn++;
    *ptr = va;
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr_v2 ptr, size_t size)
{
    CUresult rc = sim_enter(ptr == 0 || size == 0, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    size_t i;
    for (i = 0; i < RSn; i++)
        if (RS[i].base == ptr && RS[i].size == size)
            break;
    if (i == RSn || sim_registry_find_overlap(ptr, ptr + size)) {
        /* unknown reservation, or pieces still mapped in it */
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        sim_va_release(ptr, size);
        RS[i] = RS[--RSn];
    }
    sim_unlock();
    return rc;
}

/* ---- map / unmap -------------------------------------------------------- */

SIM_API CUresult cuMemMap(CUdeviceptr_v2 ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult rc = sim_enter(ptr == 0 || size == 0 || flags != 0 || ptr % G || size % G ||
                                offset % G,
                            NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    vmm_handle *h = handle_live(handle);
    vmm_resv *rs = resv_containing(ptr, size);
    sim_mrec *r = NULL;
    /* cuda.h: the offset "currently must be zero". */
    if (!h || offset != 0 || size > h->size || !rs ||
        sim_registry_find_overlap(ptr, ptr + size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (sim_map(ptr, size, h->phys + offset, PROT_NONE) != 0) {
        free(r);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    r->a.base = ptr;
    r->a.size = size;
    r->a.mapped_size = size;
    r->a.kind = SIM_ALLOC_VMM_MAP;
    r->a.memtype = h->device < 0 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    r->a.device = h->device;
    r->a.ctx = NULL;
    r->a.buffer_id = sim_next_buffer_id();
    r->a.phys_offset = h->phys + offset;
    r->a.owner = h;
    r->space = h->device < 0 ? SIM_SPACE_HOST : SIM_SPACE_DEVICE;
    r->va_size = 0; /* the VA belongs to the reservation */
    r->range_base = rs->base;
    r->range_size = rs->size;
    r->block_id = h->block_id;
    r->handle_types = (unsigned long long)h->prop.requestedHandleTypes;
    r->prot = PROT_NONE;
    r->gdr = h->prop.allocFlags.gpuDirectRDMACapable != 0;
    rc = sim_registry_insert(&r->a);
    if (rc != CUDA_SUCCESS) {
        sim_unmap(ptr, size);
        free(r);
        goto out;
    }
    h->maps++;
out:
    sim_unlock();
    return rc;
}

SIM_HIDDEN void sim_vmm_piece_destroy(sim_mrec *r)
{
    vmm_handle *h = r->a.owner;
    sim_registry_remove(&r->a);
    sim_unmap(r->a.base, r->a.size);
    free(r);
    h->maps--;
    handle_maybe_free(h);
}

/* Check that [ptr, ptr+size) is exactly a run of contiguous pieces. */
static bool pieces_cover(uint64_t ptr, uint64_t size)
{
    uint64_t cur = ptr, end = ptr + size;
    if (end < ptr)
        return false;
    while (cur < end) {
        sim_mrec *r = sim_mrec_at(cur);
        if (!r || r->a.kind != SIM_ALLOC_VMM_MAP || r->a.size > end - cur)
            return false;
        cur += r->a.size;
    }
    return cur == end;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr_v2 ptr, size_t size)
{
    CUresult rc = sim_enter(ptr == 0 || size == 0, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pieces_cover(ptr, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        uint64_t cur = ptr, end = ptr + size;
        while (cur < end) {
            sim_mrec *r = sim_mrec_at(cur);
            cur += r->a.size;
            sim_vmm_piece_destroy(r);
        }
    }
    sim_unlock();
    return rc;
}

/* ---- access --------------------------------------------------------------- */

static int prot_of(unsigned flags)
{
    if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return PROT_READ | PROT_WRITE;
    if (flags == CU_MEM_ACCESS_FLAGS_PROT_READ)
        return PROT_READ;
    return PROT_NONE;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr_v2 ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    CUresult rc = sim_enter(ptr == 0 || size == 0 || desc == NULL || count == 0, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    for (size_t i = 0; i < count && rc == CUDA_SUCCESS; i++) {
        int dev;
        unsigned f = (unsigned)desc[i].flags;
        rc = check_location(&desc[i].location, &dev);
        if (rc == CUDA_SUCCESS && f != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            f != CU_MEM_ACCESS_FLAGS_PROT_READ && f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS && !pieces_cover(ptr, size))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        goto out;
    for (uint64_t cur = ptr, end = ptr + size; cur < end;) {
        sim_mrec *r = sim_mrec_at(cur);
        for (size_t i = 0; i < count; i++) {
            unsigned char f = (unsigned char)desc[i].flags;
            if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE)
                r->acc_dev[desc[i].location.id] = f;
            else
                r->acc_host = f;
        }
        int prot = prot_of(r->acc_host);
        for (int d = 0; d < SIM_MAX_DEVICES; d++)
            prot |= prot_of(r->acc_dev[d]);
        if (mprotect((void *)(uintptr_t)r->a.base, r->a.size, prot) != 0) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        r->prot = prot;
        cur += r->a.size;
    }
out:
    sim_unlock();
    return rc;
}

SIM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                CUdeviceptr_v2 ptr)
{
    CUresult rc = sim_enter(flags == NULL || location == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    int dev;
    rc = check_location(location, &dev);
    if (rc == CUDA_SUCCESS) {
        sim_alloc *a = sim_registry_find(ptr);
        if (a && a->kind == SIM_ALLOC_VMM_MAP) {
            sim_mrec *r = sim_mrec_of(a);
            *flags = dev >= 0 ? r->acc_dev[dev] : r->acc_host;
        } else {
            rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    sim_unlock();
    return rc;
}
