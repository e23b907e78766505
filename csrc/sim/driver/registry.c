/*
 * registry.c - the table of live allocations: an array sorted by base
 * address, so "which allocation contains addr" is a binary search.
 * Live allocations never overlap (their VA comes from disjoint slices or,
 * for registered memory, the overlap is refused at registration).
 * Caller holds sim_lock for everything here.
 */
#include <stdlib.h>
#include <string.h>

#include "sim_mem.h"

/* Process-wide, like the driver state it simulates (one per process, shared
 * by every thread and context); guarded by sim_lock. */
static sim_alloc **R;
static size_t Rn, Rcap;
static unsigned long long next_buffer_id = 1;

static uint64_t extent(const sim_alloc *a)
{
    return a->size ? a->size : 1;
}

/* Index of the first entry with base > addr. */
static size_t upper(uint64_t addr)
{
    size_t lo = 0, hi = Rn;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (R[mid]->base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

SIM_HIDDEN unsigned long long sim_next_buffer_id(void)
{
    return next_buffer_id++;
}

SIM_HIDDEN CUresult sim_registry_insert(sim_alloc *a)
{
    if (Rn == Rcap) {
        size_t ncap = Rcap ? Rcap * 2 : 256;
        sim_alloc **nr = realloc(R, ncap * sizeof(*nr));
        if (!nr)
            return CUDA_ERROR_OUT_OF_MEMORY;
        R = nr;
        Rcap = ncap;
    }
    size_t i = upper(a->base);
    memmove(&R[i + 1], &R[i], (Rn - i) * sizeof(*R));
    R[i] = a;
    Rn++;
    return CUDA_SUCCESS;
}

SIM_HIDDEN void sim_registry_remove(sim_alloc *a)
{
    size_t i = upper(a->base);
    /* entries with equal base cannot exist, but search back to be safe */
    while (i > 0) {
        i--;
        if (R[i] == a) {
            memmove(&R[i], &R[i + 1], (Rn - i - 1) * sizeof(*R));
            Rn--;
            return;
        }
        if (R[i]->base != a->base)
            break;
    }
}

SIM_HIDDEN sim_alloc *sim_registry_find(uint64_t addr)
{
    size_t i = upper(addr);
    if (i == 0)
        return NULL;
    sim_alloc *a = R[i - 1];
    return addr - a->base < extent(a) ? a : NULL;
}

SIM_HIDDEN sim_alloc *sim_registry_find_overlap(uint64_t lo, uint64_t hi)
{
    if (hi <= lo)
        return NULL;
    sim_alloc *a = sim_registry_find(lo);
    if (a)
        return a;
    size_t i = upper(lo);
    if (i < Rn && R[i]->base < hi)
        return R[i];
    return NULL;
}

SIM_HIDDEN size_t sim_registry_count(void)
{
    return Rn;
}

SIM_HIDDEN sim_alloc *sim_registry_at(size_t i)
{
    return i < Rn ? R[i] : NULL;
}
