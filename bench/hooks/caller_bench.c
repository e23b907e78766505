/*
 * caller_bench.c - what caller capture adds to an event, measured beside
 * the same event without it in one run (bench/hooks/caller_bench.py builds and
 * runs it).
 *
 * Three stand-ins for a wrapper + write_event, each noinline and writing a
 * 64-byte event into a ring:
 *   plain    the event's fields, no caller;
 *   caller   the same plus MH_CALLER_NOTE (which also gives the function a
 *            frame pointer) and e->caller = mh_caller_get(), with the
 *            return address outside CUDA's text (the common case: one
 *            compare against the bounding box of CUDA's text ranges; then
 *            with the address inside the box, the loop over the ranges);
 *   walk     the same called from a function registered as CUDA text, so
 *            mh_caller_get walks one frame up (bistro seeing libcudart).
 * Best of several rounds of N calls each, ns per event.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "caller.h"
#include "mh_objects.h"
#include "memhook/memhook.h"

/* caller.c registers its refresh of CUDA's text ranges with the loaded-
 * objects observers (csrc/core/mh_objects.c); this bench sets the ranges
 * itself. */
void mh_objects_observe(mh_objects_observer fn) { (void)fn; }

static memhook_event ring[256];
static unsigned at;

/* The event's fields other than the caller, the same in every stand-in. */
static inline __attribute__((always_inline)) memhook_event *fill(uint64_t a)
{
    memhook_event *e = &ring[at++ & 255];
    e->address = a;
    e->size = 64;
    e->kind = 1;
    e->function = 3;
    e->pid = 1;
    e->tid = 2;
    return e;
}

__attribute__((noinline)) static void plain(uint64_t a)
{
    fill(a);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void with_caller(uint64_t a)
{
    MH_CALLER_NOTE();
    memhook_event *e = fill(a);
    e->caller = mh_caller_get();
    __asm__ volatile("" ::: "memory");
}

/* Stands for CUDA's code calling the hooked entry (registered below). */
__attribute__((noinline, aligned(64))) static void cuda_like(uint64_t a)
{
    with_caller(a);
    __asm__ volatile("" ::: "memory");
}
__attribute__((noinline)) static void cuda_like_end(void) { __asm__ volatile(""); }

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

#define ROUNDS 15

static double best(void (*f)(uint64_t), long n)
{
    double b = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++)
            f((uint64_t)i);
        double ns = (now_ns() - t0) / n;
        if (ns < b)
            b = ns;
    }
    return b;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    /* Two unrelated ranges, as an install with libcuda and libcudart
     * loaded leaves (one text segment each), the caller outside their
     * bounding box (entry 0). */
    for (int i = 1; i <= 2; i++) {
        mh_cuda_text[0][i].lo = 0x1000 + i * 0x10000;
        mh_cuda_text[0][i].hi = 0x2000 + i * 0x10000;
    }
    mh_cuda_text[0][0] = (mh_text_range){0x11000, 0x22000};
    __atomic_store_n(&mh_cuda_text_state, 2u, __ATOMIC_RELEASE);
    double p = best(plain, n), c = best(with_caller, n);
    /* A caller inside the box but in neither range (a library loaded
     * between libcudart and libcuda): the loop runs. */
    mh_cuda_text[0][0] = (mh_text_range){0x1000, UINTPTR_MAX};
    double cb = best(with_caller, n);
    mh_cuda_text[0][3].lo = (uintptr_t)cuda_like;
    mh_cuda_text[0][3].hi = (uintptr_t)cuda_like_end;
    if (mh_cuda_text[0][3].hi <= mh_cuda_text[0][3].lo)
        mh_cuda_text[0][3].hi = mh_cuda_text[0][3].lo + 64;
    __atomic_store_n(&mh_cuda_text_state, 3u, __ATOMIC_RELEASE);
    double w = best(cuda_like, n);
    mh_cuda_text[0][3].lo = mh_cuda_text[0][3].hi = 0;
    double wp = best(cuda_like, n);  /* the same call chain, no walk */
    printf("caller_bench: %ld events a round, best of %d rounds, ns per event\n", n, ROUNDS);
    printf("  event without caller           %6.2f\n", p);
    printf("  event with caller (return addr) %6.2f   added %+.2f ns (goal <= 2)\n", c, c - p);
    printf("  with caller, inside the box     %6.2f   added %+.2f ns (the range loop)\n", cb,
           cb - p);
    printf("  via a CUDA-text frame, no walk  %6.2f\n", wp);
    printf("  via a CUDA-text frame, walk     %6.2f   added %+.2f ns by the one-frame walk\n", w,
           w - wp);
    printf("RESULT plain_ns=%.2f caller_ns=%.2f added_ns=%.2f boxed_added_ns=%.2f "
           "walk_added_ns=%.2f\n", p, c, c - p, cb - p, w - wp);
    return 0;
}
