/*
 * cache_feed.c - events into the cache, in event order.
 *
 * The queue hands every event to the feed at the moment it is put in the
 * order (a drain's look, the trace's tee, a query's run: each event once),
 * under its consumer lock, and calls the commit before that lock is let go.
 * So the cache is fed whoever drains - Python, the trace's reader, a C
 * transport's query, or a query of a process where nobody else drains -
 * and every drain call returns with what it handed out published.
 *
 * What one event does (memhook/_apply.py's apply_row, the reference):
 *   a slot flagged SKIPPED: nothing;
 *   DRIVER_UNLOADED: every region goes;
 *   CONTEXT_RESET (a successful teardown): the regions of its device, and
 *     of no known device (all for -1), become UNKNOWN - the driver, asked
 *     by a query, knows which of them another context still owns;
 *   any other failed call: nothing;
 *   a successful ALLOC of size > 0: its range becomes one region (type,
 *     device) over whatever was there;
 *   a successful FREE: a hole of its size; of unknown size (flag
 *     SIZE_UNKNOWN, size 0), the run holding its address becomes UNKNOWN;
 *   HOOKS_GAP: nothing here - what the cache learned before a stop of the
 *     hooks is unvouched by its install period (each region carries the
 *     period it was learned in; csrc/cuda/install.c applies what a period
 *     recorded before it ends it).
 * A range past 2^64 (a native recorder's mistake) is skipped, as the
 * reference skips it; one ending exactly at 2^64 loses its last byte.
 */
#include <stdatomic.h>

#include "cache.h"
#include "queue.h"

void mh_cache_feed_events(mh_cache *c, const memhook_event *events, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const memhook_event *e = &events[i];
        uint32_t flags = e->flags;
        mh_op op = {.device = -1, .origin = MEMHOOK_ORIGIN_HOOKS};
        if (flags & MEMHOOK_EVENT_SKIPPED)
            continue;
        if (flags & MEMHOOK_EVENT_DRIVER_UNLOADED) {
            op.kind = MH_OP_CLEAR;
        } else if (flags & MEMHOOK_EVENT_CONTEXT_RESET) {
            if (e->result != 0)
                continue;
            op.kind = MH_OP_FORGET_DEVICE;
            op.device = e->device < 0 ? -1 : e->device;
        } else if (e->result != 0) {
            continue;
        } else if (e->kind == MEMHOOK_EVENT_ALLOC || e->kind == MEMHOOK_EVENT_FREE) {
            uint64_t end = e->address + e->size;
            if (e->size == 0) {
                if (e->kind != MEMHOOK_EVENT_FREE || !(flags & MEMHOOK_EVENT_SIZE_UNKNOWN))
                    continue;
                op.kind = MH_OP_DEMOTE_AT;
                op.start = e->address;
            } else {
                if (end < e->address && end != 0)
                    continue;  /* past 2^64 */
                op.start = e->address;
                op.end = end == 0 ? UINT64_MAX : end;
                if (e->kind == MEMHOOK_EVENT_FREE) {
                    op.kind = MH_OP_REMOVE;
                } else {
                    op.kind = MH_OP_ASSIGN;
                    op.type = e->mem_type >= 0 && e->mem_type <= MEMHOOK_MEMORY_UNKNOWN
                                  ? (uint8_t)e->mem_type
                                  : MEMHOOK_MEMORY_UNKNOWN;
                    op.device = e->device < -1 ? -1 : e->device;
                }
            }
        } else {
            continue;
        }
        mh_cache_op(c, &op);
    }
}

/* Under the queue's consumer lock: the writer's seat is held from the
 * first event of a drain call to its commit. */
static bool g_feeding;

static void feed(const memhook_event *events, size_t count)
{
    mh_cache *c = mh_cache_process();
    if (!g_feeding) {
        mh_cache_write_begin(c, true);
        g_feeding = true;
    }
    mh_cache_feed_events(c, events, count);
}

void mh_cache_feed_commit(void)
{
    if (g_feeding) {
        g_feeding = false;
        mh_cache_write_end_deferrable(mh_cache_process());
    }
}

void mh_cache_feed_at_load(void)
{
    mh_queue_set_feed(feed, mh_cache_feed_commit);
}
