/*
 * lane_span.c - what addresses a lane's events not yet in the cache may
 * touch, readable without the consumer lock: the producer keeps a summary
 * of its own events' address ranges, a query reads it to tell whether an
 * event the cache's published map still lacks can change its answer.
 * docs/design/causal-merge.md ("Pending spans") argues it.
 *
 * The summary covers a lane's events in blocks of MH_SPAN_BLOCK: the span
 * of the block being written (span_lo/_hi, on the `published` line), and
 * per level j the span of the blocks that precede the current chunk of
 * 2^j blocks inside the current chunk of 2^(j+1).  A reader that needs the
 * events from index `have` on takes the smallest level k whose chunk holds
 * both have's block and the current one: the current block and levels
 * 0..k-1 together span every event of that chunk so far, have's included.
 * A span is one interval (lo, hi): coarse, never short.
 */
#include <errno.h>
#include <stdatomic.h>

#include "event_lane.h"
#include "memhook_internal/api.h"

/* (Release stores and acquire loads throughout - plain moves on x86-64 -
 * rather than fences, which ThreadSanitizer does not model: a reader that
 * loads a word a carry, or a later event, stored then sees `seq` moved.) */
static inline void set_empty(_Atomic uint64_t *lo, _Atomic uint64_t *hi)
{
    atomic_store_explicit(lo, UINT64_MAX, memory_order_release);
    atomic_store_explicit(hi, 0, memory_order_release);
}

void mh_lane_span_init(mh_lane *lane)
{
    set_empty(&lane->span_lo, &lane->span_hi);
    for (int j = 0; j < MH_SPAN_LEVELS; j++)
        set_empty(&lane->span.level[j].lo, &lane->span.level[j].hi);
}

/* The producer, after noting the last event (`index`) of block b: fold the
 * events since the start of the chunk that now ends into level t (t: the
 * trailing zeros of b + 1, the levels whose chunk changes), empty the
 * levels below it and the current block.  A seqlock's writer: a reader
 * that overlaps it sees `seq` move and tries again. */
void mh_lane_span_carry(mh_lane *lane, uint64_t index)
{
    mh_lane_span *s = &lane->span;
    uint64_t next = index / MH_SPAN_BLOCK + 1;
    uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
    uint64_t lo = atomic_load_explicit(&lane->span_lo, memory_order_relaxed);
    uint64_t hi = atomic_load_explicit(&lane->span_hi, memory_order_relaxed);
    int t = __builtin_ctzll(next);
    for (int j = 0; j < MH_SPAN_LEVELS && j <= t; j++) {
        uint64_t l = atomic_load_explicit(&s->level[j].lo, memory_order_relaxed);
        uint64_t h = atomic_load_explicit(&s->level[j].hi, memory_order_relaxed);
        lo = l < lo ? l : lo;
        hi = h > hi ? h : hi;
        if (j < t) {
            set_empty(&s->level[j].lo, &s->level[j].hi);
        } else {
            atomic_store_explicit(&s->level[j].lo, lo, memory_order_release);
            atomic_store_explicit(&s->level[j].hi, hi, memory_order_release);
        }
    }
    set_empty(&lane->span_lo, &lane->span_hi);
    atomic_store_explicit(&s->block, next, memory_order_release);
    atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}

/* Whether lane l's events from index `have` to its newest may touch
 * [lo, hi): true also when the summary cannot tell (a backlog longer than
 * its top level, a carry under way at every try). */
static bool lane_touches(mh_lane *l, uint64_t have, uint64_t lo, uint64_t hi)
{
    const mh_lane_span *s = &l->span;
    uint64_t from = have / MH_SPAN_BLOCK;
    for (int attempt = 0; attempt < 4; attempt++) {
        uint32_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (seq & 1u)
            continue;
        uint64_t block = atomic_load_explicit(&s->block, memory_order_acquire);
        if (from > block)
            return true;  /* (cannot be: have < published) */
        int k = from == block ? 0 : 64 - __builtin_clzll(from ^ block);
        if (k > MH_SPAN_LEVELS)
            return true;
        uint64_t slo = atomic_load_explicit(&l->span_lo, memory_order_acquire);
        uint64_t shi = atomic_load_explicit(&l->span_hi, memory_order_acquire);
        for (int j = 0; j < k; j++) {
            uint64_t a = atomic_load_explicit(&s->level[j].lo, memory_order_acquire);
            uint64_t b = atomic_load_explicit(&s->level[j].hi, memory_order_acquire);
            slo = a < slo ? a : slo;
            shi = b > shi ? b : shi;
        }
        if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq)
            continue;
        return slo < hi && lo < shi;
    }
    return true;
}

bool mh_queue_unapplied_touch(uint64_t lo, uint64_t hi)
{
    mh_lane *mine = mh_my_lane;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        if (l == mine)
            continue;
        /* (`published` first, as mh_queue_unapplied_get reads them) */
        uint64_t pub = atomic_load_explicit(&l->published, memory_order_acquire);
        uint64_t have = atomic_load_explicit(&l->cached, memory_order_acquire);
        if (pub > have && lane_touches(l, have, lo, hi))
            return true;
    }
    return false;
}

int memhook_testing_span_touches(uint64_t back, uint64_t lo, uint64_t hi)
{
    mh_lane *l = mh_my_lane;
    if (l == NULL || back == 0 || back > l->written || lo >= hi)
        return -EINVAL;
    return lane_touches(l, l->written - back, lo, hi);
}
