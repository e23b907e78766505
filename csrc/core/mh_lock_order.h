/*
 * mh_lock_order.h - the core's cross-module lock order, written down once.
 * (No declarations: modules include it nowhere; they point here.)
 *
 * A thread holding one lock may take those after it on its line, never one
 * before:
 *
 *     install's g_lock (cuda/install.c) -> reloc's lock (reloc/reloc.c,
 *                                          recursive) -> the loader's lock
 *     install's g_lock                  -> bistro's g_lock (bistro/patch.c)
 *                                          -> the loader's lock (dladdr)
 *     install's g_lock, or none         -> the UCM feed's g_lock
 *                                          (cuda/ucm_feed.c) -> libucm's
 *                                          event lock -> the loader's lock
 *     install's g_lock -> the UCM feed's g_lock -> bistro's g_lock (the
 *                                          feed-only hooks, cuda/ucm_keep.c)
 *     install's g_lock, or reloc's lock -> one "objects changed" observer's
 *                                          lock (caller.c, trace_modules.c,
 *                                          mh_text.c, pyframes_abi.c: they
 *                                          never nest) -> the loader's lock
 *
 * bistro's and reloc's locks never nest.  Leaves, never held while taking
 * another: the queue's consumer lock (queue/event_drain.c), the trace's
 * hand and anchor locks (trace/trace.c, trace/trace_lane.c).  No hook takes
 * any of these (a hook holds only libucm's event lock, for reading, while
 * it feeds UCX).
 *
 * fork(): csrc/cuda/fork_order.c's one registration takes install's, then
 * bistro's, reloc's and the queue's lock in prepare, releases them in
 * reverse, and repairs the child module by module, the trace last.
 * docs/design/lock-order.md gives the reasons for each line and for the
 * fork order.
 */
#ifndef MEMHOOK_CORE_LOCK_ORDER_H
#define MEMHOOK_CORE_LOCK_ORDER_H
#endif
