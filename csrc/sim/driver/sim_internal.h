/*
 * sim_internal.h - the contract between the parts of the simulated driver
 * (libcuda.so.1).  Nothing here is exported: every symbol declared in this
 * header has hidden visibility (the build uses -fvisibility=hidden and only
 * SIM_API functions are exported).
 *
 * Split of the driver, one idea per file:
 *   state.c       process-wide state, cuInit, fork poisoning, env config
 *   device.c      devices, attributes, cuDriverGetVersion
 *   context.c     contexts, the primary context, per-thread current stack
 *   stream.c      streams (all work is synchronous; streams are handles)
 *   errors.c      cuGetErrorName / cuGetErrorString
 *   procaddress.c cuGetProcAddress(_v2) and the versioned entry table
 *   module.c      modules and libraries with their globals
 *   vaspace.c     the reserved device VA range and the physical memfd
 *   registry.c    the table of live allocations, keyed by address
 *   memory.c      cuMemAlloc*, cuMemFree*, host memory, address ranges
 *   vmm.c         cuMemCreate / AddressReserve / Map / SetAccess ...
 *   pool.c        memory pools and stream-ordered allocation
 *   ipc.c         cuIpcGetMemHandle / Open / Close
 *   pointer.c     cuPointerGetAttribute(s)
 *   copy.c        memcpy / memset
 *
 * Locking: one process-wide mutex (sim_lock/sim_unlock) guards every table.
 * The driver is not a hot path for memhook's purposes and a single lock makes
 * every entry point trivially thread-safe and free of lock-order bugs.  Never
 * call an exported cu* function while holding it (they take it themselves);
 * call the sim_* helpers below instead.
 */
#ifndef MEMHOOK_SIM_INTERNAL_H
#define MEMHOOK_SIM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/cuda_abi.h"

#define SIM_API __attribute__((visibility("default")))
#define SIM_HIDDEN __attribute__((visibility("hidden")))

/* The driver version the simulator reports (580.xx drivers report 13000). */
#define SIM_DRIVER_VERSION 13000
#define SIM_MAX_DEVICES 8
#define SIM_PAGE_SIZE 4096ull
/* cuMemGetAllocationGranularity: what an H200 reports (2 MiB). */
#define SIM_VMM_GRANULARITY (2ull << 20)

/* ---- state.c ---------------------------------------------------------- */

typedef struct sim_config {
    int device_count;            /* MEMHOOK_SIM_DEVICES, default 1, 1..8 */
    uint64_t device_memory;      /* MEMHOOK_SIM_DEVICE_MEMORY bytes per device,
                                    default 16 GiB, suffixes K/M/G accepted */
} sim_config;

SIM_HIDDEN const sim_config *sim_cfg(void);
SIM_HIDDEN void sim_lock(void);
SIM_HIDDEN void sim_unlock(void);
/* CUDA_SUCCESS once cuInit succeeded in this process; NOT_INITIALIZED before
 * cuInit and forever in a child forked after the parent initialised (what
 * the real driver does). */
SIM_HIDDEN CUresult sim_check_init(void);

/* ---- context.c -------------------------------------------------------- */

typedef struct sim_ctx {
    uint32_t magic;              /* SIM_CTX_MAGIC while alive */
    CUdevice device;
    unsigned int flags;
    bool primary;
    int refcount;                /* primary: retain count; others: 1 */
    unsigned long long id;       /* cuCtxGetId */
} sim_ctx;
#define SIM_CTX_MAGIC 0x43545831u

/* The calling thread's current context, or NULL. */
SIM_HIDDEN sim_ctx *sim_ctx_current(void);
/* The current context, or CUDA_ERROR_INVALID_CONTEXT when there is none
 * (and NOT_INITIALIZED before cuInit). */
SIM_HIDDEN CUresult sim_ctx_require(sim_ctx **out);
/* Validate a handle passed in by the user: NULL or dead -> INVALID_CONTEXT. */
SIM_HIDDEN CUresult sim_ctx_check(CUcontext handle, sim_ctx **out);

/* ---- the legacy 32-bit (v1) API (context.c) ----------------------------
 *
 * The pre-3.2 entry points with 32-bit device pointers and sizes
 * (cuMemAlloc, cuMemAllocPitch, cuMemFree, cuMemAllocHost,
 * cuMemHostGetDevicePointer, cuMemGetAddressRange, cuMemGetInfo,
 * cuMemcpyHtoD/DtoH/DtoD and their v1 Async forms, cuMemsetD8/D16/D32 and
 * cuModuleGetGlobal, all without _v2) only work in a context created by the
 * v1 cuCtxCreate (API version 3010).  With a current context made by the
 * modern API (a primary context, cuCtxCreate_v2 and later) the H200's driver
 * answers every one of them CUDA_ERROR_INVALID_CONTEXT, and so does the
 * simulator.  In a legacy context their device pointers come from a window
 * below 4 GiB (SIM_SPACE_LEGACY32), reserved the first time it is needed;
 * when it cannot be reserved the v1 allocators return OUT_OF_MEMORY.
 * (cuDeviceTotalMem, which needs no context, works everywhere.) */

/* True when ctx was created by the v1 cuCtxCreate (API version < 3020). */
SIM_HIDDEN bool sim_ctx_is_legacy(const sim_ctx *ctx);
/* The context check of every v1 entry point that needs a context, made
 * before any argument is looked at: NOT_INITIALIZED before cuInit, then
 * INVALID_CONTEXT unless the current context is a legacy one.  On success
 * *out (when not NULL) is that context.  May be called with or without
 * sim_lock held. */
SIM_HIDDEN CUresult sim_ctx_require_legacy(sim_ctx **out);

/* ---- stream.c --------------------------------------------------------- */

/* Accepts NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD and live streams of
 * the current context; anything else is CUDA_ERROR_INVALID_HANDLE. */
SIM_HIDDEN CUresult sim_stream_check(CUstream stream);

/* ---- vaspace.c -------------------------------------------------------- */

/* Each device owns a slice of one reserved, no-access VA range, and a slice
 * of one memfd that plays the device's physical memory.  Host-located
 * allocations (pinned host, host-located pools/VMM) take their VA from a
 * separate host slice so that no device pointer and no host pointer share
 * an address. */
typedef enum sim_space { SIM_SPACE_DEVICE, SIM_SPACE_HOST, SIM_SPACE_LEGACY32 } sim_space;

SIM_HIDDEN CUresult sim_va_reserve(sim_space space, int device, uint64_t size,
                                   uint64_t align, uint64_t fixed_hint,
                                   uint64_t *addr);
SIM_HIDDEN void sim_va_release(uint64_t addr, uint64_t size);
/* Physical memory: offsets into the memfd; OUT_OF_MEMORY past capacity. */
SIM_HIDDEN CUresult sim_phys_alloc(sim_space space, int device, uint64_t size,
                                   uint64_t *offset);
SIM_HIDDEN void sim_phys_free(uint64_t offset, uint64_t size);
/* Map physical [offset, offset+size) at addr with PROT_* prot; unmap puts
 * the range back to reserved no-access. */
SIM_HIDDEN int sim_map(uint64_t addr, uint64_t size, uint64_t offset, int prot);
SIM_HIDDEN int sim_unmap(uint64_t addr, uint64_t size);
SIM_HIDDEN bool sim_va_is_device(uint64_t addr);
SIM_HIDDEN uint64_t sim_phys_used(int device);

/* ---- registry.c / memory.c ---------------------------------------------- */

typedef enum sim_alloc_kind {
    SIM_ALLOC_DEVICE,        /* cuMemAlloc, pitched, module/library globals */
    SIM_ALLOC_MANAGED,       /* cuMemAllocManaged, managed library globals */
    SIM_ALLOC_HOST,          /* cuMemAllocHost / cuMemHostAlloc */
    SIM_ALLOC_REGISTERED,    /* cuMemHostRegister */
    SIM_ALLOC_POOL,          /* cuMemAllocAsync / FromPoolAsync */
    SIM_ALLOC_VMM_MAP,       /* a cuMemMap'ed piece of a reservation */
    SIM_ALLOC_IPC,           /* cuIpcOpenMemHandle */
} sim_alloc_kind;

typedef struct sim_alloc {
    uint64_t base;           /* user-visible start */
    uint64_t size;           /* requested size: what GetAddressRange returns */
    uint64_t mapped_size;    /* page-rounded size actually mapped */
    sim_alloc_kind kind;
    CUmemorytype memtype;    /* HOST or DEVICE as the driver reports it */
    int device;              /* ordinal; -1 (CU_DEVICE_CPU) for host-located */
    sim_ctx *ctx;            /* owning context (NULL for context-free ones) */
    unsigned long long buffer_id;
    uint64_t phys_offset;    /* memfd offset, or UINT64_MAX when not memfd */
    void *owner;             /* pool, VMM handle, module... or NULL */
    unsigned int flags;      /* host alloc/register flags, attach flags */
} sim_alloc;

/* Allocate accessible device (or managed) memory for ctx; used by the
 * module code for globals.  Caller holds sim_lock. */
SIM_HIDDEN CUresult sim_mem_alloc_locked(sim_ctx *ctx, sim_alloc_kind kind,
                                         uint64_t size, void *owner,
                                         uint64_t *out);
SIM_HIDDEN CUresult sim_mem_free_locked(uint64_t base);
/* Free everything a context owns (cuCtxDestroy, primary release/reset). */
SIM_HIDDEN void sim_mem_free_ctx_locked(sim_ctx *ctx);
/* The live allocation containing addr, or NULL. */
SIM_HIDDEN sim_alloc *sim_registry_find(uint64_t addr);

/* ---- added by control half ---- */

/* vaspace.c (memory half): reserve the device VA range and create the
 * memfd.  cuInit calls it once, holding sim_lock. */
SIM_HIDDEN CUresult sim_vaspace_init(void);

/* Module and library globals (module.c).  module.c allocates each global
 * with sim_mem_alloc_locked(ctx, SIM_ALLOC_DEVICE or SIM_ALLOC_MANAGED,
 * size, owner = the module, &addr) and then sets this bit in the
 * allocation's flags.  Only cuModuleUnload / cuLibraryUnload (and context
 * teardown) may free such an allocation: the exported frees (cuMemFree,
 * cuMemFree_v2, cuMemFreeAsync*) must refuse it with
 * CUDA_ERROR_INVALID_VALUE and leave it mapped.  sim_mem_free_locked does
 * NOT check the bit (module.c frees globals through it). */
#define SIM_ALLOC_FLAG_MODULE_GLOBAL 0x80000000u
static inline bool sim_alloc_is_module_global(const sim_alloc *a)
{
    return a != NULL && (a->flags & SIM_ALLOC_FLAG_MODULE_GLOBAL) != 0;
}

/* Locking note: sim_lock is a RECURSIVE mutex, so sim_ctx_current,
 * sim_ctx_require, sim_ctx_check and sim_stream_check may be called with
 * or without sim_lock held (they take it themselves). */

/* True while ctx is a live context (primary: while retained).  Caller holds
 * sim_lock. */
SIM_HIDDEN bool sim_ctx_alive_locked(const sim_ctx *ctx);

/* ---- added by memory half ---- */

/* sim_vaspace_init (declared above) is idempotent and guarded by a private
 * mutex that never takes sim_lock, so it may be called with or without
 * sim_lock held; the allocators also call it lazily.  It returns
 * OUT_OF_MEMORY when the VA cannot be reserved and OPERATING_SYSTEM when
 * the memfd cannot be made.
 *
 * Notes on the helpers above, as the memory half implements them:
 * - sim_va_reserve(SIM_SPACE_DEVICE, -1, ...) reserves from the VMM slice
 *   (cuMemAddressReserve); align 0 means page alignment; fixed_hint is used
 *   when that range is free in the slice, else ignored.
 * - sim_phys_alloc(SIM_SPACE_LEGACY32, dev, ...) draws on dev's memory.
 * - sim_mem_free_ctx_locked(ctx) frees the device, managed, pinned host,
 *   pool and IPC allocations and the registrations of ctx, but NOT
 *   allocations made through sim_mem_alloc_locked with owner != NULL
 *   (module/library globals): module.c frees those with
 *   sim_mem_free_locked (sim_module_drop_ctx_locked runs first), so an
 *   address is never freed twice.
 * - Allocations are zero-filled (fresh or hole-punched memfd pages).
 * - The exported frees refuse any DEVICE/MANAGED allocation with an owner
 *   or with SIM_ALLOC_FLAG_MODULE_GLOBAL set. */

#endif /* MEMHOOK_SIM_INTERNAL_H */
