/*
 * queue.h - the event queue's interface for everything outside csrc/queue/:
 * producers (the hook layer, csrc/cuda/emit.c), the drain's other users
 * (the trace streamer, csrc/trace/) and the install code.
 *
 *   event_lane.[ch]  the producer side: one lane per thread (the inline
 *                    push path lives in event_lane.h)
 *   event_drain.c    the consumer side: the lanes merged into one order,
 *                    the trace's tee and trim, statistics
 *   clock.c          event timestamps (coarse, or precise: raw TSC on the
 *                    hook path, converted to CLOCK_MONOTONIC ns by the
 *                    drain), and the marker epoch
 *   range_index.[ch] the drain's index of pending FREEs by address range
 *   lane_span.c      what addresses events not yet in the cache may touch
 *
 * The queue carries memhook_event records (csrc/include/memhook/memhook.h)
 * and knows nothing of CUDA or of the hooks that fill it: a layer above it
 * that needs fork repair or counters of its own keeps them itself.
 */
#ifndef MEMHOOK_QUEUE_H
#define MEMHOOK_QUEUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/memhook.h"
#include "mh_time.h"
#include "mh_visibility.h"

/* ---- what producers leave in an event for the drain ----
 *
 * memhook_event.flags bits 15-31 are the queue's own: producers set them,
 * the drain reads them and clears them before an event leaves the core (no
 * consumer, subscriber or trace ever sees them).  The public MEMHOOK_EVENT_*
 * flags stay below bit 15.  Until the drain hands an event out, its `seq`
 * holds a link: the identity (mh_lane_slot_id, event_lane.h) of an event it
 * must come after, or 0.  docs/design/causal-merge.md says how the drain
 * uses them. */
#define MH_EVENT_PRIVATE     0xffff8000u
/* timestamp_ns holds a raw TSC reading; the drain converts it
 * (mh_clock_convert) and clears the flag. */
#define MH_EVENT_RAW_TSC     0x80000000u
/* A FREE whose link names the ALLOC it frees (from the live table). */
#define MH_EVENT_LINK_ALLOC  0x40000000u
/* A marker (kind 0): everything recorded before it goes first, everything
 * after it after it (mh_marker_flags). */
#define MH_EVENT_MARKER      0x20000000u
/* A FREE that names a range of its own (cuMemUnmap's size), which may cover
 * more than the one allocation its address starts. */
#define MH_EVENT_RANGE       0x10000000u
/* timestamp_ns is coarse: CLOCK_MONOTONIC_COARSE (mh_clock_stamp). */
#define MH_EVENT_COARSE      0x08000000u
/* Written by the drain into a pending ALLOC's slot: its link is the last
 * event recorded at its own address (checked while the link was pending). */
#define MH_EVENT_CHAIN       0x04000000u
/* An ALLOC whose call began before the hooks' current generation (it ran
 * across a stop of the hooks or a teardown: cuda_hooks.h, mh_call_gen):
 * its allocation may be gone unseen, so the drain pairs no FREE with it
 * (free_fill.h). */
#define MH_EVENT_UNPAIRED    0x00008000u
/* The marker epoch the producer read (mh_epoch_flags), 10 bits. */
#define MH_EVENT_EPOCH_SHIFT 16
#define MH_EVENT_EPOCH_BITS  10
#define MH_EVENT_EPOCH_MASK  0x03ff0000u

/* A FREE recorded with its address only (emit.c, outside exact sizes) is
 * published before its call, with `result` MH_RESULT_PENDING and
 * MEMHOOK_EVENT_SIZE_UNKNOWN, size 0 and device MH_DEVICE_FILL; the drain
 * fills size, type and device (event_drain.c, free_fill.h).  Its producer exchanges the call's result in when the call
 * returns; a drain that hands the event out first ORs MH_RESULT_TAKEN in
 * (and hands it out as a free that succeeded), so a producer that then
 * finds the free refused knows the consumers took it as done, and puts a
 * HOOKS_GAP marker after it.  Real results (CUresult, cudaError_t) are
 * small and non-negative: these bits are never one. */
#define MH_DEVICE_FILL       (-3)  /* its `device` until the drain fills it */
#define MH_RESULT_PENDING    0x40000000
#define MH_RESULT_TAKEN      0x20000000
/* ... and a refused call's result is exchanged in with this bit: such a
 * FREE freed nothing, so it holds no ALLOC back (event_drain.c, rule 3). */
#define MH_RESULT_REFUSED    0x10000000
/* What a consumer reports of a slot's result word. */
static inline int32_t mh_result_settled(int32_t raw)
{
    return (raw & MH_RESULT_PENDING) ? 0 : (raw & ~(MH_RESULT_TAKEN | MH_RESULT_REFUSED));
}

/* ---- clock.c ---- */

MH_HIDDEN extern bool mh_clock_tsc;  /* true: precise stamps are TSC readings */
/* true: every stamp is, precise or not (the TSC is the cheaper read here,
 * or MEMHOOK_CLOCK=tsc). */
MH_HIDDEN extern bool mh_clock_tsc_always;
/* Subscribers that asked for precise time (memhook_events_precise_time);
 * the trace asks through mh_trace_on.  Read by every hook. */
MH_HIDDEN extern _Atomic uint32_t mh_clock_precise_wanted;
/* A (TSC, CLOCK_MONOTONIC ns) pair read as close together as this CPU
 * allows: the best of a few tries, the TSC taken at the middle of the clock
 * read.  What a raw stamp is converted against (here, and by the trace's
 * collector from the anchors its area records). */
MH_HIDDEN void mh_clock_anchor(uint64_t *tsc, uint64_t *ns);
/* Turn every raw TSC stamp of events[0..count) into CLOCK_MONOTONIC ns.
 * Consumer side: called with the queue's consumer lock held. */
MH_HIDDEN void mh_clock_convert(memhook_event *events, size_t count);
/* The CLOCK_MONOTONIC ns of a raw TSC stamp, against the anchor the last
 * mh_clock_prepare (or mh_clock_convert) read: the drain's sort key.
 * Consumer side. */
MH_HIDDEN void mh_clock_prepare(void);
MH_HIDDEN uint64_t mh_clock_ns_of(const memhook_event *e);
/* At load (csrc/cuda/startup_order.c), before any event is stamped: the
 * TSC when it is invariant and MEMHOOK_CLOCK allows it, and its anchor. */
MH_HIDDEN void mh_clock_at_load(void);

/* A timestamp for an event being recorded, and the flag that says what
 * kind it is.
 *
 * Coarse (precise false, where the TSC is not the cheaper read: else as
 * precise): CLOCK_MONOTONIC_COARSE, a few loads.  The drain
 * does not order by time (event_drain.c), so nothing else is needed of it;
 * it is causal all the same (a thread's coarse reading after it observed
 * another's store is at least what that thread read before the store:
 * x86-64 keeps loads in order), which the drain uses as a filter.
 *
 * Precise (memhook trace, or a subscriber that asked): the TSC (or
 * CLOCK_MONOTONIC without a usable one).  The trace's collector merges its
 * threads' copies by these stamps, so a stamp must come after everything
 * the recording thread observed before it that another thread's event
 * caused.  rdtsc alone may execute before earlier loads complete, and so
 * carry an earlier time than what they read; `ordered` puts lfence first,
 * which waits for them (an ALLOC's stamp after the real call: the free that
 * made its address available).  Unordered is for a stamp whose order the
 * caller gets otherwise (a FREE found in the live table: emit.c). */
static inline uint64_t mh_clock_stamp(uint32_t *flags, bool precise, bool ordered)
{
    if (__builtin_expect(!precise && !mh_clock_tsc_always, 1)) {
        *flags |= MH_EVENT_COARSE;
        return mh_coarse_ns();
    }
    if (__builtin_expect(mh_clock_tsc, 1)) {
        *flags |= MH_EVENT_RAW_TSC;
        if (ordered)
            __builtin_ia32_lfence();
        return __builtin_ia32_rdtsc();
    }
    return mh_monotonic_ns();
}

/* ---- markers (event_drain.c orders them) ---- */

/* Process-wide, as the order it divides: bumped once per marker.  Every
 * event records the value it read (mh_epoch_flags); the drain puts an event
 * that read a smaller epoch than a marker's before that marker, one that
 * read the marker's or a later one after it.  Read by every event (on the
 * MH_HOT line), written only by a marker. */
MH_HIDDEN extern _Atomic uint32_t mh_marker_epoch;

static inline uint32_t mh_epoch_flags(void)
{
    uint32_t e = atomic_load_explicit(&mh_marker_epoch, memory_order_acquire);
    return (e << MH_EVENT_EPOCH_SHIFT) & MH_EVENT_EPOCH_MASK;
}

/* The flags of a new marker: a new epoch (before the marker is written, so
 * an event that follows the marker in any thread reads it or a later one),
 * and MH_EVENT_MARKER.  Pass them to the marker's write instead of
 * mh_epoch_flags. */
MH_HIDDEN uint32_t mh_marker_flags(void);

/* ---- event_drain.c (the producer side is event_lane.h) ---- */

/* A sink sees every batch memhook_events_drain hands out, called inside the
 * drain under the consumer lock, and every batch mh_queue_tee reads, so it
 * gets each event exactly once and in order whoever takes it out (Python in
 * a traced process that imports memhook, or the trace's own reader).  It must not drain, and it runs in the draining
 * thread; producers never call it.  NULL (the default) turns it off.
 * Set by csrc/trace/. */
typedef void (*mh_queue_sink_fn)(const memhook_event *events, size_t count);
MH_HIDDEN void mh_queue_set_sink(mh_queue_sink_fn sink);
/* The cache's feed: every event, at the moment it is put in the order
 * (handed out by a drain, read by the tee or by mh_queue_feed_run: once
 * each, markers included), in order, under the consumer lock; then, before
 * the lock is let go by any call that fed, `mark` for each lane whose count
 * of events put in the order moved (the cache stores the count into the
 * lane's `cached` once it published those events) and `commit`.  `ids`
 * (NULL when out of memory): each event's identity (mh_lane_slot_id's:
 * lane id and index, unique for the life of the process; 0 for a lane
 * without an id), which the cache makes an ALLOC's alloc_id - so a query
 * answering from the event itself, still in its lane, gives the same id
 * (mh_queue_own_events).  Set once,
 * by csrc/cache/ (which ranks above the queue). */
typedef void (*mh_queue_feed_fn)(const memhook_event *events, const uint64_t *ids,
                                 size_t count);
typedef void (*mh_queue_mark_fn)(_Atomic uint64_t *where, uint64_t value);
MH_HIDDEN void mh_queue_set_feed(mh_queue_feed_fn feed, mh_queue_mark_fn mark,
                                 void (*commit)(void));
/* The cache's record of an allocation starting exactly at `addr` that it
 * learned from a driver answer (a query of memory the hooks never saw
 * allocated), as the events put in the order so far leave it: what the
 * drain sizes a FREE from when neither its pending ALLOC nor free_fill.c
 * knows the address.  Called under the consumer lock.  Set once, by
 * csrc/cache/. */
typedef bool (*mh_queue_extent_fn)(uint64_t addr, uint64_t *size, int16_t *mem_type,
                                   int16_t *device);
MH_HIDDEN void mh_queue_set_extent(mh_queue_extent_fn extent);
/* Put everything published before the call in the order and feed it,
 * without taking it out (the consumer still drains it: the tee's way);
 * where nobody ever drained (no consumer in the process), take it out too,
 * so it does not pile up (and say so: mh_queue_trimmed).  `wait`: wait for
 * the consumer lock; else give up at once when another thread holds it.  Returns
 * true when the feed has every event published before the call. */
MH_HIDDEN bool mh_queue_feed_run(bool wait);
/* Nonzero once an event was published that no drain has taken out yet.
 * Set after a push (mh_lane_announce); exchanged for 0 by the drain before
 * it looks at the lanes, so an event published after that exchange leaves
 * it set. */
MH_HIDDEN extern struct mh_pending_line mh_events_pending;
/* On a line of its own: every fenced event reads it (mh_lane_announce),
 * and the variables the linker put beside it were written by producers
 * and the drain (the segment counts, on every segment mapped or
 * unmapped: each write cost every producer thread a miss on its next
 * event). */
struct mh_pending_line {
    _Alignas(64) _Atomic uint32_t flag;
};
/* Its values.  NEWS: something was published that nobody has put in the
 * order yet (producers store it).  SEQUENCED: everything published is in
 * the order (a query's run for the cache read it without taking it out:
 * mh_queue_feed_run), but the consumer has not taken all of it out yet.
 * A consumer drains while the flag is nonzero; the cache's feed runs only
 * on NEWS. */
#define MH_PENDING_NEWS 1u
#define MH_PENDING_SEQUENCED 2u
_Static_assert(sizeof(struct mh_pending_line) == 64, "the pending flag has a line of its own");
/* Process-wide like the queue: calls that took the pending flag (drains,
 * the feed's runs) are numbered when they begin (`begun`, before the flag
 * is exchanged); `done` is the number of the last one that left every event
 * published before it began in the cache (the feed committed).  Written by
 * csrc/queue/event_drain.c alone. */
struct mh_queue_calls {
    _Alignas(64) _Atomic uint64_t begun;
    _Atomic uint64_t done;
};
MH_HIDDEN extern struct mh_queue_calls mh_queue_calls;
/* mh_queue_feed_run's first test, inline (a query's fast path: the call and
 * the frame it makes the caller keep cost a query more than the test):
 * the flag holds no news and every call begun is done, so the feed has
 * every event published before the call.  False says nothing: ask
 * mh_queue_feed_run. */
static inline bool mh_queue_caught_up(void)
{
    if (atomic_load(&mh_events_pending.flag) == MH_PENDING_NEWS)
        return false;
    uint64_t begun = atomic_load(&mh_queue_calls.begun);
    return atomic_load(&mh_queue_calls.done) >= begun;
}
/* What the cache's published map lacks of what was published before the
 * call, read without the consumer lock (each lane's `published` against
 * the `cached` count the cache stored): the calling thread's own events
 * [own_from, own_to) of its lane, and whether another thread's are
 * missing too.  A query that cannot take the consumer lock answers its own
 * thread's events from its lane (mh_queue_own_events) and asks the driver
 * only about another's. */
typedef struct mh_queue_unapplied {
    uint64_t own_from, own_to;
    bool foreign;
} mh_queue_unapplied;
MH_HIDDEN void mh_queue_unapplied_get(mh_queue_unapplied *out);
/* Whether another thread's event the cache's published map lacks (a
 * lane's events past its `cached` count, as now) may change an answer
 * about [lo, hi): read from a summary of their address ranges each
 * producer keeps (lane_span.c), without the consumer lock; true where it
 * cannot tell.  A caller that read the map before asking must check that
 * the cache's version did not move meanwhile: a count read here may be
 * past what its map held. */
MH_HIDDEN bool mh_queue_unapplied_touch(uint64_t lo, uint64_t hi);
/* The calling thread's own events [from, to) of its lane, where they all lie
 * in the segment it writes now (the consumer never retires that one: it
 * stops at the producer's current segment), or NULL.  The caller reads
 * them before its thread records another event; only the public fields
 * are its (the drain may write the private flag bits and `seq` of a
 * pending ALLOC meanwhile: read flags with an atomic load).  *first_id:
 * the identity of event `from` (the next ones follow it); NULL also for a
 * lane without an id. */
MH_HIDDEN const memhook_event *mh_queue_own_events(uint64_t from, uint64_t to,
                                                  uint64_t *first_id);
/* The trace's reader: copy up to capacity pending events it has not read
 * yet into out and hand them to the sink, WITHOUT consuming them (the
 * process's own consumer still drains them; the sink does not see them
 * twice).  Returns how many.  A background reader (event_drain.c,
 * look_open's `behind`): it reads what the last look saw published, and of
 * a lane being written only what lies a KiB behind its producer, so it
 * never takes the lines the producer writes next; the rest waits for the
 * next call. */
MH_HIDDEN size_t mh_queue_tee(memhook_event *out, size_t capacity);
/* While nothing ever called memhook_events_drain, consume (drop) the
 * events the tee has read except the newest `keep`: a traced process with
 * no consumer of its own holds at most that many.  Once it dropped any,
 * the hooks no longer vouch for coverage (mh_queue_trimmed): a consumer
 * that starts later asks the driver about pointers its cache lacks. */
MH_HIDDEN void mh_queue_trim(uint64_t keep);
/* Whether mh_queue_trim ever dropped an event in this process. */
MH_HIDDEN bool mh_queue_trimmed(void);
/* The queue's part of memhook_queue_stats (produced, consumed, lanes,
 * segments); fields the queue does not own are left as they are. */
MH_HIDDEN void mh_queue_stats_fill(memhook_queue_stats *out);
/* fork(): the consumer lock is held across it (prepare/parent), and the
 * child's queue is repaired (a fresh lock, the vanished threads' lanes
 * orphaned, the pending flag set).  Registered by csrc/cuda/fork_order.c,
 * in the lock order of csrc/core/mh_lock_order.h. */
MH_HIDDEN void mh_queue_fork_prepare(void);
MH_HIDDEN void mh_queue_fork_parent(void);
MH_HIDDEN void mh_queue_fork_child(void);

#endif
