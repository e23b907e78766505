/*
 * cache_hand.c - the process cache written and listed by hand: what
 * Python's memhook.cache.process_cache() is a view of (memhook.h,
 * memhook_cache_*).
 *
 * A transport that knows of memory the hooks cannot see may record it in
 * the one process cache, and a program may list what the cache holds.  A
 * write takes the writer's seat (waiting for a drain's commit, which holds
 * it for one batch) and queues its operation after everything queued before
 * it, so it lands in event order with the hooks' own: what was published
 * before the call is applied before it, what comes after, after.  Regions
 * written here are stamped with the current install period and origin
 * HOOKS: vouched for exactly as the hooks' own are.
 *
 * Not for signal handlers (a write may wait for the seat; the listing
 * mallocs): the queries in cache_query.c are what a handler calls.
 */
#include <errno.h>
#include <stdlib.h>

#include "cache.h"
#include "queue.h"

static int range_end(uint64_t base, uint64_t size, uint64_t *end)
{
    if (size == 0)
        return -EINVAL;
    if (size > UINT64_MAX - base)
        return -EOVERFLOW;
    *end = base + size;
    return 0;
}

static int write_op(const mh_op *op)
{
    mh_cache *c = mh_cache_process();
    mh_cache_write_begin(c, true);
    bool queued = mh_cache_op(c, op);
    mh_cache_write_end(c);
    return queued ? 0 : -ENOMEM;
}

int memhook_cache_update(uint64_t base, uint64_t size, int mem_type, int device)
{
    uint64_t end;
    int rc = range_end(base, size, &end);
    if (rc != 0)
        return rc;
    if (mem_type < MEMHOOK_MEMORY_HOST || mem_type > MEMHOOK_MEMORY_UNKNOWN || device < -1 ||
        device > INT16_MAX)
        return -EINVAL;
    return write_op(&(mh_op){.start = base, .end = end, .kind = MH_OP_ASSIGN,
                             .device = (int16_t)device, .type = (uint8_t)mem_type,
                             .origin = MEMHOOK_ORIGIN_HOOKS});
}

int memhook_cache_remove(uint64_t base, uint64_t size)
{
    uint64_t end;
    int rc = range_end(base, size, &end);
    if (rc != 0)
        return rc;
    return write_op(&(mh_op){.start = base, .end = end, .kind = MH_OP_REMOVE});
}

int memhook_cache_clear(void)
{
    return write_op(&(mh_op){.kind = MH_OP_CLEAR});
}

/* Bring the snapshot up to what was published before the call, without
 * waiting for another thread's drain (as a query does). */
static mh_cache *current(void)
{
    mh_cache *c = mh_cache_process();
    mh_queue_feed_run(false);
    mh_cache_publish_deferred(c, true);
    return c;
}

int memhook_cache_lookup(const void *ptr, size_t len, memhook_region *out)
{
    uint64_t p = (uint64_t)(uintptr_t)ptr, end;
    if (out == NULL || out->struct_size < MEMHOOK_REGION_MIN_SIZE)
        return -EINVAL;
    int rc = range_end(p, len ? len : 1, &end);
    if (rc != 0)
        return rc;
    mh_found_region f;
    int k = mh_cache_classify(current(), p, end, &f);
    out->reserved0 = 0;
    if (k == MH_FOUND_IN || k == MH_FOUND_RUN) {
        out->mem_type = f.r.type;
        out->device = f.r.device;
        out->base = f.r.start;
        out->size = f.r.end - f.r.start;
        out->alloc_id = f.r.alloc_id;
        out->origin = f.vouched ? MEMHOOK_ORIGIN_HOOKS : MEMHOOK_ORIGIN_UNKNOWN;
    } else {
        out->mem_type = k == MH_FOUND_MIXED ? MEMHOOK_MEMORY_UNKNOWN : MEMHOOK_MEMORY_HOST;
        out->device = -1;
        out->base = p;
        out->size = end - p;
        out->alloc_id = 0;
        out->origin = MEMHOOK_ORIGIN_UNKNOWN;
    }
    return k;
}

size_t memhook_cache_regions(memhook_region *out, size_t capacity)
{
    mh_cache *c = current();
    mh_region *tmp = capacity && out != NULL ? malloc(capacity * sizeof(mh_region)) : NULL;
    size_t n = mh_cache_regions(c, tmp, tmp != NULL ? capacity : 0);
    for (size_t i = 0; tmp != NULL && i < n && i < capacity; i++) {
        memhook_region *o = &out[i];
        o->struct_size = sizeof(memhook_region);
        o->mem_type = tmp[i].type;
        o->device = tmp[i].device;
        o->base = tmp[i].start;
        o->size = tmp[i].end - tmp[i].start;
        o->alloc_id = tmp[i].alloc_id;
        o->origin = tmp[i].origin;
        o->reserved0 = 0;
    }
    free(tmp);
    return n;
}
