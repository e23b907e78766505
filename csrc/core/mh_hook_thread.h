/*
 * mh_hook_thread.h - the hook path's thread-locals, on one cache line.
 *
 * A recording call reads or writes five per-thread words that belong to
 * three layers: the call's site (core: mh_frames.h), the thread's event
 * lane and the word its publication fences on (queue: event_lane.h), and
 * the hook depth and the live table's generation as the call began (cuda:
 * cuda_hooks.h).  As five variables they lay over two or three lines of
 * the core's TLS block, and every function that touched one first loaded
 * that variable's offset from the GOT; gathered here they share one line,
 * and a function loads one offset.  Only the placement is here: each field
 * keeps its owner's rules, written beside its uses.
 *
 * Initial-exec, as each of them was: reaching it is a load from %fs, never
 * __tls_get_addr (which may allocate: not from a hook, a signal handler or
 * a fork child).  Zero in a new thread, which is every field's start.
 */
#ifndef MEMHOOK_MH_HOOK_THREAD_H
#define MEMHOOK_MH_HOOK_THREAD_H

#include <stdint.h>

#include "mh_visibility.h"

/* Where the outermost recording call came from (mh_frames.h). */
typedef struct mh_caller_site {
    uintptr_t ra;  /* the outermost wrapper's return address */
    uintptr_t fp;  /* its frame: fp[0] the caller's saved rbp, fp[1] == ra */
} mh_caller_site;

struct mh_lane;  /* csrc/queue/event_lane.h */

typedef struct mh_hook_thread {
    /* core, mh_frames.h: the site of the recording call in progress */
    mh_caller_site caller;
    /* queue, event_lane.h: the thread's lane, NULL until its first event
     * (and again after its exit handler ran) */
    struct mh_lane *lane;
    /* queue, event_lane.h: mh_lane_publish_fenced's locked add */
    _Atomic uint32_t fence_word;
    /* cuda, cuda_hooks.h: >0 while the thread is inside a wrapper (or
     * memhook's own driver query), so nested hooks pass straight through */
    int depth;
    /* cuda, cuda_hooks.h: mh_live_gen as the outermost recording call began */
    uint32_t call_gen;
} mh_hook_thread;
_Static_assert(sizeof(mh_hook_thread) <= 64, "the hook path's thread-locals fit one line");

/* Per thread, as each field's comment says; line-aligned (mh_hook_thread.c).
 * Each owner reaches its fields under its own name: mh_caller_tl, mh_my_lane,
 * mh_fence_word, mh_hook_depth, mh_call_gen. */
MH_HIDDEN extern __thread mh_hook_thread mh_hook_tl __attribute__((tls_model("initial-exec")));

#endif
