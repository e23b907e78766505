/*
 * ucm_keep.h - the feed-only hooks memhook leaves on UCX's CUDA entry points
 * when it hands back and UCX cannot install its own hooks (ucm_keep.c; when
 * is ucm_feed.c's decision, docs/design/ucx-coexistence.md argues it).
 *
 * Every function here is called with ucm_feed.c's attach lock held, itself
 * taken under the install lock (csrc/core/mh_lock_order.h).
 */
#ifndef MEMHOOK_UCM_KEEP_H
#define MEMHOOK_UCM_KEEP_H

#include <stdbool.h>
#include <stddef.h>

#include "mh_visibility.h"

/* Before UCX tries its own hooks: note UCX's entry points in the loaded
 * driver and their first bytes, so that an entry UCX then patched (UCX can
 * patch some and refuse the next) is told from one it left alone. */
MH_HIDDEN void mh_ucm_keep_note(void);
/* UCX refused (`ucx_status`): patch every noted entry whose bytes are
 * still those noted with a hook that only dispatches UCX's MEM_TYPE events
 * (where memhook's own patch could not leave, its wrapper passes the calls
 * to that hook instead).  Returns how many entries are kept. */
MH_HIDDEN int mh_ucm_keep_install(int ucx_status);
/* memhook uninstalled again while its feed-only hooks were in: an entry
 * whose own patch has left since (its removal refused before) gets a
 * feed-only hook of its own.  Returns how many did. */
MH_HIDDEN int mh_ucm_keep_refresh(void);
/* memhook installs again: the kept hooks come out (memhook's wrappers feed
 * UCX from now on).  One another patcher has since written over stays, and
 * only passes calls on. */
MH_HIDDEN void mh_ucm_keep_drop(void);

/* Whether UCX's own hook is at one of its entry points: UCX hooked some and
 * refused another at a hand-back, and never takes its hooks out.  From then
 * on UCX is fed at the entries, never by memhook's wrappers (a wrapper's
 * call, or the runtime call around it, would reach UCX twice where UCX's
 * hook is in the chain): each entry UCX lacks keeps a hook of this file,
 * installed or not, and every call there reaches UCX once. */
MH_HIDDEN bool mh_ucm_keep_beside(void);
/* Beside UCX's own hooks, before memhook's bistro patches the entries: the
 * feed-only hooks at the entries come out (mh_ucm_keep_settle puts them
 * back, behind memhook's wrappers where its patches went in). */
MH_HIDDEN void mh_ucm_keep_lift(void);
/* Beside UCX's own hooks, after memhook's patches went in or out: every
 * entry UCX lacks gets its feed-only hook, between memhook's wrapper and
 * trampoline where memhook's patch is at the entry, else at the entry.
 * Returns how many it placed (each was unfed for a moment before). */
MH_HIDDEN int mh_ucm_keep_settle(void);
/* Whether `name` is one of UCX's entry points that the hand-back left in a
 * state status() must explain (`installed`: memhook is installed beside
 * UCX's own hooks); fills why then. */
MH_HIDDEN bool mh_ucm_keep_reason(const char *name, bool installed, char *why, size_t why_len);

#endif
