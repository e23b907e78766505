/* batch_search.c - MemtypeCache.memory_types in C: for each of m pointers,
 * the first region whose last byte is at or above it, and from that the
 * pointer's memory type, in one pass over the pointers.
 *
 * numpy's searchsorted does one branching binary search per key; over a
 * cache of thousands of regions and pointers in random order each step's
 * comparison mispredicts half the time, and each step waits for the load
 * before it.  Here LANES keys are searched in lockstep, and a step moves a
 * lane by adding (bound < key) * half to an index: arithmetic the compiler
 * keeps free of branches at every -O level.  (Written as a choice between
 * two pointers, gcc -O2 turns the step into a branch: docs/performance.md.)
 * The lanes' loads are independent, so the CPU has LANES of them in flight.
 *
 * Called through cffi (the GIL released): it reads only the arrays it is
 * given, which the caller keeps alive and nobody writes (a cache snapshot is
 * immutable). */
#include <stddef.h>
#include <stdint.h>

#define LANES 16

/* Lower bounds of LANES keys at once in sorted[0..n), n >= 1: pos[k] is the
 * first index whose bound is >= key[k], or n when none is. */
static inline void lower_bounds_lanes(const uint64_t *sorted, size_t n, const uint64_t *key,
                                      size_t *pos)
{
    for (int k = 0; k < LANES; k++)
        pos[k] = 0;
    for (size_t len = n; len > 1;) {
        size_t half = len >> 1;
        for (int k = 0; k < LANES; k++)
            pos[k] += (size_t)(sorted[pos[k] + half - 1] < key[k]) * half;
        len -= half;
    }
    for (int k = 0; k < LANES; k++)
        pos[k] += sorted[pos[k]] < key[k];
}

/* The same for one key (the tail of a batch). */
static inline size_t lower_bound(const uint64_t *sorted, size_t n, uint64_t key)
{
    size_t pos = 0;
    for (size_t len = n; len > 1;) {
        size_t half = len >> 1;
        pos += (size_t)(sorted[pos + half - 1] < key) * half;
        len -= half;
    }
    return pos + (sorted[pos] < key);
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
        size_t pos[LANES];
        lower_bounds_lanes(sorted, n, keys + i, pos);
        for (int k = 0; k < LANES; k++)
            out[i + k] = (int64_t)pos[k];
    }
    for (; i < m; i++)
        out[i] = (int64_t)lower_bound(sorted, n, keys[i]);
}

/* One pointer's answer from its lower bound j over a cache snapshot of
 * `regions` regions: starts[j] .. lasts[j] holds it when starts[j] <= key
 * (lasts[j] >= key is what the bound means).  Index `regions` is the
 * snapshot's sentinel, which holds nothing. */
static inline void classify(const uint64_t *starts, const uint8_t *types, size_t regions,
                            size_t j, uint64_t key, uint8_t *code, uint8_t *absent)
{
    int inside = j < regions && starts[j] <= key;
    *code = (uint8_t)(types[j] * inside); /* HOST is 0 */
    if (absent)
        *absent = (uint8_t)!inside;
}

/* codes[i] = the memory type code of keys[i] in a cache snapshot: the type
 * of the region that holds it, HOST (0) where none does; absent[i] (when
 * absent is not NULL) = 1 where no region holds it.  The snapshot is
 * `regions` regions, sorted and disjoint, then a sentinel: starts, lasts
 * (last bytes) and types each have regions + 1 entries. */
void
memhook_memory_types(const uint64_t *starts, const uint64_t *lasts, const uint8_t *types,
                     size_t regions, const uint64_t *keys, size_t m, uint8_t *codes,
                     uint8_t *absent)
{
    size_t n = regions + 1, i = 0;
    for (; i + LANES <= m; i += LANES) {
        size_t pos[LANES];
        lower_bounds_lanes(lasts, n, keys + i, pos);
        for (int k = 0; k < LANES; k++)
            classify(starts, types, regions, pos[k], keys[i + k], codes + i + k,
                     absent ? absent + i + k : NULL);
    }
    for (; i < m; i++)
        classify(starts, types, regions, lower_bound(lasts, n, keys[i]), keys[i], codes + i,
                 absent ? absent + i : NULL);
}
