/*
 * event_lane.h - the producer side of the event queue: one lane per thread.
 *
 * Every thread that records an event owns a lane: a chain of segments it
 * alone writes, in its own order, and publishes by bumping the lane's
 * `published` count with a plain release store.  A push takes no lock and
 * no locked instruction, and touches no cache line another producer
 * writes: with one shared queue, the claim (fetch_add), the reclamation
 * epochs and the slot lines other threads had just written cost a hooked
 * alloc+free pair ~100-200 ns, most of it waiting on lines moving between
 * cores (bench/hook_bench.py; README, "What the hooks cost").
 *
 * The single order events leave the queue in is made by the consumer
 * (event_drain.c), which merges the lanes by timestamp.  What makes that
 * order right - every FREE before any later ALLOC of its address - is
 * explained there.
 *
 * A lane is never unlinked: when its thread exits it is marked ORPHAN,
 * drained, then FREE, and the next new thread takes it over (a thread pool
 * does not grow the list).
 */
#ifndef MEMHOOK_EVENT_LANE_H
#define MEMHOOK_EVENT_LANE_H

#include <stdatomic.h>

#include "queue.h"

#if !defined(__x86_64__)
#error "the event queue counts on x86-64 ordering (mh_lane_announce)"
#endif

/* 255 events and the header in 16 KiB. */
#define MH_LANE_SEG_SLOTS 255u

typedef struct mh_lane_seg {
    _Alignas(64) _Atomic(struct mh_lane_seg *) next;  /* set by the producer, once */
    uint64_t first;                                   /* lane index of slots[0] */
    memhook_event slots[MH_LANE_SEG_SLOTS];
} mh_lane_seg;
_Static_assert(sizeof(memhook_event) == 64, "an event is one cache line");
_Static_assert(sizeof(mh_lane_seg) == 16384, "a lane segment is 16 KiB");

enum { MH_LANE_FREE, MH_LANE_OWNED, MH_LANE_ORPHAN };

typedef struct mh_lane {
    /* Events written and visible: written by the owner, read by the drain
     * - a line of its own, so the drain reading it does not take the
     * owner's private fields away from its core. */
    _Alignas(64) _Atomic uint64_t published;
    /* The owner's private line. */
    _Alignas(64) mh_lane_seg *write_seg;      /* where the next event goes */
    memhook_event *write_end;                 /* one past write_seg's last slot */
    memhook_event *write_at;                  /* the next slot */
    int32_t tid;                              /* the owner's kernel tid */
    /* The consumer's line (under the consumer lock). */
    _Alignas(64) uint64_t consumed;           /* events taken out (drained or trimmed) */
    uint64_t teed;                            /* events the trace's tee has read */
    uint64_t scanned;                         /* `published` as a drain's first pass read it */
    mh_lane_seg *read_seg;                    /* the segment holding `consumed` */
    /* The furthest segment a drain has looked an event up in, and its
     * `first` (copied: once retired the segment may be another lane's).
     * A lookup starts here rather than at read_seg, so finding a lane's
     * newest event costs a step, not one per segment of backlog (every
     * drain call walked the whole backlog: draining 4M queued events cost
     * 47.8 ns an event, 37.7 with this; 1M: 41.2 -> 28.7, dev box). */
    mh_lane_seg *seek_seg;
    uint64_t seek_first;
    /* Shared, rarely written. */
    _Alignas(64) _Atomic int state;           /* MH_LANE_* */
    _Atomic(mh_lane_seg *) spare;             /* a drained segment, for the producer */
    struct mh_lane *next;                     /* the list of lanes; set before publication */
} mh_lane;

/* Every lane there is, newest first (lock-free push; never unlinked). */
MH_HIDDEN extern _Atomic(mh_lane *) mh_lanes;
/* The calling thread's lane, NULL until its first event (and again after
 * its exit handler ran). */
MH_HIDDEN extern __thread mh_lane *mh_my_lane __attribute__((tls_model("initial-exec")));
/* Nonzero once an event was published that no drain has taken out yet.
 * Set after a push (mh_lane_announce); exchanged for 0 by the drain before
 * it looks at the lanes, so an event published after that exchange leaves
 * it set. */
MH_HIDDEN extern _Atomic uint32_t mh_events_pending;

/* Out of line: the calling thread's first event (a lane to own), or its
 * current segment is full (the next one). */
MH_HIDDEN memhook_event *mh_lane_slow_slot(void);

/* Segments: take a spare or map a fresh one; give one back. */
MH_HIDDEN mh_lane_seg *mh_lane_seg_get(mh_lane *lane);
MH_HIDDEN void mh_lane_seg_put(mh_lane *lane, mh_lane_seg *seg);
MH_HIDDEN void mh_lane_seg_stats(uint64_t *live, uint64_t *peak);
/* In a fork child: the vanished threads' lanes become orphans, this
 * thread's lane gets its new tid (mh_queue_fork_child calls it). */
MH_HIDDEN void mh_lanes_fork_child(void);

/* The slot the calling thread's next event goes into.  Fill it, then
 * mh_lane_publish(). */
static inline memhook_event *mh_lane_slot(void)
{
    mh_lane *lane = mh_my_lane;
    if (__builtin_expect(lane == NULL || lane->write_at == lane->write_end, 0))
        return mh_lane_slow_slot();
    memhook_event *slot = lane->write_at;
    /* Ask for a line 8 events ahead in exclusive state now: the drain
     * read it (its previous lap), and a store that has to take it back
     * from the consumer's core would hold the next locked instruction (the
     * live table's CAS) until it completes.  prefetchw is a NOP where it
     * is not implemented. */
    if (slot + 8 < lane->write_end)
        __asm__ volatile("prefetchw %0" ::"m"(slot[8]));
    return slot;
}

/* Make the slot visible to the drain.  Then mh_lane_announce. */
static inline void mh_lane_publish(void)
{
    mh_lane *lane = mh_my_lane;
    lane->write_at++;
    atomic_store_explicit(&lane->published, atomic_load_explicit(&lane->published,
                                                                 memory_order_relaxed) + 1,
                          memory_order_release);
}

/* Tell the drain there is news: set mh_events_pending.  Storing it on every
 * event would move its cache line between the cores of every producing
 * thread (a hooked pair cost 165-195 ns with 2 threads instead of 83-96 on
 * the H200 host), so a producer that finds it set already leaves it - but
 * only when a locked instruction ran between its publication and this
 * read (`fenced`): otherwise its read could be served before its
 * publication left the store buffer, a drain could clear the flag and miss
 * the event, and nothing would set the flag again.  With the fence, a
 * flag read as set was cleared (if at all) after the publication was
 * visible to every core, so the clearing drain sees the event.  (x86-64:
 * a LOCK-prefixed instruction is a full barrier.) */
static inline void mh_lane_announce(bool fenced)
{
    if (!fenced || !atomic_load_explicit(&mh_events_pending, memory_order_relaxed))
        atomic_store_explicit(&mh_events_pending, 1, memory_order_release);
}

#endif
