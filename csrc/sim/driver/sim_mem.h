/*
 * sim_mem.h - private header of the memory half of the simulated driver
 * (vaspace.c, registry.c, memory.c, vmm.c, pool.c, ipc.c, pointer.c,
 * copy.c).  The other half only sees sim_internal.h.
 *
 * Every function here expects sim_lock to be held unless it says otherwise.
 */
#ifndef MEMHOOK_SIM_MEM_H
#define MEMHOOK_SIM_MEM_H

#include <sys/mman.h>

#include "sim_api.h"

#define SIM_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((uint64_t)(a) - 1))
#define SIM_IS_POW2(x) ((x) != 0 && ((x) & ((x) - 1)) == 0)

/* Width of the boolean pointer attributes (SYNC_MEMOPS, IS_MANAGED,
 * IS_LEGACY_CUDA_IPC_CAPABLE, MAPPED, IS_GPU_DIRECT_RDMA_CAPABLE,
 * IS_HW_DECOMPRESS_CAPABLE).  cuda-python reads them as a C int; to be
 * checked against the real driver on a GPU. */
#ifndef SIM_BOOL_ATTR_BYTES
#define SIM_BOOL_ATTR_BYTES 4
#endif

/* The registry's element: the contract's sim_alloc plus what only the
 * memory half needs.  Every sim_alloc in the registry is one of these. */
typedef struct sim_mrec {
    sim_alloc a;                 /* must stay first */
    sim_space space;             /* where the VA came from */
    uint64_t va_size;            /* VA we own at a.base; 0 when not ours */
    uint64_t range_base;         /* RANGE_START_ADDR / RANGE_SIZE */
    uint64_t range_size;
    unsigned long long block_id; /* MEMORY_BLOCK_ID */
    unsigned long long handle_types; /* ALLOWED_HANDLE_TYPES */
    bool sync_memops;
    bool legacy_ipc;             /* cuIpcGetMemHandle allowed */
    bool gdr;                    /* IS_GPU_DIRECT_RDMA_CAPABLE */
    bool hw_decompress;          /* IS_HW_DECOMPRESS_CAPABLE */
    bool no_ctx_attr;            /* CONTEXT attribute reads NULL (pools) */
    int prot;                    /* current PROT_* of the mapping */
    unsigned char acc_dev[SIM_MAX_DEVICES]; /* VMM: CUmemAccess_flags */
    unsigned char acc_host;
    int refs;                    /* IPC: open count */
    unsigned long long ipc_key;  /* IPC: exporter pid << 32 ^ buffer id */
} sim_mrec;

static inline sim_mrec *sim_mrec_of(sim_alloc *a) { return (sim_mrec *)a; }

/* Entry prologue: NOT_INITIALIZED before cuInit, then INVALID_VALUE when
 * bad_arg, then takes sim_lock and, when ctx is not NULL, requires a
 * current context (INVALID_CONTEXT).  On CUDA_SUCCESS the caller holds
 * sim_lock and must release it. */
static inline CUresult sim_enter(bool bad_arg, sim_ctx **ctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (bad_arg)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (ctx) {
        rc = sim_ctx_require(ctx);
        if (rc != CUDA_SUCCESS) {
            sim_unlock();
            return rc;
        }
    }
    return CUDA_SUCCESS;
}

/* Entry prologue of the 32-bit v1 entry points that need a context (see
 * sim_internal.h): NOT_INITIALIZED before cuInit, then INVALID_CONTEXT
 * unless the current context is a legacy one, then INVALID_VALUE when
 * bad_arg.  On CUDA_SUCCESS the caller holds sim_lock and must release it. */
static inline CUresult sim_enter_v1(bool bad_arg, sim_ctx **ctx)
{
    sim_lock();
    CUresult rc = sim_ctx_require_legacy(ctx);
    if (rc == CUDA_SUCCESS && bad_arg)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        sim_unlock();
    return rc;
}

/* sim_enter_v1 for the v1 spellings, sim_enter for the others. */
static inline CUresult sim_enter_api(bool v1, bool bad_arg, sim_ctx **ctx)
{
    return v1 ? sim_enter_v1(bad_arg, ctx) : sim_enter(bad_arg, ctx);
}

/* ---- vaspace.c ---- */
/* memfd shared by all physical memory, its size, and whether the VA range
 * at addr belongs to the simulator's reservation (any slice). */
SIM_HIDDEN int sim_memfd(void);
SIM_HIDDEN bool sim_va_is_ours(uint64_t addr, uint64_t size);
SIM_HIDDEN int sim_map_fd(uint64_t addr, uint64_t size, int fd,
                          uint64_t offset, int prot);
SIM_HIDDEN uint64_t sim_phys_capacity(int device);

/* ---- registry.c ---- */
SIM_HIDDEN CUresult sim_registry_insert(sim_alloc *a);
SIM_HIDDEN void sim_registry_remove(sim_alloc *a);
/* First live allocation overlapping [lo, hi), or NULL. */
SIM_HIDDEN sim_alloc *sim_registry_find_overlap(uint64_t lo, uint64_t hi);
SIM_HIDDEN size_t sim_registry_count(void);
SIM_HIDDEN sim_alloc *sim_registry_at(size_t i);
SIM_HIDDEN unsigned long long sim_next_buffer_id(void);

/* ---- memory.c ---- */
/* Create a memfd-backed allocation: VA from (space, va_device), physical
 * pages from (phys_space, phys_device), mapped read-write, registered. */
SIM_HIDDEN CUresult sim_mrec_create(sim_ctx *ctx, sim_alloc_kind kind,
                                    sim_space space, int device,
                                    CUmemorytype memtype, uint64_t size,
                                    void *owner, sim_mrec **out);
/* Unregister and release whatever the allocation holds (by kind). */
SIM_HIDDEN void sim_mrec_destroy(sim_mrec *r);
/* The allocation that starts exactly at addr, or NULL. */
SIM_HIDDEN sim_mrec *sim_mrec_at(uint64_t addr);

/* ---- vmm.c ---- */
SIM_HIDDEN void sim_vmm_piece_destroy(sim_mrec *r);

/* ---- pool.c ---- */
SIM_HIDDEN void sim_pool_piece_freed(sim_mrec *r);

/* ---- copy.c ---- */
/* CUDA_SUCCESS when [addr, addr+n) lies in live allocations whose pages
 * allow the access (write: PROT_WRITE, else PROT_READ). */
SIM_HIDDEN CUresult sim_dev_range_ok(uint64_t addr, uint64_t n, bool write);

#endif /* MEMHOOK_SIM_MEM_H */
