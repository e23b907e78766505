/*
 * queue_stats.c - memhook_queue_stats_get: the queue's own figures
 * (csrc/queue/) plus where FREE sizes came from, which only this layer
 * knows (emit.c notes it; the queue carries events, not their provenance).
 */
#include <stdatomic.h>

#include "cuda_hooks.h"
#include "queue.h"

/* Process-wide, as the queue statistics they are part of: FREEs whose size
 * the driver gave, and FREEs whose size nobody knew.  Relaxed counters
 * bumped on the hook path (a FREE that missed the live table already paid
 * for a driver query); read without a lock. */
static _Atomic uint64_t g_free_from_driver, g_free_unknown;

void mh_free_source_note(bool from_driver, bool unknown)
{
    if (from_driver)
        atomic_fetch_add_explicit(&g_free_from_driver, 1, memory_order_relaxed);
    if (unknown)
        atomic_fetch_add_explicit(&g_free_unknown, 1, memory_order_relaxed);
}

void memhook_queue_stats_get(memhook_queue_stats *out)
{
    if (out == NULL)
        return;
    mh_queue_stats_fill(out);
    out->free_size_from_driver = atomic_load(&g_free_from_driver);
    out->free_size_unknown = atomic_load(&g_free_unknown);
}
