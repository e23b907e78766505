/*
 * cache_feed.c - events into the cache, in event order.
 *
 * The queue hands every event to the feed at the moment it is put in the
 * order (a drain's look, the trace's tee, a query's run: each event once),
 * under its consumer lock, and calls the commit before that lock is let go.
 * The feed stages ops without the cache's writer seat (the lock orders
 * feeds); the commit moves them to the cache's queue under the seat, with
 * the lanes' counts of events put in the order (marks), which the cache
 * stores once those events are published: what a query that cannot take
 * the consumer lock reads to tell whether the map holds a lane's events.
 * So the cache is fed whoever drains - Python, the trace's reader, a C
 * transport's query, or a query of a process where nobody else drains -
 * and every drain call returns with what it handed out published.
 *
 * What one event does (memhook/_events/apply.py's apply_row, the reference):
 *   a slot flagged SKIPPED: nothing;
 *   DRIVER_UNLOADED: every region goes;
 *   CONTEXT_RESET (a successful teardown): the regions of its device, and
 *     of no known device (all for -1), become UNKNOWN - the driver, asked
 *     by a query, knows which of them another context still owns;
 *   any other failed call: nothing;
 *   a successful ALLOC of size > 0: its range becomes one region (type,
 *     device) over whatever was there;
 *   a successful FREE: a hole of its size; of unknown size (flag
 *     SIZE_UNKNOWN, size 0), the run holding its address becomes UNKNOWN
 *     (a run of regions learned in the FREE's install period);
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

/* Whether painting b over a leaves what b alone leaves: both paint their
 * range whole (ASSIGN, REMOVE: what was there does not matter) and b's
 * range holds a's. */
static inline bool paints_over(const mh_op *b, const mh_op *a)
{
    return (b->kind == MH_OP_ASSIGN || b->kind == MH_OP_REMOVE) &&
           (a->kind == MH_OP_ASSIGN || a->kind == MH_OP_REMOVE) && b->start <= a->start &&
           b->end >= a->end;
}

void mh_cache_feed_events(mh_cache *c, const memhook_event *events, const uint64_t *ids,
                          size_t count, bool staged)
{
    /* One op held back: the next one, if it paints over the whole of it,
     * replaces it here (the queue's own fold, oplist_add, does it for an
     * exact range, with a call and a table: an allocator handing one
     * address out and back, at one size or several, costs a compare an
     * event). */
    mh_op held = {0}, op;
    bool holding = false;
    for (size_t i = 0; i < count; i++) {
        if (!mh_cache_event_op(&events[i], &op))
            continue;
        if (op.kind == MH_OP_ASSIGN && ids != NULL)
            op.alloc_id = ids[i];  /* (0: numbered by the cache) */
        if (holding && !paints_over(&op, &held))
            staged ? mh_cache_stage_op(c, &held) : mh_cache_op(c, &held);
        held = op;
        holding = true;
    }
    if (holding)
        staged ? mh_cache_stage_op(c, &held) : mh_cache_op(c, &held);
}

/* The queue's feed: under its consumer lock, which orders the calls; the
 * cache's seat is taken only by the commit (mh_cache_stage_commit). */
static void feed(const memhook_event *events, const uint64_t *ids, size_t count)
{
    mh_cache_feed_events(mh_cache_process(), events, ids, count, true);
}

static void feed_mark(_Atomic uint64_t *where, uint64_t value)
{
    mh_cache_stage_mark(mh_cache_process(), where, value);
}

void mh_cache_feed_commit(void)
{
    mh_cache_stage_commit(mh_cache_process(), true);
}

/* The queue's question for a FREE it cannot size from the hooks' events. */
static bool extent(uint64_t addr, uint64_t *size, int16_t *mem_type, int16_t *device)
{
    mh_region r;
    if (!mh_cache_driver_alloc_at(mh_cache_process(), addr, &r))
        return false;
    *size = r.end - r.start;
    *mem_type = r.type;
    *device = r.device;
    return true;
}

void mh_cache_feed_at_load(void)
{
    mh_queue_set_extent(extent);
    mh_queue_set_feed(feed, feed_mark, mh_cache_feed_commit);
}
