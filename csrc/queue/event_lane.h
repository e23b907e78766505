/*
 * event_lane.h - the producer side of the event queue: one lane per thread.
 *
 * Every thread that records an event owns a lane: a chain of segments it
 * alone writes, in its own order, and publishes by bumping the lane's
 * `published` count with a plain release store.  A push takes no lock and
 * no locked instruction, and touches no cache line another producer
 * writes: with one shared queue, the claim (fetch_add), the reclamation
 * epochs and the slot lines other threads had just written made producers
 * wait on cache lines moving between cores (docs/performance.md).
 *
 * The single order events leave the queue in is made by the consumer
 * (event_drain.c), which merges the lanes.  What makes that order right -
 * every FREE after its ALLOC and before any later ALLOC of its range - is
 * argued in docs/design/causal-merge.md; producers help it with links (an
 * event's identity in another's `seq`: mh_lane_slot_id, mh_addr_chain).
 *
 * A lane is never unlinked: when its thread exits it is marked ORPHAN,
 * drained, then FREE, and the next new thread takes it over (a thread pool
 * does not grow the list).
 */
#ifndef MEMHOOK_EVENT_LANE_H
#define MEMHOOK_EVENT_LANE_H

#include <stdatomic.h>
#include <stddef.h>

#include "mh_hook_thread.h"
#include "queue.h"
#include "range_index.h"

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

/* A lane's address summary (lane_span.c): events in blocks of
 * MH_SPAN_BLOCK, `level[j]` the span of the blocks of the current chunk of
 * 2^(j+1) blocks that precede its current chunk of 2^j (a binary counter:
 * each block is folded in about twice), `block` the block being written,
 * `seq` odd while a carry rewrites them. */
#define MH_SPAN_BLOCK 16u
#define MH_SPAN_LEVELS 20
typedef struct mh_lane_span {
    _Atomic uint32_t seq;
    _Atomic uint64_t block;
    struct {
        _Atomic uint64_t lo, hi;
    } level[MH_SPAN_LEVELS];
} mh_lane_span;

typedef struct mh_lane {
    /* Events written and visible: written by the owner, read by the drain
     * - a line of its own, so the drain reading it does not take the
     * owner's private fields away from its core. */
    _Alignas(64) _Atomic uint64_t published;
    /* The addresses the events of the block being written touch (lane_span.c:
     * lo >= hi, none), widened before each publication: on this line, which
     * every publication takes anyway. */
    _Atomic uint64_t span_lo, span_hi;
    /* The owner's private line. */
    _Alignas(64) mh_lane_seg *write_seg;      /* where the next event goes */
    memhook_event *write_end;                 /* one past write_seg's last slot */
    memhook_event *write_at;                  /* the next slot */
    uint64_t written;                         /* `published`, the owner's copy */
    int32_t tid;                              /* the owner's kernel tid */
    uint32_t id;                              /* 1.. in order of creation; 0: past MH_LANE_IDS */
    /* The consumer's lines (under the consumer lock; event_drain.c). */
    _Alignas(64) uint64_t consumed;           /* events taken out (drained or trimmed) */
    /* `id`, the consumers' copy (set with it, before the lane is listed;
     * never changes).  The drain reads a lane's id for every event it
     * hands out and at every comparison of two lanes' heads: read from the
     * owner's line, each read took that line from the producer's core,
     * which wrote it again at its next event (write_at, written). */
    uint32_t cid;
    uint64_t teed;                            /* events the trace's tee has read */
    uint64_t seen;                            /* `published` as the last look read it */
    uint64_t indexed;                         /* FREEs up to here are in `frees` */
    uint64_t marks_at;                        /* markers up to here are in the drain's list */
    uint64_t linked;                          /* FREEs up to here are in the drain's
                                                 closer set (event_drain.c) */
    uint64_t marked;                          /* `cached` as last handed to the feed's mark */
    uint64_t box_lo, box_hi;                  /* the addresses its pending events
                                                 span (event_drain.c), or lo >= hi */
    uint64_t run, run_h, run_g;               /* a bounded run and its two cuts */
    long look_cursor;                         /* this lane's cursor in a look, or -1 */
    mh_range_tree frees;                      /* its indexed FREEs not handed out */
    mh_lane_seg *read_seg;                    /* the segment holding `consumed` */
    /* The segments from read_seg on, as far as a drain has looked (seg[k]
     * holds indices read_seg->first + k * MH_LANE_SEG_SLOTS on): a lookup
     * far back in a long lane - a FREE's link, the closer and opener sets'
     * places - is one index, not a walk along the segments of the backlog
     * (docs/performance.md).  Grown as lookups reach further, shifted as
     * segments retire; NULL (n 0) until the first lookup past read_seg. */
    struct {
        mh_lane_seg **seg;
        size_t n, cap;
    } dir;
    /* The producer's summary of the addresses its earlier blocks touch,
     * rewritten once per block (lane_span.c), read by queries. */
    _Alignas(64) mh_lane_span span;
    /* Shared, rarely written. */
    _Alignas(64) _Atomic int state;           /* MH_LANE_* */
    /* Events of this lane the cache's published map holds (a prefix of
     * the lane: stored by the cache after the publish that applied them,
     * mh_queue_set_feed's mark), read by queries without the consumer
     * lock (mh_queue_unapplied_get). */
    _Atomic uint64_t cached;
    _Atomic(mh_lane_seg *) spare;             /* a drained segment, for the producer */
    struct mh_lane *next;                     /* the list of lanes; set before publication */
} mh_lane;
_Static_assert(offsetof(mh_lane, cid) / 64 != offsetof(mh_lane, write_at) / 64 &&
                   offsetof(mh_lane, cid) / 64 != offsetof(mh_lane, published) / 64,
               "the drain's copy of the lane id is off the lines the producer writes");

/* Every lane there is, newest first (lock-free push; never unlinked). */
MH_HIDDEN extern _Atomic(mh_lane *) mh_lanes;
/* The calling thread's lane, NULL until its first event (and again after
 * its exit handler ran): a field of the hook path's thread-locals
 * (csrc/core/mh_hook_thread.h), under its own name. */
#define mh_my_lane (mh_hook_tl.lane)
/* (mh_events_pending, the pending flag, is declared in queue.h: the
 * queries' caught-up test reads it inline) */

/* Lane ids fit 16 bits of an event's identity (mh_lane_slot_id); a lane
 * made past that many has id 0, and its events carry no identity (the
 * drain then orders them by its rules alone: event_drain.c). */
#define MH_LANE_IDS 0xffffu
#define MH_LANE_INDEX_BITS 48
#define MH_LANE_INDEX_MASK ((1ull << MH_LANE_INDEX_BITS) - 1)

/* Out of line: the calling thread's first event (a lane to own), or its
 * current segment is full (the next one). */
MH_HIDDEN memhook_event *mh_lane_slow_slot(void);

/* Called by mh_lane_slow_slot, in the producing thread, after it has its
 * slot: at a thread's first event and at each new segment (at most once per
 * MH_LANE_SEG_SLOTS events of a thread), so a module above can start work
 * once events flow, off the hooks' fast path.  It must not record an
 * event, take a lock a hook may hold or drain.  NULL (the default): none.
 * Set by csrc/cuda/run_at_load.c. */
typedef void (*mh_lane_segment_fn)(void);
MH_HIDDEN void mh_lane_set_on_segment(mh_lane_segment_fn fn);

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

/* The identity of the slot mh_lane_slot just returned (the calling
 * thread's next event; `lane` is mh_my_lane, read once by the caller after
 * mh_lane_slot, which may have set it): lane id << 48 | its index in the
 * lane; 0 for a lane without an id.  Unique for the life of the process (a
 * reused lane goes on counting; a fork child keeps the parent's). */
static inline uint64_t mh_lane_slot_id(const mh_lane *lane)
{
    if (__builtin_expect(lane->id == 0, 0))
        return 0;
    return (uint64_t)lane->id << MH_LANE_INDEX_BITS | lane->written;
}

/* A lane's summary starts empty (a lane being made, before it is listed). */
MH_HIDDEN void mh_lane_span_init(mh_lane *lane);
/* Out of line: the block of event `index` is complete: fold it in. */
MH_HIDDEN void mh_lane_span_carry(mh_lane *lane, uint64_t index);

/* Widen the summary by the addresses an event (about to be published as
 * event `index` of the lane) may change the cache's answer for: an ALLOC's
 * or a FREE's range [addr, addr + size) (a FREE of unknown size: its
 * address, the base of what it frees), everything (`all`: a marker or a
 * context reset), nothing for a failed ALLOC (address 0).  The caller
 * passes the values it wrote into the slot rather than have them read
 * back from it: inlined into a writer whose kind and flags are constants,
 * the tests on them fold away. */
static inline void mh_lane_span_note(mh_lane *lane, uint64_t addr, uint64_t size, bool all,
                                     uint64_t index)
{
    uint64_t lo = addr, hi = lo + (size ? size : 1);
    if (__builtin_expect(all || hi < lo, 0)) {
        lo = 0;
        hi = UINT64_MAX;
    } else if (__builtin_expect(lo == 0, 0)) {
        lo = UINT64_MAX;
        hi = 0;
    }
    /* (release: lane_span.c's readers; a plain move on x86-64) */
    if (lo < atomic_load_explicit(&lane->span_lo, memory_order_relaxed))
        atomic_store_explicit(&lane->span_lo, lo, memory_order_release);
    if (hi > atomic_load_explicit(&lane->span_hi, memory_order_relaxed))
        atomic_store_explicit(&lane->span_hi, hi, memory_order_release);
    if (__builtin_expect((index + 1) % MH_SPAN_BLOCK == 0, 0))
        mh_lane_span_carry(lane, index);
}

/* Make the slot visible to the drain (`lane` is mh_my_lane; addr, size and
 * all as for mh_lane_span_note).  Then mh_lane_announce.  The owner counts
 * in its own line and only stores `published` (never reads it: the drain's
 * reads leave that line shared). */
static inline void mh_lane_publish(mh_lane *lane, uint64_t addr, uint64_t size, bool all)
{
    mh_lane_span_note(lane, addr, size, all, lane->written);
    lane->write_at++;
    atomic_store_explicit(&lane->published, ++lane->written, memory_order_release);
}

/* A word of the thread's own for mh_lane_publish_fenced's locked
 * instruction (ThreadSanitizer knows no atomic_thread_fence); on the hook
 * path's thread-local line, which the publishing call has just touched. */
#define mh_fence_word (mh_hook_tl.fence_word)

/* mh_lane_publish, then a full barrier, so the caller may pass
 * mh_lane_announce true: for an event with no other locked instruction
 * after it.  The barrier is a locked add on a word of the thread's own,
 * not an exchange of `published`: the drain reads that line, and a locked
 * write there waits for it to come back from the drain's core. */
static inline void mh_lane_publish_fenced(mh_lane *lane, uint64_t addr, uint64_t size,
                                          bool all)
{
    mh_lane_publish(lane, addr, size, all);
    atomic_fetch_add_explicit(&mh_fence_word, 0, memory_order_seq_cst);
}

/* ---- the address chain: who recorded at an address last ----
 *
 * One word per hash of an address: the identity of the last event
 * published at an address hashing there.  An event reads it before it is
 * written (its link, unless it has a better one: a FREE's ALLOC from the
 * live table) and writes its own identity after its publication, so a link
 * read from here always names an event already published, which happened
 * before the reader (it read what that event's thread wrote after
 * publishing): a link is never wrong, at worst useless (another address
 * hashing the same wrote last; the drain checks the address when it
 * matters).  The chain is how an ALLOC comes after the FREE that made its
 * address free again in another thread, and a recorded FREE
 * (memhook_events_record) after its ALLOC.  Plain loads and stores: a lost
 * race only loses a link.  Process-wide, as the addresses are. */
#define MH_ADDR_CHAIN_BITS 16
MH_HIDDEN extern _Atomic uint64_t mh_addr_chain[1u << MH_ADDR_CHAIN_BITS];

static inline _Atomic uint64_t *mh_addr_chain_at(uint64_t addr)
{
    return &mh_addr_chain[(addr * 0xff51afd7ed558ccdull) >> (64 - MH_ADDR_CHAIN_BITS)];
}

static inline uint64_t mh_addr_chain_last(uint64_t addr)
{
    return atomic_load_explicit(mh_addr_chain_at(addr), memory_order_acquire);
}

static inline void mh_addr_chain_note(uint64_t addr, uint64_t id)
{
    atomic_store_explicit(mh_addr_chain_at(addr), id, memory_order_release);
}

/* Tell the drain there is news: set mh_events_pending.  Storing it on every
 * event would move its cache line between the cores of every producing
 * thread (docs/performance.md), so a producer that finds it set already
 * leaves it - but only when a locked instruction ran between its
 * publication and this read (`fenced`): otherwise its read could be
 * served before its publication left the store buffer, a drain could
 * clear the flag and miss the event, and nothing would set the flag
 * again.  With the fence, a flag read as set was cleared (if at all)
 * after the publication was visible to every core, so the clearing drain
 * sees the event.  (x86-64:
 * a LOCK-prefixed instruction is a full barrier.) */
static inline void mh_lane_announce(bool fenced)
{
    if (!fenced ||
        atomic_load_explicit(&mh_events_pending.flag, memory_order_relaxed) != MH_PENDING_NEWS)
        atomic_store_explicit(&mh_events_pending.flag, MH_PENDING_NEWS, memory_order_release);
}

#endif
