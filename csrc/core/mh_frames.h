/*
 * mh_frames.h - safe frame-pointer walks from a hook's own frame.
 *
 * The outermost recording wrapper notes its own return address and frame
 * (MH_CALLER_NOTE); an event's caller (csrc/cuda/caller.h) and the trace's
 * --stacks records (csrc/trace/) both walk up from that site.  Generic:
 * nothing here knows CUDA.
 *
 * A walk reads only words inside the calling thread's stack, between the
 * noted frame and the stack's top, each frame strictly above the one
 * before: every read is of mapped memory whatever the chain holds (code
 * built without frame pointers, garbage in %rbp), and the walk ends.  The
 * bounds come from pthread_getattr_np once per thread, at its first walk
 * (it may allocate); every later walk is loads and compares - no malloc,
 * no lock, no system call.
 */
#ifndef MEMHOOK_MH_FRAMES_H
#define MEMHOOK_MH_FRAMES_H

#include <stdbool.h>
#include <stdint.h>

#include "mh_hook_thread.h"
#include "mh_visibility.h"

/* Per thread: the site of the recording call in progress (an
 * mh_caller_site, with the hook path's other thread-locals: mh_hook_thread.h). */
#define mh_caller_tl (mh_hook_tl.caller)

/* In a wrapper, once it knows it records.  A macro: the builtins must run
 * in the wrapper's own frame. */
#define MH_CALLER_NOTE()                                                     \
    do {                                                                     \
        mh_caller_tl.ra = (uintptr_t)__builtin_return_address(0);           \
        mh_caller_tl.fp = (uintptr_t)__builtin_frame_address(0);            \
    } while (0)

/* The first return address at or above `site` for which `inside` is
 * false, or the last one the chain reaches (at most 64 frames up). */
MH_HIDDEN uint64_t mh_frames_first_outside(const mh_caller_site *site,
                                           bool (*inside)(uintptr_t ra));

/* Up to `depth` return addresses, innermost first, starting with the
 * site's own return address.  The walk ends at the first return address
 * for which `is_code` is false (a saved %rbp of code built without frame
 * pointers leads to a word that is no return address: csrc/core/mh_text.h),
 * which is not reported.  Returns how many. */
MH_HIDDEN unsigned mh_frames_stack(const mh_caller_site *site, uint64_t *out, unsigned depth,
                                   bool (*is_code)(uintptr_t ra));

#endif
