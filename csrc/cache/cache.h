/*
 * cache.h - the process-wide memory-type cache, for the rest of the core.
 *
 *   region_map.c   the published snapshot (a sorted array behind one
 *                  atomic pointer), its readers, the epoch reclamation,
 *                  and the one writer's batch merge
 *   cache_query.c  memhook_query and its batch forms: vouching, the
 *                  driver for what the hooks do not vouch for, and the
 *                  drain before a query
 *   cache_feed.c   events -> writer operations, in event order (the
 *                  queue calls it with every event it sequences)
 *
 * The cache knows events (memhook_event) and address ranges; it knows
 * nothing of the hooks.  csrc/cuda/ tells it what it needs of them: the
 * install periods, whether the hooks cover every allocation entry point,
 * the reserved VA ranges, and how to ask the loaded driver.
 */
#ifndef MEMHOOK_CACHE_H
#define MEMHOOK_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/memhook.h"
#include "mh_visibility.h"
#include "queue.h"

/* One region of the map: [start, end), never overlapping another.  Pieces
 * of one allocation cut by a later write keep its alloc_id. */
typedef struct mh_region {
    uint64_t start;
    uint64_t end;
    uint64_t alloc_id;
    uint32_t period;    /* the install period it was learned in (mh_cache_period) */
    int16_t device;
    uint8_t type;       /* MEMHOOK_MEMORY_* */
    uint8_t origin;     /* MEMHOOK_ORIGIN_HOOKS or _DRIVER */
} mh_region;

/* A cache: the process has one (mh_cache_process); tests make their own
 * (memhook_testing_cache_*). */
typedef struct mh_cache mh_cache;

/* What every query reads first, inline: a cache's first member (so a
 * pointer to the cache, converted, points to it).
 *   version   bumped after each change a query's answer may depend on (a
 *             publish, an install period, the coverage, a lost write): an
 *             answer read at version v stands while the version is v.
 *   deferred  operations queued by a drain and not published yet. */
typedef struct mh_cache_head {
    _Atomic uint64_t version;
    _Atomic size_t deferred;
} mh_cache_head;

static inline const mh_cache_head *mh_cache_head_of(const mh_cache *c)
{
    return (const mh_cache_head *)(const void *)c;
}

static inline uint64_t mh_cache_version(const mh_cache *c)
{
    return atomic_load_explicit(&mh_cache_head_of(c)->version, memory_order_acquire);
}

/* (its address, inline: every query asks for it) */
MH_HIDDEN extern mh_cache mh_process_cache;
static inline mh_cache *mh_cache_process(void) { return &mh_process_cache; }

/* ---- writing (one writer at a time: mh_cache_write_begin/_end) ---- */

/* What an operation does to its range. */
enum mh_op_kind {
    MH_OP_ASSIGN = 1,      /* the range becomes one region (type, device, origin) */
    MH_OP_REMOVE = 2,      /* a hole */
    MH_OP_FORGET_DEVICE,   /* a context reset: regions of `device` (and of no
                              known device; all for -1) become UNKNOWN */
    MH_OP_DEMOTE_AT,       /* a FREE of unknown size: the run of touching
                              regions of one type and device holding `start`
                              becomes UNKNOWN */
    MH_OP_CLEAR,           /* the driver left: every region goes */
};

typedef struct mh_op {
    uint64_t start, end;
    uint64_t alloc_id;   /* ASSIGN: the id to keep (0: a new one) */
    uint32_t period;     /* ASSIGN: learned in; DEMOTE_AT: its run's (0: the current
                            one, stamped when queued) */
    uint32_t kind;
    int16_t device;
    uint8_t type;
    uint8_t origin;
} mh_op;

/* Take the writer's seat: `wait` false gives up at once when another
 * writer holds it (a query remembering a driver answer).  Async-signal-
 * safe (an atomic flag).  Returns whether it was taken. */
MH_HIDDEN bool mh_cache_write_begin(mh_cache *c, bool wait);
/* Queue an operation, in order (the seat held).  Returns false only when
 * no memory could be mapped for it (the operation is dropped and the
 * cache stops vouching: mh_cache_write_end makes every region unvouched). */
MH_HIDDEN bool mh_cache_op(mh_cache *c, const mh_op *op);
/* Apply every queued operation and publish the result; leave the seat. */
MH_HIDDEN void mh_cache_write_end(mh_cache *c);
/* The same, except that a short batch over a large map may stay queued
 * (the drain's commit): mh_cache_publish_deferred publishes it. */
MH_HIDDEN void mh_cache_write_end_deferrable(mh_cache *c);
/* Publish what a drain left queued (before a query reads).  `wait` false:
 * gives up at once when another writer holds the seat.  Returns whether
 * nothing is left queued. */
MH_HIDDEN bool mh_cache_publish_deferred(mh_cache *c, bool wait);
/* The feed's side (the queue's consumer lock held, the seat NOT held):
 * operations of a drain call are staged, then moved to the queue by
 * mh_cache_stage_commit, which takes the seat only for the move and the
 * publish (or the deferral) - so a query finds the seat free while a drain
 * merges the lanes.  A mark stores `value` into *where (release) once every
 * operation staged before it is published: the queue's per-lane counts of
 * the events the published map holds.  A mark that found no memory is
 * lost (the counter lags: readers see those events as pending longer). */
MH_HIDDEN bool mh_cache_stage_op(mh_cache *c, const mh_op *op);
MH_HIDDEN bool mh_cache_stage_mark(mh_cache *c, _Atomic uint64_t *where, uint64_t value);
/* Move what was staged to the queue and write it (deferrable: as
 * mh_cache_write_end_deferrable).  Takes the seat, waiting for it. */
MH_HIDDEN void mh_cache_stage_commit(mh_cache *c, bool deferrable);
/* The region a driver answer made that starts exactly at addr (an
 * allocation's base: the driver frees nothing else), learned in the current
 * period, of a known type, as the operations fed so far leave it - none
 * when one queued or staged since the snapshot touches it (the drain's
 * fill of a FREE of memory allocated before the hooks: csrc/queue/
 * event_drain.c).  The feed's side: the queue's consumer lock held, the
 * seat not held (taken for the read). */
MH_HIDDEN bool mh_cache_driver_alloc_at(mh_cache *c, uint64_t addr, mh_region *out);
/* How many operations were queued so far: a reader that asked the driver
 * remembers the answer only if this did not move meanwhile (an operation
 * queued then may be that range's FREE). */
MH_HIDDEN uint64_t mh_cache_generation(const mh_cache *c);

/* ---- reading (any thread, no lock, no malloc) ---- */

/* What covers [ptr, ptr + len). */
enum mh_found {
    MH_FOUND_ABSENT = 0,  /* touches no region */
    MH_FOUND_IN,          /* wholly inside one region: *r */
    MH_FOUND_RUN,         /* covered by touching regions of one type: *r spans
                             them (alloc_id 0 when they are several allocations;
                             device -1 unless they share one); `vouched` is
                             the weakest of theirs */
    MH_FOUND_MIXED,       /* touches a region, covered by no one type */
};

typedef struct mh_found_region {
    mh_region r;
    bool vouched;   /* every region of the answer is vouched for (see below) */
    bool host_vouched;  /* the hooks are in and cover every entry point: memory
                           in no region is host memory */
} mh_found_region;

/* Vouching: whether the cache may answer from a region without asking the
 * driver.  A region learned from hook events is vouched while the install
 * period it was learned in is the current one and the hooks are in; one
 * remembered from a driver answer, only if besides the hooks cover every
 * allocation and free entry point (else a free may go unseen). */
MH_HIDDEN int mh_cache_classify(mh_cache *c, uint64_t ptr, uint64_t end, mh_found_region *out);
/* An answer the hooks vouch for outright, and the extent it holds for:
 * [lo, hi) is the region, or the gap between two regions. */
typedef struct mh_hit {
    uint64_t version;   /* the cache's (mh_cache_version) before it was read */
    uint64_t lo, hi;
    uint64_t alloc_id;  /* 0 for a gap */
    int16_t device;     /* -1 for a gap */
    uint8_t type;       /* MEMHOOK_MEMORY_HOST for a gap */
    bool gap;           /* in no region: host memory */
    uint8_t origin;     /* the region's (MEMHOOK_ORIGIN_*); HOOKS for a gap */
} mh_hit;
/* The answer for [ptr, end) where it needs no more than the map and the
 * vouching: wholly inside one vouched region, or in no region while the
 * hooks vouch for host memory - what mh_cache_classify would answer with
 * origin HOOKS.  False for everything else (the caller classifies). */
MH_HIDDEN bool mh_cache_hit(mh_cache *c, uint64_t ptr, uint64_t end, mh_hit *out);
/* mh_cache_hit, the extent it found ([lo, hi): out's) noted in seen[0..1]
 * and the one there before moved to seen[2..3] (mh_cache_hit_kept's
 * record of its last two searches). */
MH_HIDDEN bool mh_cache_hit_noted(mh_cache *c, uint64_t ptr, uint64_t end, mh_hit *out,
                                  uint64_t seen[4]);
/* mh_cache_hit through the calling thread's memo of its last answers (the
 * one memhook_query keeps, cache_query.c): a remembered answer read at the
 * cache's current version whose extent holds [ptr, end) is returned with
 * no search, else the map is searched and a vouched answer remembered.
 * The same answer as mh_cache_hit, for a caller that knows the map holds
 * every event published before its call (mh_cache_current or
 * mh_cache_look_begin said so): the memo stands for the published map, not
 * for what the lanes hold.  Async-signal-safe. */
MH_HIDDEN bool mh_cache_hit_kept(mh_cache *c, uint64_t ptr, uint64_t end, mh_hit *out);
/* mh_cache_hit of the byte at each of ptrs[0 .. count), into out and ok:
 * searched sixteen at a time (the batch's way), one snapshot for all. */
MH_HIDDEN void mh_cache_hits(mh_cache *c, const uint64_t *ptrs, size_t count, mh_hit *out,
                             bool *ok);
/* Types of single bytes, count of them: MEMHOOK_MEMORY_* per pointer, or
 * MH_TYPE_ABSENT (in no region; MEMHOOK_MEMORY_HOST instead where
 * `host` says the caller may answer so) / MH_TYPE_UNVOUCHED (a region the
 * cache may not answer from: its type is in the low bits) for the caller
 * to resolve.  Returns how many are left to resolve (0: the batch is
 * answered in one pass). */
#define MH_TYPE_ABSENT 0x80u
#define MH_TYPE_UNVOUCHED 0x40u
MH_HIDDEN size_t mh_cache_types(mh_cache *c, const uint64_t *ptrs, size_t count, uint8_t *types,
                                bool host);

/* ---- what a reader's map may lack (cache_query.c) ----
 *
 * The one rule for every reader that answers from the process cache
 * without waiting for another thread (memhook_query and its forms, the
 * driver's pointer-attribute calls): an answer about [lo, hi) stands when
 * the map holds every event published before the call that may change it.
 * mh_cache_look_begin, before the map is read, brings it up to date where
 * that takes no lock another thread holds, and otherwise notes what it may
 * lack; mh_cache_look_holds, once the answer's extent is known, asks the
 * producers' summaries whether any event it lacks touches that extent. */
typedef struct mh_cache_look {
    uint64_t version;           /* the cache's, before the map is read */
    uint64_t own_from, own_to;  /* the calling thread's own events it lacks */
    bool others;                /* other threads' events it may lack */
} mh_cache_look;
/* Whether the map holds everything published before the call, at the cost
 * of a few loads where it does (memhook_query's first test, inline): the
 * feed has every event published before the call (the queue's caught-up
 * test inline, its run where that fails), and no publish is deferred. */
static inline bool mh_cache_fed(void)
{
    return __builtin_expect(mh_queue_caught_up(), 1) || mh_queue_feed_run(false);
}
static inline bool mh_cache_nothing_deferred(mh_cache *c)
{
    return atomic_load_explicit(&mh_cache_head_of(c)->deferred, memory_order_acquire) == 0;
}
static inline bool mh_cache_current(mh_cache *c)
{
    return mh_cache_fed() && mh_cache_nothing_deferred(c);
}
MH_HIDDEN bool mh_cache_look_behind(mh_cache *c, mh_cache_look *look, bool fed);
/* True where the map holds everything published before the call (*look
 * is then not filled: nothing is left to check); else *look says what it
 * may lack. */
static inline bool mh_cache_look_begin(mh_cache *c, mh_cache_look *look)
{
    if (__builtin_expect(!mh_cache_fed(), 0))
        return mh_cache_look_behind(c, look, false);
    return __builtin_expect(mh_cache_nothing_deferred(c), 1) ||
           mh_cache_look_behind(c, look, true);
}
/* Whether no event the map lacks may touch [lo, hi) (the calling thread's
 * own only when `own`: memhook_query lays those over the map itself). */
MH_HIDDEN bool mh_cache_look_untouched(mh_cache *c, const mh_cache_look *look, uint64_t lo,
                                       uint64_t hi, bool own);
static inline bool mh_cache_look_holds(mh_cache *c, const mh_cache_look *look, uint64_t lo,
                                       uint64_t hi, bool own)
{
    if (!look->others && !(own && look->own_from < look->own_to))
        return true;  /* (the map lacks nothing that counts) */
    return mh_cache_look_untouched(c, look, lo, hi, own);
}

/* ---- the install periods and coverage (set by csrc/cuda/install.c) ---- */

/* The current period: odd while hooks are installed, even while not; an
 * install after none, and an uninstall, start the next one (a switch of
 * mode keeps it: the hooks cover the switch). */
MH_HIDDEN uint32_t mh_cache_period(const mh_cache *c);
MH_HIDDEN void mh_cache_period_next(mh_cache *c, bool installed);
/* Whether the installed hooks see every allocation and free the loaded
 * driver can make (memhook_hooks_coverage_complete, remembered). */
MH_HIDDEN void mh_cache_set_coverage(mh_cache *c, bool complete);
MH_HIDDEN bool mh_cache_coverage(const mh_cache *c);

/* ---- events (cache_feed.c) ---- */

/* Turn events into operations, in order - an ALLOC's alloc_id is its
 * event's identity from `ids` (NULL, or 0 in it: a number of the cache's
 * own, below 2^48, which no identity is) - staged (the queue's feed, under
 * its consumer lock, which also orders the feeds; mh_cache_feed_commit
 * moves them to the queue before the drain call returns) or queued (the
 * seat held: a test cache's apply). */
MH_HIDDEN void mh_cache_feed_events(mh_cache *c, const memhook_event *events,
                                    const uint64_t *ids, size_t count, bool staged);
/* The operation one event makes (memhook/_events/apply.py's apply_row, and
 * cache_feed.c's table): false for an event that changes nothing
 * (skipped, failed, HOOKS_GAP, size 0).  Inline: the feed's per-event
 * cost. */
static inline bool mh_cache_event_op(const memhook_event *e, mh_op *out)
{
    /* (the flags, the size and the result are read once, atomically: the
     * drain may write them in a pending slot a query reads - its private
     * flag bits, a FREE's filled size, TAKEN - mh_queue_own_events) */
    uint32_t flags = __atomic_load_n(&e->flags, __ATOMIC_ACQUIRE);
    uint64_t size = __atomic_load_n(&e->size, __ATOMIC_RELAXED);
    int32_t result = __atomic_load_n(&e->result, __ATOMIC_RELAXED);
    mh_op op = {.device = -1, .origin = MEMHOOK_ORIGIN_HOOKS};
    if (flags & MEMHOOK_EVENT_SKIPPED)
        return false;
    if (flags & MEMHOOK_EVENT_DRIVER_UNLOADED) {
        op.kind = MH_OP_CLEAR;
    } else if (flags & MEMHOOK_EVENT_CONTEXT_RESET) {
        if (result != 0)
            return false;
        op.kind = MH_OP_FORGET_DEVICE;
        op.device = e->device < 0 ? -1 : e->device;
    } else if (result != 0) {
        return false;
    } else if (e->kind == MEMHOOK_EVENT_ALLOC || e->kind == MEMHOOK_EVENT_FREE) {
        uint64_t end = e->address + size;
        if (size == 0) {
            if (e->kind != MEMHOOK_EVENT_FREE || !(flags & MEMHOOK_EVENT_SIZE_UNKNOWN))
                return false;
            op.kind = MH_OP_DEMOTE_AT;
            op.start = e->address;
        } else {
            if (end < e->address && end != 0)
                return false;  /* past 2^64 */
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
        return false;
    }
    *out = op;
    return true;
}

MH_HIDDEN void mh_cache_feed_commit(void);

/* ---- the driver (cache_query.c; set by csrc/cuda/) ---- */

typedef struct mh_driver_answer {
    int known;          /* 1: the driver knows the pointer (CUDA memory) */
    int type;           /* MEMHOOK_MEMORY_* */
    int device;
    uint64_t base, size; /* the extent to remember */
} mh_driver_answer;
/* Ask the loaded, initialised driver about ptr: 0 with *out filled, or -1
 * when there is no answer (no driver loaded, not initialised, an error).
 * Never loads or initialises a driver. */
typedef int (*mh_cache_driver_fn)(uint64_t ptr, mh_driver_answer *out);
MH_HIDDEN void mh_cache_set_driver(mh_cache_driver_fn fn);

/* Mark UNKNOWN the parts of [pairs[2i], pairs[2i+1]) no region covers
 * (install: VA CUDA reserved before the hooks went in). */
MH_HIDDEN void mh_cache_mark_reserved(mh_cache *c, const uint64_t *pairs, size_t count);

/* Test caches (memhook_testing_cache_*): made and freed by hand, no
 * reader may be inside one when it is freed. */
MH_HIDDEN mh_cache *mh_cache_new(void);
MH_HIDDEN void mh_cache_destroy(mh_cache *c);
/* The binary steps a search of the published map takes: those its guide
 * leaves, else log2 of its keys' padded length (the block index's and
 * then a block's). */
MH_HIDDEN int mh_cache_search_steps(mh_cache *c);
/* Copy up to capacity regions, in address order; returns how many exist. */
MH_HIDDEN size_t mh_cache_regions(mh_cache *c, mh_region *out, size_t capacity);

/* fork(): the child's writer seat is free (its holder vanished); what the
 * parent published stays. */
MH_HIDDEN void mh_cache_fork_child(void);

/* At load (csrc/cuda/startup_order.c): the cache's feed registered with the
 * queue, before any drain; the readers' slots and membarrier, before any
 * query. */
MH_HIDDEN void mh_cache_feed_at_load(void);
MH_HIDDEN void mh_cache_readers_at_load(void);

#endif
