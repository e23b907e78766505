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
 *
 * fork(): every lock is held across fork() by its module's pthread_atfork
 * handlers, so the child starts with each module between two operations.
 * pthread_atfork runs prepare handlers in reverse registration order and
 * parent/child handlers in registration order, so a lock earlier in the
 * order must be registered later (and is then released later).  Modules
 * register lazily (reloc at mh_reloc_init, bistro at its first install);
 * install.c says how it registers around them.  The queue's and the
 * hooks' own child handlers (lanes, emit.c's pid) are registered at load,
 * before the trace's (link order: csrc/build_native.py), so the trace's
 * child handler sees a repaired queue.
 */
#ifndef MEMHOOK_CORE_LOCK_ORDER_H
#define MEMHOOK_CORE_LOCK_ORDER_H
#endif
