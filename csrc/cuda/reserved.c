/*
 * reserved.c - the VA ranges CUDA may have put memory in, as
 * /proc/self/maps shows them, for install()'s marking of allocations made
 * before the hooks (memhook/_queries/preexisting.py states the rule; this is its
 * walk over this process's own maps).
 *
 * Why in C: the kernel hands /proc/self/maps out a page per read(2), and
 * Python's every read releases the GIL; in a process whose other threads
 * keep the GIL busy, each release may make the reader wait its turn
 * (docs/performance.md, "Costs behind the code's choices").  One call into
 * the core reads the whole file.
 */
#include <string.h>
#include <sys/mman.h>

#include "cuda_hooks.h"
#include "procfs.h"

/* What the simulator's device-memory memfd is called in the maps (see
 * memhook/_queries/preexisting.py: SIM_MEMFD_PREFIX). */
#define SIM_MEMFD_PREFIX "/memfd:memhook-sim-gpu"
#define NVIDIA_PREFIX "/dev/nvidia"

typedef struct reserved_walk {
    uint64_t *out;     /* pairs: start, end */
    size_t cap;        /* pairs out can hold */
    size_t n;          /* pairs found (may exceed cap: the caller asks again) */
    uint64_t lo, hi;   /* the range being merged; hi == 0: none */
} reserved_walk;

static bool cuda_reserved(const mh_map_entry *e)
{
    if (e->name[0] == '\0')
        return (e->prot & (PROT_READ | PROT_WRITE | PROT_EXEC)) == 0;
    return strncmp(e->name, NVIDIA_PREFIX, sizeof NVIDIA_PREFIX - 1) == 0 ||
           strncmp(e->name, SIM_MEMFD_PREFIX, sizeof SIM_MEMFD_PREFIX - 1) == 0;
}

static void flush_range(reserved_walk *w)
{
    if (w->hi == 0)
        return;
    if (w->n < w->cap) {
        w->out[2 * w->n] = w->lo;
        w->out[2 * w->n + 1] = w->hi;
    }
    w->n++;
    w->hi = 0;
}

static bool reserved_line(const mh_map_entry *e, void *ctx)
{
    reserved_walk *w = ctx;
    if (!cuda_reserved(e) || e->end <= e->start)
        return true;
    if (w->hi != 0 && e->start <= w->hi) {  /* touching or overlapping: one range */
        if (e->end > w->hi)
            w->hi = e->end;
        return true;
    }
    flush_range(w);
    w->lo = e->start;
    w->hi = e->end;
    return true;
}

long long memhook_cuda_reserved_ranges(uint64_t *pairs, size_t capacity)
{
    if (pairs == NULL && capacity != 0)
        return -1;
    reserved_walk w = {.out = pairs, .cap = capacity};
    if (mh_maps_each(reserved_line, &w) != 0)
        return -1;
    flush_range(&w);
    return (long long)w.n;
}
