/*
 * emit_inline.h - the event paths every hooked call runs, inlined into
 * its wrapper (cuda_signatures.h's macros and the hand-written wrappers).
 *
 * An ALLOC (mh_emit_alloc) and a FREE outside exact sizes (mh_free_begin,
 * mh_free_end) are written here, so that each wrapper carries its own
 * copy: a call to them cost a second set of saved registers, their eight
 * arguments marshalled (two through the stack), and tests at run time on
 * what the wrapper has as constants (the function, its memory type, the
 * device rule).  What is rare stays out of line in emit.c: markers, the
 * live table under exact sizes, the FREE sized in the hook, UCX's feed.
 * Only the wrappers' files and emit.c include this.
 */
#ifndef MEMHOOK_EMIT_INLINE_H
#define MEMHOOK_EMIT_INLINE_H

#include <stdatomic.h>
#include <unistd.h>

#include "caller.h"
#include "cuda_hooks.h"
#include "event_lane.h"
#include "trace_lane.h"
#include "ucm_feed.h"

/* ---- out of line, emit.c ---- */

/* One HOOKS_GAP marker after the calling thread's last event. */
MH_HIDDEN void mh_emit_gap_marker(void);
/* Under exact sizes: remember a successful, tracked allocation for its
 * FREE (the live table); true when its CAS ran (the announcement's fence). */
MH_HIDDEN bool mh_emit_alloc_remember(mh_stamp stamp, uint64_t addr, uint64_t size,
                                      int mem_type, int device, uint64_t self);
/* mh_free_begin under exact sizes: the live table, else the driver. */
MH_HIDDEN void mh_free_begin_exact(mh_fn f, uint64_t addr, uint64_t given_size,
                                   mh_free_plan *plan);
/* mh_free_end of an address-only FREE whose call failed after a drain
 * handed it out; of a FREE planned under exact sizes. */
MH_HIDDEN void mh_free_end_taken(mh_fn f, const mh_free_plan *plan, int result);
MH_HIDDEN void mh_free_end_exact(mh_fn f, const mh_free_plan *plan, int result);

/* ---- inline ---- */

/* The pid of this process, cached (getpid() is a system call, which
 * would cost more than the rest of the hook): emit.c's, refreshed in a
 * fork child; 0 until first needed. */
MH_HIDDEN extern _Atomic int32_t mh_emit_pid;

static inline int32_t mh_emit_current_pid(void)
{
    int32_t pid = atomic_load_explicit(&mh_emit_pid, memory_order_relaxed);
    if (__builtin_expect(pid == 0, 0)) {
        pid = (int32_t)getpid();
        atomic_store_explicit(&mh_emit_pid, pid, memory_order_relaxed);
    }
    return pid;
}

/* Whether FREEs are sized in the hook (the live table, else the driver,
 * before the free): under `memhook trace` (its area gets the event as the
 * hook wrote it, and a traced process may have no drain), while a
 * subscriber asked (exact_sizes.c), and while UCX is fed (libucm is told
 * of a free before the call, with its size).  Otherwise the drain fills a
 * FREE's size from its ALLOC (queue/free_fill.c).  Loads of the MH_HOT
 * line. */
static inline bool mh_sizes_exact(void)
{
    /* `|`, not `||`: three loads of one line and one test, not a branch
     * per switch (all three are nearly always off). */
    return (atomic_load_explicit(&mh_trace_on, memory_order_relaxed) |
            (int)atomic_load_explicit(&mh_exact_wanted, memory_order_relaxed) |
            __atomic_load_n(&mh_ucm_feeding, __ATOMIC_RELAXED)) != 0;
}

/* Write and publish one event stamped `stamp`, following `link` (an
 * event's identity; 0: the last event recorded at addr, from the address
 * chain); returns its own identity, and its slot in *slot unless NULL.
 * `fence`: publish with a locked instruction (then the caller may pass
 * mh_lane_announce true).  The caller then calls mh_lane_announce.  The
 * chain learns of the event after its publication, so a link read from it
 * names a published event (event_drain.c).
 *
 * Always inlined into the two hooks' paths that record on every call
 * (mh_emit_alloc, mh_free_begin outside exact sizes, themselves inlined
 * into each wrapper): called, its dozen arguments went through the stack
 * and six saved registers, and the tests on kind, flags, link and fence
 * were made at run time on values the caller has as constants.  Every
 * other writer goes through emit.c's write_event, one out-of-line copy. */
static inline __attribute__((always_inline)) uint64_t
mh_write_event_at(int kind, mh_fn f, uint64_t addr, uint64_t size, int mem_type, int device,
                  int result, uint32_t flags, mh_stamp stamp, uint64_t link, bool fence,
                  memhook_event **slot)
{
    memhook_event *e = mh_lane_slot();
    /* Read once, after mh_lane_slot (which takes a lane at a thread's
     * first event): the stores into the slot below leave it in a
     * register instead of a reload of the TLS word at each use. */
    mh_lane *lane = mh_my_lane;
    if (slot != NULL)
        *slot = e;
    uint64_t self = mh_lane_slot_id(lane);
    if (link == 0 && addr != 0)
        link = mh_addr_chain_last(addr);
    e->timestamp_ns = stamp.at;
    e->caller = mh_caller_get();  /* caller.h */
    e->seq = link;  /* the drain's until it numbers the event (queue.h) */
    e->address = addr;
    e->size = size;
    e->kind = kind;
    e->function = (int32_t)f;
    e->mem_type = mem_type;
    e->device = device;
    e->pid = mh_emit_current_pid();
    e->tid = lane->tid;
    e->result = result;
    /* A marker brings its own epoch (mh_marker_flags). */
    e->flags = flags | stamp.flags | ((flags & MH_EVENT_MARKER) ? 0 : mh_epoch_flags());
    /* memhook trace's own copy (csrc/trace/trace_lane.h).  A marker of no
     * call (kind 0: the driver unloaded, a gap in the hooks) is the
     * consumers' business only: the collector counts calls and live bytes. */
    if (kind != 0)
        mh_trace_copy(e);
    /* The summary widens to everything for a marker or a context reset
     * (lane_span.c): from the caller's values, so that it folds. */
    bool all = kind == 0 || (flags & MEMHOOK_EVENT_CONTEXT_RESET) != 0;
    if (fence)
        mh_lane_publish_fenced(lane, addr, size, all);
    else
        mh_lane_publish(lane, addr, size, all);
    if (addr != 0 && self != 0)
        mh_addr_chain_note(addr, self);
    return self;
}

/* (cuda_hooks.h says what each of the three does.) */
static inline __attribute__((always_inline)) void
mh_emit_alloc(mh_fn f, mh_stamp stamp, int result, uint64_t addr, uint64_t size, int mem_type,
              int device)
{
    if (device == MH_DEVICE_CURRENT)
        device = result == 0 ? mh_alloc_device() : mh_current_device();
    if (result != 0)
        addr = 0;
    /* With exact sizes the live record below is remembered for the FREE,
     * and its CAS is the announcement's fence; otherwise the publication
     * is (the drain pairs the FREE with this event: queue/free_fill.c). */
    bool exact = mh_sizes_exact();
    uint32_t unpaired = addr != 0 && __atomic_load_n(&mh_live_gen, __ATOMIC_ACQUIRE) != mh_call_gen
                            ? MH_EVENT_UNPAIRED
                            : 0;
    uint64_t self = mh_write_event_at(MEMHOOK_EVENT_ALLOC, f, addr, size, mem_type, device,
                                      result, unpaired, stamp, 0, !exact, NULL);
    /* A call that began before a new generation (its thread stalled across
     * an uninstall and the reinstall after it, or a context teardown, or
     * the driver's unload) and is published only now may be ordered after
     * the marker that should have covered it, and its memory may already
     * be gone unseen.  Every such bump is followed by its marker, whose
     * epoch increment releases it; the epoch was read above with acquire,
     * so a generation read here that still equals the call's means the
     * event went before every marker of a later generation.  Otherwise one
     * more gap marker, after this event, makes the consumers distrust it
     * too (rare: only a call in flight across one of those). */
    if (addr != 0 && __atomic_load_n(&mh_live_gen, __ATOMIC_ACQUIRE) != mh_call_gen)
        mh_emit_gap_marker();
    /* The live record after the event: its CAS is the fence that lets the
     * announcement skip a store (event_lane.h).  No FREE of addr can race
     * it: the caller does not have addr until its wrapper returns. */
    bool fenced = !exact;
    if (exact && result == 0 && addr != 0 && mh_hooks[f].tracked)
        fenced = mh_emit_alloc_remember(stamp, addr, size, mem_type, device, self);
    mh_lane_announce(fenced);
    /* UCX's libucm, when memhook feeds it (ucm_feed.c): before the caller
     * has the pointer. */
    if (__builtin_expect(__atomic_load_n(&mh_ucm_feeding, __ATOMIC_RELAXED), 0) && addr != 0)
        mh_ucm_alloc(addr, size, mem_type);
}

static inline __attribute__((always_inline)) void
mh_free_begin(mh_fn f, uint64_t addr, uint64_t given_size, mh_free_plan *plan)
{
    plan->addr = addr;
    plan->flags = 0;
    plan->pending = NULL;
    if (__builtin_expect(!mh_sizes_exact(), 1)) {
        /* The address only (and the range, when the call names one: a
         * ranged free, cuMemUnmap): the drain fills size, type and device
         * from the ALLOC this pairs with (queue/free_fill.c), or says the
         * size is unknown.  Published before the real free (nothing reusing the
         * address can be ordered before it: causal-merge.md, P), with its
         * result pending until the call returns (mh_free_end); announced
         * then, after the exchange that writes the result in (its fence).
         * The stamp is ordered: after the ALLOC's, which this thread may
         * have just learned the address from. */
        plan->known = true;
        plan->from_table = false;
        /* (a local: read back from *plan, the flags would be tested at run
         * time in the inlined writer) */
        uint32_t flags = given_size != 0 ? MH_EVENT_RANGE : MEMHOOK_EVENT_SIZE_UNKNOWN;
        plan->flags = flags;
        mh_write_event_at(MEMHOOK_EVENT_FREE, f, addr, given_size, mh_hooks[f].mem_type,
                          MH_DEVICE_FILL, MH_RESULT_PENDING, flags, mh_stamp_now(true), 0,
                          false, &plan->pending);
        return;
    }
    mh_free_begin_exact(f, addr, given_size, plan);
}

static inline __attribute__((always_inline)) void
mh_free_end(mh_fn f, const mh_free_plan *plan, int result)
{
    if (plan->pending != NULL) {
        /* Its slot is in the segment this thread writes (nothing was
         * recorded in it since: the hook depth), which the drain never
         * retires.  The exchange is the announcement's fence. */
        int32_t was = __atomic_exchange_n(&plan->pending->result,
                                          result != 0 ? result | MH_RESULT_REFUSED : 0,
                                          __ATOMIC_ACQ_REL);
        mh_lane_announce(true);
        if (__builtin_expect(result != 0 && (was & MH_RESULT_TAKEN), 0))
            mh_free_end_taken(f, plan, result);
        return;
    }
    mh_free_end_exact(f, plan, result);
}

#endif
