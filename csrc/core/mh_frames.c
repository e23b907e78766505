/*
 * mh_frames.c - the frame-pointer walks of mh_frames.h.
 */
#include <pthread.h>

#include "mh_frames.h"

/* The calling thread's stack: [lo, hi); state 0 unknown, 1 known, 2 none.
 * Per thread because stacks are. */
static __thread struct {
    uintptr_t lo, hi;
    int state;
} t_stack __attribute__((tls_model("initial-exec")));

static bool stack_bounds(uintptr_t *lo, uintptr_t *hi)
{
    if (__builtin_expect(t_stack.state == 0, 0)) {
        pthread_attr_t attr;
        void *addr = NULL;
        size_t size = 0;
        t_stack.state = 2;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &size) == 0 && size != 0) {
                t_stack.lo = (uintptr_t)addr;
                t_stack.hi = (uintptr_t)addr + size;
                t_stack.state = 1;
            }
            pthread_attr_destroy(&attr);
        }
    }
    *lo = t_stack.lo;
    *hi = t_stack.hi;
    return t_stack.state == 1;
}

/* The frame above `fp`, or 0 where the chain leaves the stack or does not
 * climb: fp must be a word-aligned frame strictly below the next. */
static uintptr_t next_frame(uintptr_t fp, uintptr_t hi)
{
    uintptr_t up = ((const uintptr_t *)fp)[0];
    if (up <= fp || (up & 7) != 0 || up > hi - 2 * sizeof(uintptr_t))
        return 0;
    return up;
}

/* Step *fp to the frame above it and return that frame's return address,
 * or 0 where the chain ends (leaves the stack, does not climb, or holds a
 * null return address). */
static uintptr_t frame_up(uintptr_t *fp, uintptr_t hi)
{
    *fp = next_frame(*fp, hi);
    return *fp == 0 ? 0 : ((const uintptr_t *)*fp)[1];
}

static bool frame_ok(uintptr_t fp, uintptr_t lo, uintptr_t hi)
{
    return fp >= lo && (fp & 7) == 0 && fp <= hi - 2 * sizeof(uintptr_t);
}

uint64_t mh_frames_first_outside(const mh_caller_site *site, bool (*inside)(uintptr_t ra))
{
    uintptr_t lo, hi;
    uintptr_t ra = site->ra, fp = site->fp;
    if (!stack_bounds(&lo, &hi) || !frame_ok(fp, lo, hi))
        return ra;
    /* The wrapper's frame is below every frame the walk reads. */
    for (int i = 0; i < 64 && inside(ra); i++) {
        uintptr_t up_ra = frame_up(&fp, hi);
        if (up_ra == 0)
            break;
        ra = up_ra;
    }
    return ra;
}

unsigned mh_frames_stack(const mh_caller_site *site, uint64_t *out, unsigned depth,
                         bool (*is_code)(uintptr_t ra))
{
    uintptr_t lo, hi;
    uintptr_t fp = site->fp;
    unsigned n = 0;
    if (depth == 0)
        return 0;
    out[n++] = site->ra;
    if (!stack_bounds(&lo, &hi) || !frame_ok(fp, lo, hi))
        return n;
    while (n < depth) {
        uintptr_t ra = frame_up(&fp, hi);
        if (ra == 0 || !is_code(ra))
            break;
        out[n++] = ra;
    }
    return n;
}
