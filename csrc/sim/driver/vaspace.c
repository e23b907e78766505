/*
 * vaspace.c - the simulated GPU address space and its physical memory.
 *
 * One PROT_NONE reservation holds, in order: a slice per device (4x its
 * memory), a slice for VMM reservations (cuMemAddressReserve), and a slice
 * for host-located memory (pinned host, host pools, host VMM).  A small
 * window below 4 GiB serves the legacy 32-bit (v1) allocators in a legacy
 * context (see sim_internal.h); it is reserved the first time one of them
 * asks for VA (sim_va_reserve(SIM_SPACE_LEGACY32, ...)), never before.
 *
 * Physical memory is one sparse memfd: [dev0][dev1]...[host].  Each region
 * is a first-fit extent allocator; freed ranges are punched out of the file
 * so their pages really go back to the kernel.
 *
 * Everything here runs under sim_lock, except sim_vaspace_init which is
 * idempotent and guarded by its own mutex (which the lazy reservation of the
 * 32-bit window takes too).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_mem.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef FALLOC_FL_KEEP_SIZE
#define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
#define FALLOC_FL_PUNCH_HOLE 0x02
#endif

#define TWO_MIB (2ull << 20)
#define LEGACY32_SIZE (256ull << 20)

typedef struct ext {
    uint64_t start, size;
} ext;

/* A sorted array of free extents over [base, base+size). */
typedef struct arena {
    ext *v;
    size_t n, cap;
    uint64_t base, size, used;
} arena;

/* The one simulated address space and physical memory of the process (the
 * driver has one per process too); set up once under init_mu, then its
 * arenas are guarded by sim_lock. */
static struct {
    atomic_bool ready;
    int memfd;
    int ndev;
    uint64_t dev_mem, host_cap;
    uint64_t va_base, va_size;
    arena dev_va[SIM_MAX_DEVICES], vmm_va, host_va, legacy_va;
    atomic_bool have_legacy;     /* legacy_va is set up (then for good) */
    arena dev_phys[SIM_MAX_DEVICES], host_phys;
} V = {.memfd = -1};

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- extent allocator ------------------------------------------------- */

static bool arena_init(arena *a, uint64_t base, uint64_t size)
{
    a->cap = 16;
    a->v = malloc(a->cap * sizeof(ext));
    if (!a->v)
        return false;
    a->n = 1;
    a->v[0].start = base;
    a->v[0].size = size;
    a->base = base;
    a->size = size;
    a->used = 0;
    return true;
}

static bool arena_contains(const arena *a, uint64_t addr)
{
    return a->size && addr >= a->base && addr - a->base < a->size;
}

static bool arena_grow(arena *a)
{
    if (a->n < a->cap)
        return true;
    size_t ncap = a->cap * 2;
    ext *nv = realloc(a->v, ncap * sizeof(ext));
    if (!nv)
        return false;
    a->v = nv;
    a->cap = ncap;
    return true;
}

/* Take [s, s+size) out of free extent i. */
static bool arena_carve(arena *a, size_t i, uint64_t s, uint64_t size)
{
    ext e = a->v[i];
    uint64_t end = s + size, eend = e.start + e.size;
    bool left = s > e.start, right = end < eend;
    if (left && right) {
        if (!arena_grow(a))
            return false;
        memmove(&a->v[i + 2], &a->v[i + 1], (a->n - i - 1) * sizeof(ext));
        a->n++;
        a->v[i].size = s - e.start;
        a->v[i + 1].start = end;
        a->v[i + 1].size = eend - end;
    } else if (left) {
        a->v[i].size = s - e.start;
    } else if (right) {
        a->v[i].start = end;
        a->v[i].size = eend - end;
    } else {
        memmove(&a->v[i], &a->v[i + 1], (a->n - i - 1) * sizeof(ext));
        a->n--;
    }
    a->used += size;
    return true;
}

static bool arena_alloc(arena *a, uint64_t size, uint64_t align, uint64_t hint,
                        uint64_t *out)
{
    if (size == 0 || size > a->size)
        return false;
    if (hint && (hint & (align - 1)) == 0 && arena_contains(a, hint)) {
        /* last extent starting at or below hint */
        size_t lo = 0, hi = a->n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (a->v[mid].start <= hint)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo > 0) {
            ext e = a->v[lo - 1];
            if (hint - e.start < e.size && e.start + e.size - hint >= size) {
                if (!arena_carve(a, lo - 1, hint, size))
                    return false;
                *out = hint;
                return true;
            }
        }
    }
    for (size_t i = 0; i < a->n; i++) {
        ext e = a->v[i];
        if (e.size < size)
            continue;
        uint64_t s = SIM_ALIGN_UP(e.start, align);
        if (s < e.start || s - e.start > e.size - size)
            continue;
        if (!arena_carve(a, i, s, size))
            return false;
        *out = s;
        return true;
    }
    return false;
}

static void arena_free(arena *a, uint64_t start, uint64_t size)
{
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a->v[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* lo: first extent after start */
    bool merge_prev = lo > 0 && a->v[lo - 1].start + a->v[lo - 1].size == start;
    bool merge_next = lo < a->n && start + size == a->v[lo].start;
    a->used -= size;
    if (merge_prev && merge_next) {
        a->v[lo - 1].size += size + a->v[lo].size;
        memmove(&a->v[lo], &a->v[lo + 1], (a->n - lo - 1) * sizeof(ext));
        a->n--;
    } else if (merge_prev) {
        a->v[lo - 1].size += size;
    } else if (merge_next) {
        a->v[lo].start = start;
        a->v[lo].size += size;
    } else {
        if (!arena_grow(a)) {
            /* Cannot record the hole: leak it rather than corrupt. */
            a->used += size;
            return;
        }
        memmove(&a->v[lo + 1], &a->v[lo], (a->n - lo) * sizeof(ext));
        a->v[lo].start = start;
        a->v[lo].size = size;
        a->n++;
    }
}

/* ---- initialisation --------------------------------------------------- */

/* Reserve the 32-bit window, once; false when it cannot be had (then a
 * later call tries again). */
static bool reserve_legacy32(void)
{
    if (atomic_load_explicit(&V.have_legacy, memory_order_acquire))
        return true;
    pthread_mutex_lock(&init_mu);
    bool ok = atomic_load_explicit(&V.have_legacy, memory_order_relaxed);
    static const uint64_t candidates[] = {0x40000000ull, 0x80000000ull,
                                          0xC0000000ull, 0x20000000ull,
                                          0x60000000ull, 0xA0000000ull};
    for (size_t i = 0; !ok && i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        void *want = (void *)(uintptr_t)candidates[i];
        void *p = mmap(want, LEGACY32_SIZE, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                       -1, 0);
        if (p == MAP_FAILED)
            continue;
        if (p != want) { /* old kernel: the flag was only a hint */
            munmap(p, LEGACY32_SIZE);
            continue;
        }
        if (arena_init(&V.legacy_va, candidates[i], LEGACY32_SIZE)) {
            atomic_store_explicit(&V.have_legacy, true, memory_order_release);
            ok = true;
        } else {
            munmap(p, LEGACY32_SIZE);
            break;
        }
    }
    pthread_mutex_unlock(&init_mu);
    return ok;
}

static bool have_legacy(void)
{
    return atomic_load_explicit(&V.have_legacy, memory_order_acquire);
}

SIM_HIDDEN CUresult sim_vaspace_init(void)
{
    if (atomic_load_explicit(&V.ready, memory_order_acquire))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&init_mu);
    CUresult rc = CUDA_SUCCESS;
    if (atomic_load_explicit(&V.ready, memory_order_relaxed))
        goto out;

    const sim_config *cfg = sim_cfg();
    int ndev = cfg->device_count;
    if (ndev < 1)
        ndev = 1;
    if (ndev > SIM_MAX_DEVICES)
        ndev = SIM_MAX_DEVICES;
    uint64_t dev_mem = SIM_ALIGN_UP(cfg->device_memory ? cfg->device_memory : (16ull << 30),
                                    SIM_PAGE_SIZE);
    uint64_t host_cap = dev_mem > (4ull << 30) ? dev_mem : (4ull << 30);
    uint64_t dev_slice = SIM_ALIGN_UP(4 * dev_mem, TWO_MIB);
    uint64_t vmm_slice = SIM_ALIGN_UP(4 * dev_mem * (uint64_t)ndev, TWO_MIB);
    uint64_t host_slice = SIM_ALIGN_UP(4 * host_cap, TWO_MIB);
    uint64_t total = dev_slice * (uint64_t)ndev + vmm_slice + host_slice;

    /* Over-reserve by 2 MiB so the base can be aligned, then trim. */
    void *raw = mmap(NULL, total + TWO_MIB, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    uint64_t rawa = (uint64_t)(uintptr_t)raw;
    uint64_t base = SIM_ALIGN_UP(rawa, TWO_MIB);
    if (base > rawa)
        munmap(raw, base - rawa);
    if (rawa + total + TWO_MIB > base + total)
        munmap((void *)(uintptr_t)(base + total), rawa + TWO_MIB - base);

    int fd = (int)memfd_create("memhook-sim-gpu", MFD_CLOEXEC);
    if (fd < 0) {
        munmap((void *)(uintptr_t)base, total);
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }
    uint64_t phys_total = dev_mem * (uint64_t)ndev + host_cap;
    if (ftruncate(fd, (off_t)phys_total) != 0) {
        close(fd);
        munmap((void *)(uintptr_t)base, total);
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }

    bool ok = true;
    uint64_t cur = base;
    for (int d = 0; d < ndev; d++) {
        ok = ok && arena_init(&V.dev_va[d], cur, dev_slice);
        cur += dev_slice;
        ok = ok && arena_init(&V.dev_phys[d], dev_mem * (uint64_t)d, dev_mem);
    }
    ok = ok && arena_init(&V.vmm_va, cur, vmm_slice);
    cur += vmm_slice;
    ok = ok && arena_init(&V.host_va, cur, host_slice);
    ok = ok && arena_init(&V.host_phys, dev_mem * (uint64_t)ndev, host_cap);
    if (!ok) {
        close(fd);
        munmap((void *)(uintptr_t)base, total);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    V.memfd = fd;
    V.ndev = ndev;
    V.dev_mem = dev_mem;
    V.host_cap = host_cap;
    V.va_base = base;
    V.va_size = total;
    atomic_store_explicit(&V.ready, true, memory_order_release);
out:
    pthread_mutex_unlock(&init_mu);
    return rc;
}

/* ---- VA ---------------------------------------------------------------- */

static arena *va_arena_for(sim_space space, int device)
{
    switch (space) {
    case SIM_SPACE_DEVICE:
        if (device == -1)
            return &V.vmm_va;
        if (device < 0 || device >= V.ndev)
            return NULL;
        return &V.dev_va[device];
    case SIM_SPACE_HOST:
        return &V.host_va;
    case SIM_SPACE_LEGACY32:
        return reserve_legacy32() ? &V.legacy_va : NULL;
    }
    return NULL;
}

static arena *va_arena_of(uint64_t addr)
{
    if (have_legacy() && arena_contains(&V.legacy_va, addr))
        return &V.legacy_va;
    if (addr < V.va_base || addr - V.va_base >= V.va_size)
        return NULL;
    for (int d = 0; d < V.ndev; d++)
        if (arena_contains(&V.dev_va[d], addr))
            return &V.dev_va[d];
    if (arena_contains(&V.vmm_va, addr))
        return &V.vmm_va;
    if (arena_contains(&V.host_va, addr))
        return &V.host_va;
    return NULL;
}

/* space DEVICE with device -1 is the VMM reservation slice. */
SIM_HIDDEN CUresult sim_va_reserve(sim_space space, int device, uint64_t size,
                                   uint64_t align, uint64_t fixed_hint,
                                   uint64_t *addr)
{
    CUresult rc = sim_vaspace_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    arena *a = va_arena_for(space, device);
    if (!a) /* a bad device, or the 32-bit window could not be reserved */
        return space == SIM_SPACE_LEGACY32 ? CUDA_ERROR_OUT_OF_MEMORY
                                           : CUDA_ERROR_INVALID_DEVICE;
    if (align < SIM_PAGE_SIZE)
        align = SIM_PAGE_SIZE;
    if (!SIM_IS_POW2(align))
        return CUDA_ERROR_INVALID_VALUE;
    size = SIM_ALIGN_UP(size, SIM_PAGE_SIZE);
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!arena_alloc(a, size, align, fixed_hint, addr))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

SIM_HIDDEN void sim_va_release(uint64_t addr, uint64_t size)
{
    if (!atomic_load(&V.ready))
        return;
    arena *a = va_arena_of(addr);
    if (a)
        arena_free(a, addr, SIM_ALIGN_UP(size, SIM_PAGE_SIZE));
}

SIM_HIDDEN bool sim_va_is_device(uint64_t addr)
{
    if (!atomic_load(&V.ready))
        return false;
    arena *a = va_arena_of(addr);
    return a && a != &V.host_va;
}

SIM_HIDDEN bool sim_va_is_ours(uint64_t addr, uint64_t size)
{
    if (!atomic_load(&V.ready))
        return false;
    uint64_t end = addr + size;
    if (end < addr)
        return true;
    if (have_legacy() && addr < V.legacy_va.base + V.legacy_va.size &&
        end > V.legacy_va.base)
        return true;
    return addr < V.va_base + V.va_size && end > V.va_base;
}

/* ---- physical memory --------------------------------------------------- */

static arena *phys_arena_for(sim_space space, int device)
{
    if (space == SIM_SPACE_HOST || device < 0)
        return &V.host_phys;
    if (device >= V.ndev)
        return NULL;
    return &V.dev_phys[device];
}

SIM_HIDDEN CUresult sim_phys_alloc(sim_space space, int device, uint64_t size,
                                   uint64_t *offset)
{
    CUresult rc = sim_vaspace_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    arena *a = phys_arena_for(space, device);
    if (!a)
        return CUDA_ERROR_INVALID_DEVICE;
    size = SIM_ALIGN_UP(size, SIM_PAGE_SIZE);
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!arena_alloc(a, size, SIM_PAGE_SIZE, 0, offset))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

SIM_HIDDEN void sim_phys_free(uint64_t offset, uint64_t size)
{
    if (!atomic_load(&V.ready) || offset == UINT64_MAX)
        return;
    size = SIM_ALIGN_UP(size, SIM_PAGE_SIZE);
    arena *a = NULL;
    for (int d = 0; d < V.ndev && !a; d++)
        if (arena_contains(&V.dev_phys[d], offset))
            a = &V.dev_phys[d];
    if (!a && arena_contains(&V.host_phys, offset))
        a = &V.host_phys;
    if (!a)
        return;
    /* Give the pages back; a later allocation of this range reads zeros. */
    (void)fallocate(V.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    (off_t)offset, (off_t)size);
    arena_free(a, offset, size);
}

SIM_HIDDEN uint64_t sim_phys_used(int device)
{
    if (!atomic_load(&V.ready))
        return 0;
    arena *a = phys_arena_for(device < 0 ? SIM_SPACE_HOST : SIM_SPACE_DEVICE, device);
    return a ? a->used : 0;
}

SIM_HIDDEN uint64_t sim_phys_capacity(int device)
{
    if (!atomic_load(&V.ready)) {
        const sim_config *cfg = sim_cfg();
        return cfg->device_memory;
    }
    arena *a = phys_arena_for(device < 0 ? SIM_SPACE_HOST : SIM_SPACE_DEVICE, device);
    return a ? a->size : 0;
}

SIM_HIDDEN int sim_memfd(void)
{
    return atomic_load(&V.ready) ? V.memfd : -1;
}

/* ---- mapping ----------------------------------------------------------- */

SIM_HIDDEN int sim_map_fd(uint64_t addr, uint64_t size, int fd, uint64_t offset,
                          int prot)
{
    size = SIM_ALIGN_UP(size, SIM_PAGE_SIZE);
    void *p = mmap((void *)(uintptr_t)addr, size, prot, MAP_FIXED | MAP_SHARED, fd,
                   (off_t)offset);
    return p == MAP_FAILED ? -1 : 0;
}

SIM_HIDDEN int sim_map(uint64_t addr, uint64_t size, uint64_t offset, int prot)
{
    if (!atomic_load(&V.ready))
        return -1;
    return sim_map_fd(addr, size, V.memfd, offset, prot);
}

SIM_HIDDEN int sim_unmap(uint64_t addr, uint64_t size)
{
    size = SIM_ALIGN_UP(size, SIM_PAGE_SIZE);
    void *p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? -1 : 0;
}
