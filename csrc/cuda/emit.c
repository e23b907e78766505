/*
 * emit.c - turning a completed (or starting) call into an event.
 *
 * An event is written straight into the calling thread's lane slot
 * (event_lane.h) and published; nothing here takes a lock.  The pid is
 * cached (getpid() is a system call, which would cost more than the rest
 * of the hook) and refreshed in a fork child; the tid is the lane's.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "caller.h"
#include "cuda_hooks.h"
#include "event_lane.h"
#include "log.h"
#include "trace_lane.h"
#include "ucm_feed.h"

/* Process-wide by nature: the pid of this process, refreshed in a fork
 * child.  0 until first needed. */
MH_HOT static _Atomic int32_t g_pid;

static int32_t current_pid(void)
{
    int32_t pid = atomic_load_explicit(&g_pid, memory_order_relaxed);
    if (__builtin_expect(pid == 0, 0)) {
        pid = (int32_t)getpid();
        atomic_store_explicit(&g_pid, pid, memory_order_relaxed);
    }
    return pid;
}

/* The child's pid, before anything in the child records an event.  This
 * layer's own handler (the queue knows nothing of pids); fork_order.c runs
 * it before the trace's child handler (csrc/trace/trace.c). */
void mh_emit_fork_child(void) { atomic_store(&g_pid, (int32_t)getpid()); }

/* Whether FREEs are sized in the hook (the live table, else the driver,
 * before the free): under `memhook trace` (its area gets the event as the
 * hook wrote it, and a traced process may have no drain), while a
 * subscriber asked (exact_sizes.c), and while UCX is fed (libucm is told
 * of a free before the call, with its size).  Otherwise the drain fills a
 * FREE's size from its ALLOC (queue/free_fill.c).  Loads of the MH_HOT
 * line. */
static inline bool sizes_exact(void)
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
 * (mh_emit_alloc, mh_free_begin outside exact sizes): called, its dozen
 * arguments went through the stack and six saved registers, and the tests
 * on kind, flags, link and fence were made at run time on values the
 * caller has as constants.  Every other writer goes through write_event,
 * one out-of-line copy. */
static inline __attribute__((always_inline)) uint64_t
write_event_at(int kind, mh_fn f, uint64_t addr, uint64_t size, int mem_type, int device,
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
    e->pid = current_pid();
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

/* The out-of-line writer: markers, pushes after the call, the FREE of
 * exact sizes. */
static __attribute__((noinline)) uint64_t write_event(int kind, mh_fn f, uint64_t addr,
                                                      uint64_t size, int mem_type, int device,
                                                      int result, uint32_t flags,
                                                      mh_stamp stamp, uint64_t link)
{
    return write_event_at(kind, f, addr, size, mem_type, device, result, flags, stamp, link,
                          false, NULL);
}

static void push(int kind, mh_fn f, uint64_t addr, uint64_t size, int mem_type, int device,
                 int result, uint32_t flags)
{
    write_event(kind, f, addr, size, mem_type, device, result, flags, mh_stamp_now(true), 0);
    mh_lane_announce(false);
}

static void push_marker(int kind, mh_fn f, int device, int result, uint32_t what);

void mh_emit_alloc(mh_fn f, mh_stamp stamp, int result, uint64_t addr, uint64_t size,
                   int mem_type, int device)
{
    if (device == MH_DEVICE_CURRENT)
        device = result == 0 ? mh_alloc_device() : mh_current_device();
    if (result != 0)
        addr = 0;
    /* With exact sizes the live record below is remembered for the FREE,
     * and its CAS is the announcement's fence; otherwise the publication
     * is (the drain pairs the FREE with this event: queue/free_fill.c). */
    bool exact = sizes_exact();
    uint32_t unpaired = addr != 0 && __atomic_load_n(&mh_live_gen, __ATOMIC_ACQUIRE) != mh_call_gen
                            ? MH_EVENT_UNPAIRED
                            : 0;
    uint64_t self = write_event_at(MEMHOOK_EVENT_ALLOC, f, addr, size, mem_type, device, result,
                                   unpaired, stamp, 0, !exact, NULL);
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
        push_marker(0, (mh_fn)0, -1, 0, MEMHOOK_EVENT_HOOKS_GAP);
    /* The live record after the event: its CAS is the fence that lets the
     * announcement skip a store (event_lane.h).  No FREE of addr can race
     * it: the caller does not have addr until we return. */
    bool fenced = !exact;
    if (exact && result == 0 && addr != 0 && mh_hooks[f].tracked) {
        mh_live rec = {.size = size,
                       .stamp = (stamp.flags & MH_EVENT_RAW_TSC) ? stamp.at : 0,
                       .id = self,
                       .gen = mh_call_gen,
                       .mem_type = (int16_t)mem_type,
                       .device = (int16_t)device};
        fenced = mh_live_insert(addr, &rec);
    }
    mh_lane_announce(fenced);
    /* UCX's libucm, when memhook feeds it (ucm_feed.c): before the caller
     * has the pointer. */
    if (__builtin_expect(__atomic_load_n(&mh_ucm_feeding, __ATOMIC_RELAXED), 0) && addr != 0)
        mh_ucm_alloc(addr, size, mem_type);
}

void mh_free_begin(mh_fn f, uint64_t addr, uint64_t given_size, mh_free_plan *plan)
{
    plan->addr = addr;
    plan->flags = 0;
    plan->pending = NULL;
    if (!sizes_exact()) {
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
        write_event_at(MEMHOOK_EVENT_FREE, f, addr, given_size, mh_hooks[f].mem_type,
                       MH_DEVICE_FILL, MH_RESULT_PENDING, flags, mh_stamp_now(true), 0, false,
                       &plan->pending);
        return;
    }
    plan->from_table = mh_live_find(addr, &plan->rec, &plan->table_slot);
    plan->known = plan->from_table;
    if (!plan->known) {
        uint64_t base = 0, size = 0;
        plan->rec.mem_type = (int16_t)mh_hooks[f].mem_type;
        plan->rec.device = -1;
        plan->rec.id = 0;
        if (mh_driver_range(addr, &base, &size) && base == addr) {
            plan->known = true;
            plan->rec.size = size;
            mh_free_source_note(true, false);
        } else {
            plan->rec.size = 0;
        }
    }
    if (given_size != 0) {
        /* The call names its range (cuMemUnmap): that is what goes away -
         * maybe more than the one map its address starts. */
        if (!plan->from_table || given_size != plan->rec.size)
            plan->flags |= MH_EVENT_RANGE;
        plan->rec.size = given_size;
        plan->known = true;
    }
    if (plan->rec.size == 0) {
        plan->flags |= MEMHOOK_EVENT_SIZE_UNKNOWN;
        mh_free_source_note(false, true);
    }
    /* UCX's libucm, when memhook feeds it (ucm_feed.c): before the real
     * free, so its cache never holds a range the driver may reuse. */
    if (__builtin_expect(__atomic_load_n(&mh_ucm_feeding, __ATOMIC_RELAXED), 0))
        mh_ucm_free(addr, plan->rec.size, plan->rec.mem_type);
    if (!plan->known)
        return;
    /* A precise stamp after its ALLOC's, whichever thread made that: a
     * plain rdtsc may run ahead of the load that brought addr into this
     * thread (handed over by the allocating thread a moment ago), and so
     * read the clock before the ALLOC's stamp; the record carries that
     * stamp, and a FREE found there is stamped after it - no fence needed.
     * A FREE the table did not know waits for its loads instead (the
     * driver's answer, or nothing: an allocation made before install has
     * no ALLOC to follow).  The drain's order does not need either (the
     * FREE names its ALLOC: rec.id); the trace's collector merges by them. */
    mh_stamp stamp = mh_stamp_now(!plan->from_table);
    if (plan->from_table && (stamp.flags & MH_EVENT_RAW_TSC) && stamp.at <= plan->rec.stamp)
        stamp.at = plan->rec.stamp + 1;
    uint64_t link = plan->from_table ? plan->rec.id : 0;
    write_event(MEMHOOK_EVENT_FREE, f, addr, plan->rec.size, plan->rec.mem_type,
                plan->rec.device, 0, plan->flags | (link != 0 ? MH_EVENT_LINK_ALLOC : 0),
                stamp, link);
    /* Forget the record after the event: the CAS is the announcement's
     * fence (event_lane.h). */
    if (plan->from_table)
        mh_live_remove(addr, plan->table_slot);
    mh_lane_announce(plan->from_table);
}

void mh_free_end(mh_fn f, const mh_free_plan *plan, int result)
{
    if (plan->pending != NULL) {
        /* Its slot is in the segment this thread writes (nothing was
         * recorded in it since: the hook depth), which the drain never
         * retires.  The exchange is the announcement's fence. */
        int32_t was = __atomic_exchange_n(&plan->pending->result,
                                          result != 0 ? result | MH_RESULT_REFUSED : 0,
                                          __ATOMIC_ACQ_REL);
        mh_lane_announce(true);
        if (result != 0 && (was & MH_RESULT_TAKEN)) {
            /* A drain handed it out as a free that succeeded: what the
             * consumers learned of this range is wrong now, so tell them to
             * distrust what they learned before (the driver decides). */
            mh_debug("%s(0x%llx) failed with %d after its FREE was handed out",
                     mh_hooks[f].name, (unsigned long long)plan->addr, result);
            push_marker(0, (mh_fn)0, -1, 0, MEMHOOK_EVENT_HOOKS_GAP);
        }
        return;
    }
    if (!plan->known) {
        push(MEMHOOK_EVENT_FREE, f, plan->addr, plan->rec.size, plan->rec.mem_type,
             plan->rec.device, result, plan->flags);
        return;
    }
    if (result != 0) {
        /* Announced before the call, and the driver refused it: the memory
         * is still allocated, so keep knowing it. */
        mh_debug("%s(0x%llx) failed with %d after its FREE was announced", mh_hooks[f].name,
                 (unsigned long long)plan->addr, result);
        if (plan->from_table)
            mh_live_insert(plan->addr, &plan->rec);
        /* and UCX, told of the free before the call, learns it back */
        if (__atomic_load_n(&mh_ucm_feeding, __ATOMIC_RELAXED))
            mh_ucm_alloc(plan->addr, plan->rec.size, plan->rec.mem_type);
    }
}

/* A marker event: everything recorded before it goes first in the event
 * order, everything after it after it.  mh_marker_flags bumps the epoch
 * as the marker is written (queue.h), so the marker's own epoch is one no
 * event recorded before this point read. */
static void push_marker(int kind, mh_fn f, int device, int result, uint32_t what)
{
    push(kind, f, 0, 0, MEMHOOK_MEM_UNKNOWN, device, result, what | mh_marker_flags());
}

void mh_emit_marker(uint32_t what)
{
    if (mh_hook_depth != 0)
        return;
    mh_hook_depth++;
    push_marker(0, (mh_fn)0, -1, 0, what);
    mh_hook_depth--;
}

/* Called by a teardown's wrapper AFTER the real call returned (its hook
 * depth raised: nothing the driver did inside was recorded).
 *
 * The epoch is bumped here, after the call: an event another thread
 * publishes during the teardown then reads the old epoch and goes before
 * the marker (an UNKNOWN region, resolved through the driver) instead of
 * after it (memory of the dead context answered CUDA for good).  The live
 * table starts a new generation first; the precise stamp is taken after
 * the call too, for the trace's collector.  A failed teardown freed
 * nothing and is an ordinary event.  docs/design/causal-merge.md,
 * "Markers", has the cases. */
void mh_emit_context_reset(mh_fn f, int result, int device)
{
    if (result != 0) {
        push(MEMHOOK_EVENT_FREE, f, 0, 0, MEMHOOK_MEM_UNKNOWN, device, result,
             MEMHOOK_EVENT_CONTEXT_RESET);
        return;
    }
    mh_live_new_generation(false);
    push_marker(MEMHOOK_EVENT_FREE, f, device, result, MEMHOOK_EVENT_CONTEXT_RESET);
}

void mh_driver_unloaded(void)
{
    /* Entry points it cached point into unmapped code; live records name
     * allocations that no longer exist. */
    mh_driver_calls_reset();
    mh_pointer_attributes_driver_unloaded();
    mh_live_new_generation(true);
    /* One marker in the event order: consumers forget every region before
     * it (the driver's memory, pinned host memory included, is gone) and
     * keep what follows (a reloaded driver's allocations).  Not a hook:
     * nested only if a hook's own driver query unloads it. */
    mh_emit_marker(MEMHOOK_EVENT_DRIVER_UNLOADED);
}

int mh_unresolved(mh_fn f)
{
    mh_error("%s: the real function is not known yet; returning an error", mh_hooks[f].name);
    return mh_hooks[f].api == MEMHOOK_API_DRIVER ? CUDA_ERROR_NOT_FOUND : 500;
}

int memhook_events_record(int kind, int function, uint64_t address, uint64_t size, int mem_type,
                          int device, int result)
{
    /* A signal handler that interrupts a push of this thread would write
     * the same slot: record nothing there (hooks behave the same way). */
    if (mh_hook_depth != 0)
        return EBUSY;
    mh_hook_depth++;
    MH_CALLER_NOTE();
    push(kind, (mh_fn)function, address, size, mem_type, device, result, 0);
    mh_hook_depth--;
    return 0;
}
