/*
 * caller.h - who called into CUDA: the `caller` of every event.
 *
 * The outermost recording wrapper notes its own return address and frame
 * (MH_CALLER_NOTE, in MH_WRAPPER_ENTER after mh_record_begin): a wrapper
 * is reached by a jump from a patched entry, a rewritten GOT slot or a
 * pointer dlsym/cuGetProcAddress handed out, never by a call of memhook's,
 * so that return address is the code that called CUDA.  Nested wrappers
 * (the runtime reaching the hooked driver) do not note: one event, named at
 * the outermost layer.
 *
 * When that address lies inside CUDA's own libraries (libcudart calling the
 * bistro-patched driver entry, the runtime not hooked) the event names the
 * first frame outside them, found by walking frame pointers
 * (mh_caller_walk): every frame is checked against the thread's stack
 * bounds before it is read, so a chain through code built without frame
 * pointers stops (naming the last CUDA frame) and never faults.
 *
 * Cost where the return address is enough: two TLS stores in the wrapper
 * and a compare against a handful of text ranges at the event.
 */
#ifndef MEMHOOK_CALLER_H
#define MEMHOOK_CALLER_H

#include <stdbool.h>
#include <stdint.h>

#include "mh_frames.h"  /* the site, MH_CALLER_NOTE and the safe walk */
#include "mh_visibility.h"

/* The text ranges of CUDA's own libraries (libcuda, libcudart), a snapshot
 * refreshed whenever the loaded objects change (mh_objects.h).  Two buffers and one packed word
 * (buffer << 8 | count): a reader that races a refresh reads a complete
 * older or newer set - unless two refreshes pass during its few loads, when
 * it may misclassify one event (never fault: the buffers are static). */
#define MH_CUDA_RANGES 16
typedef struct mh_text_range {
    uintptr_t lo, hi;
} mh_text_range;
/* Entry 0 of each buffer bounds all the others: an address outside it -
 * nearly every caller - costs one compare instead of a loop over the
 * ranges (bench/hooks/caller_bench.py measures both). */
MH_HIDDEN extern mh_text_range mh_cuda_text[2][MH_CUDA_RANGES + 1];
MH_HIDDEN extern _Atomic uint32_t mh_cuda_text_state;

static inline bool mh_in_cuda_text(uintptr_t a)
{
    uint32_t s = __atomic_load_n(&mh_cuda_text_state, __ATOMIC_ACQUIRE);
    const mh_text_range *r = mh_cuda_text[s >> 8];
    if (__builtin_expect(a - r[0].lo >= r[0].hi - r[0].lo, 1))
        return false;
    for (uint32_t i = 1, n = s & 0xff; i <= n; i++)
        if (a - r[i].lo < r[i].hi - r[i].lo)
            return true;
    return false;
}

/* Out of line: the first frame outside CUDA's libraries above `site`, or
 * the last one inside them where the chain ends first. */
MH_HIDDEN uint64_t mh_caller_walk(const mh_caller_site *site);
/* fork() child: the refresh lock made afresh (csrc/cuda/fork_order.c). */
MH_HIDDEN void mh_caller_fork_child(void);
/* At load (csrc/cuda/startup_order.c): CUDA's text ranges kept current as
 * objects come and go (an observer of mh_objects.h). */
MH_HIDDEN void mh_caller_at_load(void);

/* The caller of the event being written (emit.c). */
static inline uint64_t mh_caller_get(void)
{
    uintptr_t ra = mh_caller_tl.ra;
    if (__builtin_expect(!mh_in_cuda_text(ra), 1))
        return ra;
    return mh_caller_walk(&mh_caller_tl);
}

#endif
