/*
 * pair_bench_common.h - what the alloc+free pair benches (hook_bench.c,
 * ucx_side_by_side.c) share: resolving a symbol or dying, checking a
 * CUresult or dying, the clock, device 0's primary context, and the drainer thread that empties
 * memhook's queue while the pairs run (as Python's drain would, so the
 * queue stays small and the measured thread pays only for recording).
 *
 * Set BENCH_NAME before including it: it prefixes every message.
 */
#ifndef MEMHOOK_PAIR_BENCH_COMMON_H
#define MEMHOOK_PAIR_BENCH_COMMON_H

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "memhook/cuda_abi.h"
#include "memhook/memhook.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME before including pair_bench_common.h"
#endif

static void *need(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (p == NULL) {
        fprintf(stderr, BENCH_NAME ": %s not found: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

static void check(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, BENCH_NAME ": %s failed with CUresult %d\n", what, (int)r);
        exit(3);
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* cuInit, device 0's primary context made current in this thread; the
 * driver is dlopened (its entry points looked up in `cuda`).  Inline: not
 * every bench that includes this header makes its own context
 * (ucx_side_by_side.c links the driver and lets each library's setup do it). */
static inline CUcontext bench_primary_context(void *cuda)
{
    CUresult (*init)(unsigned) = need(cuda, "cuInit");
    CUresult (*device_get)(CUdevice *, int) = need(cuda, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = need(cuda, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = need(cuda, "cuCtxSetCurrent");
    CUdevice dev;
    CUcontext ctx;
    check(init(0), "cuInit");
    check(device_get(&dev, 0), "cuDeviceGet");
    check(retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(set_current(ctx), "cuCtxSetCurrent");
    return ctx;
}

/* The drainer's state.  Global because the drainer thread and main share
 * it; atomics because they do.  p_drain: memhook_events_drain, resolved by
 * the bench (memhook is dlopened, not linked); p_drain_background:
 * memhook_events_drain_background where the core has it (a background
 * drainer's call, which stays off the lines producers write next), else
 * p_drain - set it with drainer_resolve. */
static size_t (*p_drain)(memhook_event *, size_t);
static size_t (*p_drain_background)(memhook_event *, size_t);
static atomic_int g_drainer_stop;
static atomic_ullong g_drained;  /* calls' events (ALLOC/FREE) drained */
static atomic_ullong g_drainer_cpu_ns;  /* the drainer thread's CPU time, at its end */
static atomic_ullong g_drainer_calls;   /* its drain calls that returned events */
static atomic_ullong g_markers;  /* kind-0 markers drained (the hooks' gaps
                                    at each install switch, driver unloads):
                                    the core records them, no call made them */

/* Count buf[0 .. n)'s markers into g_markers; returns the calls' events. */
static inline size_t count_calls(const memhook_event *buf, size_t n)
{
    size_t markers = 0;
    for (size_t i = 0; i < n; i++)
        markers += buf[i].kind == 0;
    if (markers)
        atomic_fetch_add(&g_markers, markers);
    return n - markers;
}

static inline void drainer_resolve(void *mh)
{
    p_drain_background = (size_t (*)(memhook_event *, size_t))dlsym(
        mh, "memhook_events_drain_background");
    if (p_drain_background == NULL)
        p_drain_background = p_drain;  /* a core from before it (--compare) */
}

/* MEMHOOK_BENCH_DRAINER_BURN_NS=N: the drainer also spins N ns of its own
 * CPU time per event it drained, touching nothing the producers use - to
 * tell what the drain's CPU time costs the measured thread (on a VM whose
 * two vCPUs are one core's hyperthreads) from what its memory traffic does. */
static void drainer_burn(size_t events)
{
    static long burn_ns = -1;
    if (burn_ns < 0) {
        const char *e = getenv("MEMHOOK_BENCH_DRAINER_BURN_NS");
        burn_ns = e != NULL ? atol(e) : 0;
    }
    if (burn_ns <= 0 || events == 0)
        return;
    struct timespec t0, t;  /* (the vDSO's clock: no system call in the loop) */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long long want = (long long)burn_ns * (long long)events;
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) < want);
}

static void *drainer(void *arg)
{
    (void)arg;
    enum { BATCH = 4096 };
    static memhook_event buf[BATCH];
    for (;;) {
        size_t n = (p_drain_background != NULL ? p_drain_background : p_drain)(buf, BATCH);
        atomic_fetch_add(&g_drained, count_calls(buf, n));
        drainer_burn(n);
        if (n != 0)
            atomic_fetch_add(&g_drainer_calls, 1);
        if (n == BATCH)
            continue;
        if (atomic_load(&g_drainer_stop)) {
            /* Its CPU time: on a small machine what the drainer spends per
             * event is taken from the measured thread's core. */
            struct timespec cpu;
            if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
                atomic_store(&g_drainer_cpu_ns,
                             (unsigned long long)cpu.tv_sec * 1000000000ull +
                                 (unsigned long long)cpu.tv_nsec);
            break;
        }
        /* Sleep rather than spin: a spinning consumer takes a core from the
         * measured thread on a small machine.  50 us lets ~1k events pile
         * up at most. */
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

#endif
