/*
 * emit.c - turning a completed (or starting) call into an event: what
 * emit_inline.h leaves out of the wrappers.
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

#include "emit_inline.h"
#include "log.h"

/* Process-wide by nature: the pid of this process (emit_inline.h),
 * refreshed in a fork child.  0 until first needed. */
MH_HOT _Atomic int32_t mh_emit_pid;

/* The child's pid, before anything in the child records an event.  This
 * layer's own handler (the queue knows nothing of pids); fork_order.c runs
 * it before the trace's child handler (csrc/trace/trace.c). */
void mh_emit_fork_child(void) { atomic_store(&mh_emit_pid, (int32_t)getpid()); }

/* The out-of-line writer: markers, pushes after the call, the FREE of
 * exact sizes. */
static __attribute__((noinline)) uint64_t write_event(int kind, mh_fn f, uint64_t addr,
                                                      uint64_t size, int mem_type, int device,
                                                      int result, uint32_t flags,
                                                      mh_stamp stamp, uint64_t link)
{
    return mh_write_event_at(kind, f, addr, size, mem_type, device, result, flags, stamp, link,
                             false, NULL);
}

static void push(int kind, mh_fn f, uint64_t addr, uint64_t size, int mem_type, int device,
                 int result, uint32_t flags)
{
    write_event(kind, f, addr, size, mem_type, device, result, flags, mh_stamp_now(true), 0);
    mh_lane_announce(false);
}

static void push_marker(int kind, mh_fn f, int device, int result, uint32_t what);

/* A marker event: everything recorded before it goes first in the event
 * order, everything after it after it.  mh_marker_flags bumps the epoch
 * as the marker is written (queue.h), so the marker's own epoch is one no
 * event recorded before this point read. */
static void push_marker(int kind, mh_fn f, int device, int result, uint32_t what)
{
    push(kind, f, 0, 0, MEMHOOK_MEM_UNKNOWN, device, result, what | mh_marker_flags());
}

void mh_emit_gap_marker(void) { push_marker(0, (mh_fn)0, -1, 0, MEMHOOK_EVENT_HOOKS_GAP); }

/* (emit_inline.h's mh_emit_alloc says why here and why then.) */
bool mh_emit_alloc_remember(mh_stamp stamp, uint64_t addr, uint64_t size, int mem_type,
                            int device, uint64_t self)
{
    mh_live rec = {.size = size,
                   .stamp = (stamp.flags & MH_EVENT_RAW_TSC) ? stamp.at : 0,
                   .id = self,
                   .gen = mh_call_gen,
                   .mem_type = (int16_t)mem_type,
                   .device = (int16_t)device};
    return mh_live_insert(addr, &rec);
}

void mh_free_begin_exact(mh_fn f, uint64_t addr, uint64_t given_size, mh_free_plan *plan)
{
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

/* A drain handed the FREE out as a free that succeeded, and the call
 * failed: what the consumers learned of this range is wrong now, so tell
 * them to distrust what they learned before (the driver decides). */
void mh_free_end_taken(mh_fn f, const mh_free_plan *plan, int result)
{
    mh_debug("%s(0x%llx) failed with %d after its FREE was handed out", mh_hooks[f].name,
             (unsigned long long)plan->addr, result);
    push_marker(0, (mh_fn)0, -1, 0, MEMHOOK_EVENT_HOOKS_GAP);
}

void mh_free_end_exact(mh_fn f, const mh_free_plan *plan, int result)
{
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
