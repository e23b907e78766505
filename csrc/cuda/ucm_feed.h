/*
 * ucm_feed.h - memhook's events handed to UCX's libucm in the same process
 * (ucm_feed.c says when and why; docs/design/ucx-coexistence.md argues it).
 */
#ifndef MEMHOOK_UCM_FEED_H
#define MEMHOOK_UCM_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mh_visibility.h"

typedef enum mh_ucm_state {
    MH_UCM_ABSENT = 0,         /* no libucm seen yet */
    MH_UCM_FED,                /* memhook declared UCX's MEM_TYPE events external
                                  and dispatches them */
    MH_UCM_OWN_HOOKS,          /* UCX has (or was handed back) its own CUDA hooks */
    MH_UCM_HANDED_BACK_FAILED, /* at memhook's uninstall UCX could not install its own,
                                  nor could memhook keep a feed-only hook (ucm_keep.c) */
    MH_UCM_FEED_ONLY,          /* memhook is uninstalled; UCX could not install its own
                                  hooks, so memhook's feed-only hooks feed it */
    MH_UCM_UNUSABLE,           /* libucm lacks an entry point memhook needs */
    MH_UCM_BESIDE,             /* memhook is installed beside UCX's own hooks on some
                                  entries (UCX hooked them at a hand-back, then refused
                                  another): memhook's feed-only hooks feed UCX the rest */
} mh_ucm_state;

/* Non-zero while memhook feeds libucm: the hooks test it before calling
 * mh_ucm_alloc / mh_ucm_free. */
MH_HIDDEN extern int mh_ucm_feeding;

/* Look for libucm.so.0 and, the first time it is there, decide whether
 * memhook feeds it.  At install and after every dlopen; never from a hook. */
MH_HIDDEN void mh_ucm_attach(void);
/* At load (startup_order.c): watch dlopen for a libucm arriving later. */
MH_HIDDEN void mh_ucm_feed_at_load(void);
/* memhook's hooks are out: UCX gets its own CUDA hooks back (install lock
 * held, after every patch and GOT slot of memhook's was restored). */
MH_HIDDEN void mh_ucm_hand_back(void);
/* memhook installs mode `to` (not none) from mode `from` (install lock
 * held).  Before its mechanisms change, the feed-only hooks of an earlier
 * hand-back come out of the entries memhook patches, and memhook's wrappers
 * feed UCX again - or, beside UCX's own hooks on some entries, the
 * feed-only hooks go behind memhook's wrappers (ucm_keep.h).  After the
 * mechanisms changed (from none: after recording started),
 * mh_ucm_install_done puts them there and tells UCX of what it may have
 * missed in between. */
MH_HIDDEN void mh_ucm_install_begin(unsigned from, unsigned to);
MH_HIDDEN void mh_ucm_install_done(void);
/* status(): why `name` stays patched, or is blind, for UCX after memhook's
 * uninstall; `installed`: who feeds UCX there while memhook is installed
 * beside UCX's own hooks (false: nothing to say). */
MH_HIDDEN bool mh_ucm_row_reason(const char *name, bool installed, char *why, size_t why_len);
MH_HIDDEN mh_ucm_state mh_ucm_state_get(void);
/* fork(): the attach lock is not held across it (csrc/core/mh_lock_order.h);
 * the child makes it afresh and keeps the state, as it keeps libucm's. */
MH_HIDDEN void mh_ucm_fork_child(void);

/* From the hooks, in the calling thread: an ALLOC after the call, a FREE
 * before the real free (MEMHOOK_MEM_* types). */
MH_HIDDEN void mh_ucm_alloc(uint64_t addr, uint64_t size, int mem_type);
MH_HIDDEN void mh_ucm_free(uint64_t addr, uint64_t size, int mem_type);

#endif
