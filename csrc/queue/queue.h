/*
 * queue.h - the event queue's interface for everything outside csrc/queue/:
 * producers (the hook layer, csrc/cuda/emit.c), the drain's other users
 * (the trace streamer, csrc/trace/) and the install code.
 *
 *   event_lane.[ch]  the producer side: one lane per thread (the inline
 *                    push path lives in event_lane.h)
 *   event_drain.c    the consumer side: the lanes merged into one order,
 *                    the trace's tee and trim, statistics
 *   clock.c          event timestamps (raw TSC on the hook path, converted
 *                    to CLOCK_MONOTONIC ns by the drain)
 *
 * The queue carries memhook_event records (csrc/include/memhook/memhook.h)
 * and knows nothing of CUDA or of the hooks that fill it: a layer above it
 * that needs fork repair or counters of its own keeps them itself.
 */
#ifndef MEMHOOK_QUEUE_H
#define MEMHOOK_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/memhook.h"
#include "mh_time.h"
#include "mh_visibility.h"

/* ---- clock.c ---- */

/* memhook_event.flags bit of an event whose timestamp_ns still holds a raw
 * TSC reading; the drain converts it (mh_clock_convert) and clears it, so
 * no event leaves the core with it. */
#define MH_EVENT_RAW_TSC 0x80000000u

MH_HIDDEN extern bool mh_clock_tsc;  /* true: hooks stamp events with the TSC */
/* A (TSC, CLOCK_MONOTONIC ns) pair read as close together as this CPU
 * allows: the best of a few tries, the TSC taken at the middle of the clock
 * read.  What a raw stamp is converted against (here, and by the trace's
 * collector from the anchors its area records). */
MH_HIDDEN void mh_clock_anchor(uint64_t *tsc, uint64_t *ns);
/* Turn every raw TSC stamp of events[0..count) into CLOCK_MONOTONIC ns.
 * Consumer side: called with the queue's consumer lock held. */
MH_HIDDEN void mh_clock_convert(memhook_event *events, size_t count);

/* A timestamp for an event being recorded, and the flag that says what
 * kind it is.  The drain orders the threads' events by stamp
 * (event_drain.c), so a stamp must come after everything the recording
 * thread observed before it that another thread's event caused.  rdtsc
 * alone may execute before earlier loads complete, and so carry an
 * earlier time than what they read; `ordered` puts lfence first, which
 * waits for them (an ALLOC's stamp after the real call: the free that made
 * its address available).  Unordered is for a stamp whose order the caller
 * gets otherwise (a FREE found in the live table: emit.c). */
static inline uint64_t mh_clock_stamp(uint32_t *flags, bool ordered)
{
    if (__builtin_expect(mh_clock_tsc, 1)) {
        *flags |= MH_EVENT_RAW_TSC;
        if (ordered)
            __builtin_ia32_lfence();
        return __builtin_ia32_rdtsc();
    }
    return mh_monotonic_ns();
}

/* ---- event_drain.c (the producer side is event_lane.h) ---- */

/* A sink sees every batch memhook_events_drain hands out, called inside the
 * drain under the consumer lock, and every batch mh_queue_tee reads, so it
 * gets each event exactly once and in order whoever takes it out (Python in
 * a traced process that imports memhook, or the trace's own reader).  It must not drain, and it runs in the draining
 * thread; producers never call it.  NULL (the default) turns it off.
 * Set by csrc/trace/. */
typedef void (*mh_queue_sink_fn)(const memhook_event *events, size_t count);
MH_HIDDEN void mh_queue_set_sink(mh_queue_sink_fn sink);
/* The trace's reader: copy up to capacity pending events it has not read
 * yet into out and hand them to the sink, WITHOUT consuming them (the
 * process's own consumer still drains them; the sink does not see them
 * twice).  Returns how many. */
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
