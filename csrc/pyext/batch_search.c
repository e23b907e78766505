/* batch_search.c - MemtypeCache.memory_types's search, in C: for each of
 * m pointers, the first region bound at or above it.
 *
 * numpy's searchsorted does one branching binary search per key; over a
 * cache of thousands of regions and pointers in random order each step's
 * comparison mispredicts half the time, and each step waits for the load
 * before it.  Here the comparison is a conditional move, and LANES keys
 * are searched in lockstep: their loads are independent, so the CPU has
 * LANES of them in flight instead of one.
 *
 * Called through cffi (the GIL released): it reads only the two arrays it
 * is given, which the caller keeps alive and nobody writes (a cache
 * snapshot is immutable). */
#include <stddef.h>
#include <stdint.h>

#define LANES 16

/* lower bound of v in sorted[0..n), n >= 1: the first index whose bound is
 * >= v, or n when none is. */
static inline size_t lower_bound(const uint64_t *sorted, size_t n, uint64_t v)
{
    const uint64_t *base = sorted;
    while (n > 1) {
        size_t half = n >> 1;
        base = base[half - 1] < v ? base + half : base;
        n -= half;
    }
    return (size_t)(base - sorted) + (*base < v);
}

/* out[i] = the first j with sorted[j] >= keys[i] (n when none), as
 * numpy.searchsorted(sorted, keys, side="left") for a sorted array. */
void
memhook_lower_bounds(const uint64_t *sorted, size_t n, const uint64_t *keys, size_t m,
                     int64_t *out)
{
    size_t i = 0;
    if (n == 0) {
        for (; i < m; i++)
            out[i] = 0;
        return;
    }
    for (; i + LANES <= m; i += LANES) {
        const uint64_t *base[LANES];
        for (int k = 0; k < LANES; k++)
            base[k] = sorted;
        for (size_t len = n; len > 1;) {
            size_t half = len >> 1;
            for (int k = 0; k < LANES; k++)
                base[k] = base[k][half - 1] < keys[i + k] ? base[k] + half : base[k];
            len -= half;
        }
        for (int k = 0; k < LANES; k++)
            out[i + k] = (int64_t)(base[k] - sorted) + (*base[k] < keys[i + k]);
    }
    for (; i < m; i++)
        out[i] = (int64_t)lower_bound(sorted, n, keys[i]);
}
