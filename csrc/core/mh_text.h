/*
 * mh_text.h - "is this address in some loaded object's code?", answered in
 * a hook.
 *
 * A frame-pointer walk through code built without frame pointers (CPython
 * before 3.12, most of libc) reads a saved %rbp that is just a register
 * value: the word above it is whatever the stack held, often another stack
 * address.  --stacks ends its walk at the first return address that is not
 * in executable text (csrc/core/mh_frames.h), so such a word is never
 * reported as a frame.
 *
 * The text is a snapshot of every loaded object's executable PT_LOAD
 * segments (dl_iterate_phdr), sorted and merged, refreshed whenever the
 * loaded objects change (an observer of mh_objects.h, once mh_text_watch
 * was called).  Code the loader does not know (JIT output in anonymous
 * memory) is not in it: a walk ends there, which loses frames, never names
 * a wrong one.  A lookup is loads and compares (a binary search): no lock,
 * no system call.
 */
#ifndef MEMHOOK_MH_TEXT_H
#define MEMHOOK_MH_TEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "mh_visibility.h"

/* Keep the snapshot current from now on and take the first one.  At load
 * (mh_objects_observe's rule); idempotent. */
MH_HIDDEN void mh_text_watch(void);

/* Whether `a` lies in the executable text of an object loaded at the last
 * refresh.  False before the first snapshot, and for a lookup that raced
 * two refreshes (the walk then ends early). */
MH_HIDDEN bool mh_text_contains(uintptr_t a);

/* fork() child: the refresh lock made afresh, a refresh another thread was
 * in left behind (its lock is not held across fork: csrc/core/
 * mh_lock_order.h).  Called by csrc/cuda/fork_order.c, never registered
 * here. */
MH_HIDDEN void mh_text_fork_child(void);

#endif
