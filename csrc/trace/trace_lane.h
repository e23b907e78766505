/*
 * trace_lane.h - the hooks' one door into `memhook trace`: every event is
 * also copied, at record time, into the calling thread's segment of this
 * process's trace area (trace_proto.h), a memfd the collector holds too.
 *
 * The copy takes no lock and makes no system call; a thread takes a new
 * segment (one CAS) every MH_TRACE_SEG_EVENTS events.  When the area is
 * full the event is counted - in `lost` when segments wait for the
 * collector (it is behind by MEMHOOK_TRACE_BUFFER_MB), in `lost_owned`
 * when every segment is a live thread's - and the collector reports it;
 * nothing waits.
 */
#ifndef MEMHOOK_TRACE_LANE_H
#define MEMHOOK_TRACE_LANE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "memhook/memhook.h"
#include "mh_visibility.h"
#include "trace_proto.h"


/* Nonzero while this process is traced: the hooks' one extra branch. */
MH_HIDDEN extern _Atomic int mh_trace_on;

MH_HIDDEN void mh_trace_record(const memhook_event *e);

/* Called by emit.c with the finished event, before it is published to
 * the process's own queue (so the copy, too, is published before a FREE's
 * real free and before an ALLOC's pointer is returned: the order the
 * collector's merge relies on, as event_drain.c explains). */
static inline void mh_trace_copy(const memhook_event *e)
{
    if (__builtin_expect(atomic_load_explicit(&mh_trace_on, memory_order_relaxed), 0))
        mh_trace_record(e);
}

/* trace.c's side. */
/* Make a fresh area of `mb` MiB for this process image and start copying
 * into it; returns its memfd (the caller hands it over and closes it), or
 * -1 with errno. */
MH_HIDDEN int mh_trace_area_create(unsigned mb, unsigned stack_depth, unsigned py_depth);
/* The area being written, or NULL (trace_modules.c appends to it). */
MH_HIDDEN mh_trace_area *mh_trace_area_current(void);
/* Stop copying (the fork child, before it makes its own area). */
MH_HIDDEN void mh_trace_area_forget(void);
/* trace.c: start the image's streamer thread if it is not running yet.
 * Called by the first claim of a segment, so a process that records no
 * event never has a thread of ours (see trace.c: per-thread credentials). */
MH_HIDDEN void mh_trace_want_streamer(void);
/* Record a (TSC, ns) anchor so the collector can convert raw stamps. */
MH_HIDDEN void mh_trace_area_anchor(void);
MH_HIDDEN void mh_trace_area_mark_exited(void);
/* trace_modules.c: records of objects loaded or unloaded since the last
 * sync (mh_trace_modules_sync), if the set changed - cheap when
 * it did not (the loader's add/remove counters). */
MH_HIDDEN void mh_trace_modules_poll(void);
/* Module records into this image's trace area, if it is traced: an
 * observer of mh_objects.h (registered by trace_modules.c), and called
 * when an area is made.  Takes a lock of its own; never from a hook. */
MH_HIDDEN void mh_trace_modules_sync(void);
/* fork() child handlers (registered by csrc/cuda/fork_order.c, after the
 * queue's and the hooks' repair): the module table's lock made afresh;
 * a traced child makes its own area and hands it over. */
MH_HIDDEN void mh_trace_modules_fork_child(void);
/* fork() prepare and parent handlers: a connection made for the child
 * that keeps the collector waiting until the child's HELLO (trace.c). */
MH_HIDDEN void mh_trace_fork_prepare(void);
MH_HIDDEN void mh_trace_fork_parent(void);
MH_HIDDEN void mh_trace_fork_child(void);

/* ---- load and unload (csrc/cuda/startup_order.c calls each once) ---- */

/* trace_modules.c: mh_trace_modules_sync observes the loaded objects. */
MH_HIDDEN void mh_trace_modules_at_load(void);
/* trace.c, under `memhook trace` (MEMHOOK_TRACE_SOCKET): the knobs, the
 * connection and the image's area.  True when the image is traced: then
 * the hooks go in (the trace installs nothing itself) and
 * mh_trace_hello_at_load tells the collector how that went, handing the
 * area over. */
MH_HIDDEN bool mh_trace_open_at_load(void);
MH_HIDDEN void mh_trace_hello_at_load(unsigned mode, int install_rc, const char *why);
/* trace.c: the area marked exited, a last anchor, a last hand-over. */
MH_HIDDEN void mh_trace_at_unload(void);

#endif
