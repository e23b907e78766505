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
 *
 *     install's g_lock, or none (reloc's dlopen wrapper, after the real
 *     call and its refresh)             -> the UCM feed's g_lock
 *                                          (cuda/ucm_feed.c) -> libucm's
 *                                          event lock (written) -> the
 *                                          loader's lock; not held across
 *                                          fork(): made afresh in the child
 *
 *     install's g_lock, or reloc's lock (the dlopen wrapper, after the
 *     real call)                        -> the "objects changed" observers'
 *                                          locks (cuda/caller.c's refresh
 *                                          lock, trace/trace_modules.c's
 *                                          g_lock, core/mh_text.c's g_lock,
 *                                          trace/pyframes_abi.c's g_lock;
 *                                          they never nest: the observers
 *                                          run one after another)
 *                                          -> the loader's lock
 *                                          (dl_iterate_phdr)
 *
 * Those observer locks are not held across fork(): the child re-makes
 * them (a refresh interrupted by fork leaves complete double-buffered
 * state behind, and the next change redoes it).
 *
 * bistro's and reloc's locks never nest, so their order is free.  The
 * loader's lock is glibc's dl_load_lock, taken by dlopen, dlclose, dladdr
 * and dl_iterate_phdr; reloc holds its own lock across the real dlopen
 * (a constructor may start threads that dlopen).
 *
 * Leaves - never held while taking another memhook lock, nor taken under
 * one of the above:
 *
 *     the queue's consumer lock (queue/event_drain.c): drains, the tee,
 *         trims, statistics; the trace's sink runs under it and takes none
 *     the trace's hand_lock (trace/trace.c) and anchor lock
 *         (trace/trace_lane.c)
 *
 * No hook takes any of these: a wrapper runs lock-free (cuda/cuda_hooks.h),
 * so a thread stopped in a hook holds nothing a drain or install waits for.
 * One foreign lock: while memhook feeds UCX (cuda/ucm_feed.c) a hook holds
 * libucm's event lock for reading around the dispatch, as libucm's own
 * hooks do; the feed's attach and hand-back take it for writing.
 *
 * fork(): every lock above the leaves but the observers', and the
 * queue's consumer lock, is held across fork(), so the child starts with
 * each module between two operations - the drain's causal-merge state
 * (its markers, closer set, FREE indexes, run cuts: queue/event_drain.c)
 * included, which the child inherits whole and goes on draining with.
 * One pthread_atfork registration (csrc/cuda/fork_order.c), made at load
 * before any function of the core can run (csrc/cuda/startup_order.c), so
 * before any of these locks can be held, runs every module's handlers in
 * this order:
 *
 *     prepare  install's g_lock, bistro's g_lock, reloc's lock, the
 *              queue's consumer lock (the order above: a forking thread
 *              never holds a lock while waiting for one before it)
 *     parent   the same locks released, in reverse
 *     child    the queue (its lock made afresh, the vanished threads'
 *              lanes orphaned, the pending flag set), emit.c's pid, reloc,
 *              bistro, install (each lock made afresh or released), the
 *              observer locks made afresh (caller.c, mh_text.c,
 *              pyframes_abi.c, trace_modules.c - whose table of objects
 *              also starts over), then the trace's handler (its hand_lock
 *              and anchor lock made afresh), which records into a new area
 *              and so needs the repaired queue, pid and module table
 *
 * The lock-free state needs no handler: the address chain and the links
 * in events name lanes by id and index, which a child keeps (its lanes are
 * the parent's, orphaned or its own), and the marker epoch is one counter.
 *
 * No module registers a handler of its own: a registration made later, or
 * lazily (bistro used to register at its first install or remove), would
 * run its prepare before the earlier ones and invert the order (issue 23:
 * in mode reloc the parent hung in fork()).  glibc makes the loader's
 * dl_load_lock afresh in the child (glibc 2.36 does not do so for
 * dl_load_write_lock: a child forked while another thread adds an object
 * to the link map can hang in its own dlopen, memhook or not - see
 * tests/hooks/scripts/fork_churn.py).  Python's os.register_at_fork
 * handlers (memhook/_drain.py takes its apply, take and delivery locks) run
 * before all of these, from os.fork().
 */
#ifndef MEMHOOK_CORE_LOCK_ORDER_H
#define MEMHOOK_CORE_LOCK_ORDER_H
#endif
