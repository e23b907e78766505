/*
 * cache_query.c - memhook_query and its batch forms (the contract is in
 * memhook.h), and the testing entry points of a private cache.
 *
 * A query: apply what is pending (a run of the queue read for the cache,
 * only if the consumer lock is free), read the snapshot, and answer from it
 * where the hooks vouch; otherwise ask the driver - only one the process
 * has loaded and initialised - and remember a CUDA answer as a region if
 * nothing was applied meanwhile (an event applied between the driver's
 * answer and the write may be the FREE of that very range).  Where the
 * drain was busy in another thread, the cache may lack an event published
 * before the query: the driver answers then, and only where there is no
 * driver does the query wait for the cache to be brought up to date.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "queue.h"

/* Process-wide, as the driver it reaches: set once by csrc/cuda/. */
static _Atomic mh_cache_driver_fn g_driver;

void mh_cache_set_driver(mh_cache_driver_fn fn)
{
    atomic_store_explicit(&g_driver, fn, memory_order_release);
}

static bool host_vouched(mh_cache *c)
{
    return (mh_cache_period(c) & 1u) && mh_cache_coverage(c);
}

static int check_args(const void *ptr, size_t len, const memhook_region *out, uint64_t *end)
{
    if (out == NULL || out->struct_size < MEMHOOK_REGION_MIN_SIZE)
        return -EINVAL;
    uint64_t p = (uint64_t)(uintptr_t)ptr, n = len ? len : 1;
    if (n > UINT64_MAX - p)
        return -EOVERFLOW;
    *end = p + n;
    return 0;
}

static inline void fill(memhook_region *out, int type, int device, uint64_t base, uint64_t size,
                        uint64_t alloc_id, int origin)
{
    /* (every field this version knows; a larger struct's tail is the
     * caller's) */
    out->mem_type = type;
    out->device = device;
    out->base = base;
    out->size = size;
    out->alloc_id = alloc_id;
    out->origin = origin;
    out->reserved0 = 0;
}

static void fill_found(memhook_region *out, const mh_found_region *f, int origin)
{
    fill(out, f->r.type, f->r.device, f->r.start, f->r.end - f->r.start, f->r.alloc_id, origin);
}

/* Remember a driver answer (a writer's seat only if free: never waits). */
static void remember(mh_cache *c, const mh_driver_answer *d, uint64_t since)
{
    if (d->size == 0 || d->base + d->size < d->base || !mh_cache_write_begin(c, false))
        return;
    if (mh_cache_generation(c) == since) {
        mh_found_region f;
        uint64_t keep = 0;
        int k = mh_cache_classify(c, d->base, d->base + d->size, &f);
        if (k == MH_FOUND_IN && f.r.start == d->base && f.r.end == d->base + d->size &&
            f.r.type == d->type) {
            keep = f.r.alloc_id;
            if (f.r.origin == MEMHOOK_ORIGIN_DRIVER && f.r.period == mh_cache_period(c) &&
                f.r.device == d->device) {
                mh_cache_write_end(c);  /* already remembered as such */
                return;
            }
        }
        mh_cache_op(c, &(mh_op){.start = d->base, .end = d->base + d->size, .alloc_id = keep,
                                .kind = MH_OP_ASSIGN, .device = (int16_t)d->device,
                                .type = (uint8_t)d->type, .origin = MEMHOOK_ORIGIN_DRIVER});
    }
    mh_cache_write_end(c);
}

/* The answer for [p, end) from the cache, the driver where the hooks do not
 * vouch.  `fresh`: the cache holds every event published before the query;
 * `use_driver` false: the cache alone (memhook_query_cached). */
static void answer(mh_cache *c, uint64_t p, uint64_t end, bool fresh, bool use_driver,
                   memhook_region *out)
{
    mh_found_region f;
    int k = mh_cache_classify(c, p, end, &f);
    if (fresh || !use_driver) {
        if ((k == MH_FOUND_IN || k == MH_FOUND_RUN) && f.vouched) {
            fill_found(out, &f, MEMHOOK_ORIGIN_HOOKS);
            return;
        }
        if (k == MH_FOUND_ABSENT && f.host_vouched) {
            fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0, MEMHOOK_ORIGIN_HOOKS);
            return;
        }
        if (k == MH_FOUND_MIXED && f.host_vouched) {
            fill(out, MEMHOOK_MEMORY_UNKNOWN, -1, p, end - p, 0, MEMHOOK_ORIGIN_HOOKS);
            return;
        }
    }
    mh_cache_driver_fn driver = use_driver ? atomic_load_explicit(&g_driver,
                                                                  memory_order_acquire)
                                           : NULL;
    uint64_t since = mh_cache_generation(c);
    mh_driver_answer d;
    if (driver != NULL && driver(p, &d) == 0) {
        if (!d.known) {
            /* Not CUDA's.  A range that starts in host memory and runs into
             * a region is still mixed. */
            if (k == MH_FOUND_MIXED)
                fill(out, MEMHOOK_MEMORY_UNKNOWN, -1, p, end - p, 0, MEMHOOK_ORIGIN_DRIVER);
            else
                fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0, MEMHOOK_ORIGIN_DRIVER);
            return;
        }
        /* (only while the hooks record: without them no FREE would ever
         * undo the region, so the driver is simply asked again) */
        bool kept = fresh && (mh_cache_period(c) & 1u);
        if (kept)
            remember(c, &d, since);
        if (d.base <= p && end <= d.base + d.size) {
            /* The remembered region's id, when it was remembered. */
            mh_found_region g;
            uint64_t id = 0;
            if (kept && mh_cache_classify(c, p, end, &g) == MH_FOUND_IN &&
                g.r.start == d.base && g.r.end == d.base + d.size && g.r.type == d.type)
                id = g.r.alloc_id;
            fill(out, d.type, d.device, d.base, d.size, id, MEMHOOK_ORIGIN_DRIVER);
        } else {
            fill(out, MEMHOOK_MEMORY_UNKNOWN, -1, p, end - p, 0, MEMHOOK_ORIGIN_DRIVER);
        }
        return;
    }
    if (!fresh && use_driver) {
        /* No driver to ask: the cache, once it holds what was published. */
        mh_queue_feed_run(true);
        mh_cache_publish_deferred(c, true);
        answer(c, p, end, true, false, out);
        if (out->origin == MEMHOOK_ORIGIN_HOOKS)
            return;
        k = mh_cache_classify(c, p, end, &f);
    }
    /* Nobody vouches: what the cache has. */
    if (k == MH_FOUND_IN || k == MH_FOUND_RUN)
        fill_found(out, &f, MEMHOOK_ORIGIN_UNKNOWN);
    else if (k == MH_FOUND_MIXED)
        fill(out, MEMHOOK_MEMORY_UNKNOWN, -1, p, end - p, 0, MEMHOOK_ORIGIN_UNKNOWN);
    else
        fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0, MEMHOOK_ORIGIN_UNKNOWN);
}

/* Apply what is pending; true when the cache then holds every event
 * published before the call. */
static inline bool drained(void)
{
    return mh_queue_feed_run(false) && mh_cache_publish_deferred(mh_cache_process(), false);
}

int memhook_query(const void *ptr, size_t len, memhook_region *out)
{
    uint64_t end;
    int rc = check_args(ptr, len, out, &end);
    if (rc != 0)
        return rc;
    answer(mh_cache_process(), (uint64_t)(uintptr_t)ptr, end, drained(), true, out);
    return 0;
}

int memhook_query_cached(const void *ptr, size_t len, memhook_region *out)
{
    uint64_t end;
    int rc = check_args(ptr, len, out, &end);
    if (rc != 0)
        return rc;
    answer(mh_cache_process(), (uint64_t)(uintptr_t)ptr, end, true, false, out);
    return 0;
}

int memhook_query_batch(const void *const *ptrs, size_t count, memhook_region *out)
{
    if (count == 0)
        return 0;
    if (ptrs == NULL || out == NULL || out->struct_size < MEMHOOK_REGION_MIN_SIZE)
        return -EINVAL;
    size_t stride = out->struct_size;
    bool fresh = drained();
    mh_cache *c = mh_cache_process();
    for (size_t i = 0; i < count; i++) {
        memhook_region *o = (memhook_region *)((char *)out + i * stride);
        o->struct_size = stride;
        uint64_t p = (uint64_t)(uintptr_t)ptrs[i];
        if (p == UINT64_MAX)
            return -EOVERFLOW;
        answer(c, p, p + 1, fresh, true, o);
    }
    return 0;
}

static int types_of(const uint64_t *ptrs, size_t count, uint8_t *types, bool live)
{
    if (count == 0)
        return 0;
    if (ptrs == NULL || types == NULL)
        return -EINVAL;
    bool fresh = live ? drained() : true;
    mh_cache *c = mh_cache_process();
    mh_cache_types(c, ptrs, count, types);
    bool host_ok = fresh && host_vouched(c);
    for (size_t i = 0; i < count; i++) {
        uint8_t t = types[i];
        uint8_t held = t == MH_TYPE_ABSENT ? MEMHOOK_MEMORY_HOST : (uint8_t)(t & 0x3fu);
        if (!live || ptrs[i] == UINT64_MAX) {
            types[i] = held;  /* what the cache holds */
        } else if (fresh && t < MH_TYPE_UNVOUCHED) {
            /* a vouched region: its type stands */
        } else if (t == MH_TYPE_ABSENT && host_ok) {
            types[i] = MEMHOOK_MEMORY_HOST;
        } else {
            memhook_region r = {.struct_size = sizeof r};
            answer(c, ptrs[i], ptrs[i] + 1, fresh, true, &r);
            types[i] = (uint8_t)r.mem_type;
        }
    }
    return 0;
}

int memhook_query_types(const uint64_t *ptrs, size_t count, uint8_t *types)
{
    return types_of(ptrs, count, types, true);
}

int memhook_query_types_cached(const uint64_t *ptrs, size_t count, uint8_t *types)
{
    return types_of(ptrs, count, types, false);
}

/* ---- testing ---- */

memhook_testing_cache *memhook_testing_cache_new(void)
{
    return (memhook_testing_cache *)mh_cache_new();
}

void memhook_testing_cache_free(memhook_testing_cache *cache)
{
    mh_cache_destroy((mh_cache *)cache);
}

void memhook_testing_cache_apply(memhook_testing_cache *cache, const memhook_event *events,
                                 size_t count)
{
    mh_cache *c = (mh_cache *)cache;
    if (c == NULL || (events == NULL && count != 0))
        return;
    mh_cache_write_begin(c, true);
    mh_cache_feed_events(c, events, count);
    mh_cache_write_end(c);
}

void memhook_testing_cache_remember(memhook_testing_cache *cache, uint64_t base, uint64_t size,
                                    int mem_type, int device)
{
    mh_cache *c = (mh_cache *)cache;
    if (c == NULL || mem_type < 0 || mem_type > MEMHOOK_MEMORY_UNKNOWN)
        return;
    mh_driver_answer d = {.known = 1, .type = mem_type, .device = device < -1 ? -1 : device,
                          .base = base, .size = size};
    remember(c, &d, mh_cache_generation(c));
}

void memhook_testing_cache_hooks(memhook_testing_cache *cache, int installed, int coverage)
{
    mh_cache *c = (mh_cache *)cache;
    if (c == NULL)
        return;
    mh_cache_period_next(c, installed != 0);
    mh_cache_set_coverage(c, coverage != 0);
}

int memhook_testing_cache_lookup(memhook_testing_cache *cache, uint64_t ptr, uint64_t len,
                                 memhook_region *out)
{
    uint64_t end;
    int rc = check_args((const void *)(uintptr_t)ptr, len, out, &end);
    if (rc != 0 || cache == NULL)
        return rc ? rc : -EINVAL;
    mh_found_region f;
    int k = mh_cache_classify((mh_cache *)cache, ptr, end, &f);
    if (k == MH_FOUND_IN || k == MH_FOUND_RUN)
        fill_found(out, &f, f.vouched ? MEMHOOK_ORIGIN_HOOKS : MEMHOOK_ORIGIN_UNKNOWN);
    else
        fill(out, k == MH_FOUND_MIXED ? MEMHOOK_MEMORY_UNKNOWN : MEMHOOK_MEMORY_HOST, -1, ptr,
             end - ptr, 0, MEMHOOK_ORIGIN_UNKNOWN);
    return k;
}

size_t memhook_testing_cache_regions(memhook_testing_cache *cache, memhook_region *out,
                                     size_t capacity)
{
    mh_cache *c = (mh_cache *)cache;
    if (c == NULL)
        return 0;
    /* (a test's call: it may allocate, unlike the queries) */
    mh_region *tmp = capacity && out != NULL ? malloc(capacity * sizeof(mh_region)) : NULL;
    size_t n = mh_cache_regions(c, tmp, tmp != NULL ? capacity : 0);
    for (size_t i = 0; tmp != NULL && i < n && i < capacity; i++) {
        out[i].struct_size = sizeof(memhook_region);
        fill(&out[i], tmp[i].type, tmp[i].device, tmp[i].start, tmp[i].end - tmp[i].start,
             tmp[i].alloc_id, tmp[i].origin);
    }
    free(tmp);
    return n;
}

void memhook_testing_cache_types(memhook_testing_cache *cache, const uint64_t *ptrs, size_t count,
                                 uint8_t *types)
{
    if (cache == NULL || ptrs == NULL || types == NULL)
        return;
    mh_cache_types((mh_cache *)cache, ptrs, count, types);
    for (size_t i = 0; i < count; i++)
        types[i] = types[i] == MH_TYPE_ABSENT ? MEMHOOK_MEMORY_HOST : (uint8_t)(types[i] & 0x3fu);
}
