/*
 * ipc.c - legacy CUDA IPC (cuIpcGetMemHandle / Open / Close).
 *
 * The 64-byte handle names the exporter's memfd by pid and descriptor
 * number, plus the allocation's offset, size and buffer id.  Another
 * process running the simulator opens /proc/<pid>/fd/<fd> and maps the same
 * pages into its own device VA, so writes on either side are seen by the
 * other.  Opening a handle exported by the calling process is
 * CUDA_ERROR_INVALID_CONTEXT, as with the driver.  Repeated opens of one
 * handle return the same pointer and count references.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_mem.h"

#define IPC_MAGIC 0x4d48495043534d31ull /* "MHIPCSM1" */

typedef struct ipc_wire {
    uint64_t magic;
    int32_t pid;
    int32_t fd;
    uint64_t offset;     /* memfd offset */
    uint64_t mapped;     /* page-rounded size */
    uint64_t size;       /* requested size */
    uint64_t buffer_id;  /* in the exporter */
    int32_t device;
    uint32_t check;
    uint8_t pad[8];
} ipc_wire;

_Static_assert(sizeof(ipc_wire) == CU_IPC_HANDLE_SIZE, "IPC handle must be 64 bytes");

static uint32_t wire_check(const ipc_wire *w)
{
    /* FNV-1a over everything before the check field */
    const unsigned char *p = (const unsigned char *)w;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < offsetof(ipc_wire, check); i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr_v2 dptr)
{
    CUresult rc = sim_enter(pHandle == NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc *a = sim_registry_find(dptr);
    sim_mrec *r = a ? sim_mrec_of(a) : NULL;
    if (!r || !r->legacy_ipc || r->a.phys_offset == UINT64_MAX || sim_memfd() < 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        ipc_wire w;
        memset(&w, 0, sizeof(w));
        w.magic = IPC_MAGIC;
        w.pid = (int32_t)getpid();
        w.fd = sim_memfd();
        w.offset = r->a.phys_offset;
        w.mapped = r->a.mapped_size;
        w.size = r->a.size;
        w.buffer_id = r->a.buffer_id;
        w.device = r->a.device;
        w.check = wire_check(&w);
        memset(pHandle, 0, sizeof(*pHandle));
        memcpy(pHandle->reserved, &w, sizeof(w));
    }
    sim_unlock();
    return rc;
}

static CUresult ipc_open(CUdeviceptr *pdptr, const CUipcMemHandle *handle, unsigned int flags)
{
    sim_ctx *ctx;
    CUresult rc = sim_enter(pdptr == NULL || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                            &ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    ipc_wire w;
    memcpy(&w, handle->reserved, sizeof(w));
    sim_mrec *r = NULL;
    uint64_t va = 0;
    int fd = -1;
    if (w.magic != IPC_MAGIC || w.check != wire_check(&w) || w.pid <= 0 || w.fd < 0 ||
        w.mapped == 0 || w.size == 0 || w.size > w.mapped || w.mapped % SIM_PAGE_SIZE ||
        w.offset % SIM_PAGE_SIZE) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (w.pid == (int32_t)getpid()) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    unsigned long long key = ((unsigned long long)(uint32_t)w.pid << 32) ^ w.buffer_id;
    /* Already open in this process: same pointer, one more reference. */
    for (size_t i = 0; i < sim_registry_count(); i++) {
        sim_mrec *o = sim_mrec_of(sim_registry_at(i));
        if (o->a.kind == SIM_ALLOC_IPC && o->ipc_key == key && o->a.ctx == ctx) {
            o->refs++;
            *pdptr = o->a.base;
            goto out;
        }
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        rc = CUDA_ERROR_MAP_FAILED;
        goto out;
    }
    off_t fsize = lseek(fd, 0, SEEK_END);
    if (fsize < 0 || (uint64_t)fsize < w.offset + w.mapped) {
        rc = CUDA_ERROR_MAP_FAILED;
        goto out;
    }
    int dev = ctx->device;
    rc = sim_va_reserve(SIM_SPACE_DEVICE, dev, w.mapped, SIM_PAGE_SIZE, 0, &va);
    if (rc != CUDA_SUCCESS)
        goto out;
    r = calloc(1, sizeof(*r));
    if (!r || sim_map_fd(va, w.mapped, fd, w.offset, PROT_READ | PROT_WRITE) != 0) {
        rc = r ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_OUT_OF_MEMORY;
        sim_va_release(va, w.mapped);
        free(r);
        r = NULL;
        goto out;
    }
    r->a.base = va;
    r->a.size = w.size;
    r->a.mapped_size = w.mapped;
    r->a.kind = SIM_ALLOC_IPC;
    r->a.memtype = CU_MEMORYTYPE_DEVICE;
    r->a.device = dev;
    r->a.ctx = ctx;
    r->a.buffer_id = sim_next_buffer_id();
    r->a.phys_offset = UINT64_MAX; /* the exporter's pages, not ours */
    r->space = SIM_SPACE_DEVICE;
    r->va_size = w.mapped;
    r->range_base = va;
    r->range_size = w.size;
    r->block_id = r->a.buffer_id;
    r->prot = PROT_READ | PROT_WRITE;
    r->refs = 1;
    r->gdr = true;
    r->ipc_key = key;
    rc = sim_registry_insert(&r->a);
    if (rc != CUDA_SUCCESS) {
        sim_unmap(va, w.mapped);
        sim_va_release(va, w.mapped);
        free(r);
        goto out;
    }
    *pdptr = va;
out:
    if (fd >= 0)
        close(fd);
    sim_unlock();
    return rc;
}

SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr_v2 *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags)
{
    return ipc_open(pdptr, &handle, Flags);
}

SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr_v2 *pdptr, CUipcMemHandle handle,
                                    unsigned int Flags)
{
    return ipc_open(pdptr, &handle, Flags);
}

SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr_v2 dptr)
{
    CUresult rc = sim_enter(false, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_mrec *r = sim_mrec_at(dptr);
    if (!r || r->a.kind != SIM_ALLOC_IPC) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (--r->refs == 0) {
        sim_mrec_destroy(r); /* unmaps; phys_offset is UINT64_MAX: nothing punched */
    }
    sim_unlock();
    return rc;
}
