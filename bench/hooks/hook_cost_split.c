/*
 * hook_cost_split.c - one core's hooked alloc+free pair beside the original
 * it wraps, in one process: bench/hooks/hook_cost_split.py runs it once per core
 * variant (the real core, and the core with one piece of the hook path
 * left out) to say where the hooked pair's ns go.
 *
 *   hook_cost_split LIBMEMHOOK LIBCUDA [drainer|same] [precise|exact]
 *
 * Installs bistro, then alternates blocks of BLOCK cuMemAllocAsync +
 * cuMemFreeAsync pairs through the hooked entry points and through the
 * originals their wrappers call (memhook_hooks_original), ABBA, on one
 * non-blocking stream, timing each block with the TSC.  The queue is
 * drained by a thread that sleeps 50 us between drains, as Python's feeder
 * would ("drainer"), or by this thread between blocks, outside the timing
 * ("same": no other core touches the lanes).  "precise": events get
 * precise timestamps, as under memhook trace or for a subscriber that asked
 * (memhook_events_precise_time); without it, coarse ones, as everywhere
 * else.  Prints the mean and the
 * median added ns per pair over all blocks; the mean includes the rare
 * slow blocks (a segment mapped, the drainer's lines taken back), the
 * median does not.
 */
#include <pthread.h>
#include <string.h>
#include <x86intrin.h>

#define BENCH_NAME "hook_cost_split"
#include "../common/pair_bench_common.h"

#define BLOCK 128
#define BLOCKS 4000

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static void drain_all(void)
{
    static memhook_event buf[4096];
    while (p_drain(buf, 4096) == 4096) {
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The TSC's ns per tick, over 50 ms of the monotonic clock. */
static double ns_per_tick(void)
{
    uint64_t n0 = now_ns(), t0 = __rdtsc();
    struct timespec pause = {0, 50000000};
    nanosleep(&pause, NULL);
    uint64_t n1 = now_ns(), t1 = __rdtsc();
    return (double)(n1 - n0) / (double)(t1 - t0);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: hook_cost_split LIBMEMHOOK LIBCUDA [drainer|same] "
                        "[precise|exact]\n");
        return 2;
    }
    int same = argc > 3 && strcmp(argv[3], "same") == 0;
    int exact = argc > 4 && strcmp(argv[4], "exact") == 0;
    int precise = exact || (argc > 4 && strcmp(argv[4], "precise") == 0);
    void *cu = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
    void *mh = cu != NULL ? dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) : NULL;
    if (mh == NULL) {
        fprintf(stderr, "hook_cost_split: %s\n", dlerror());
        return 2;
    }
    CUresult (*stream_create)(CUstream *, unsigned) = need(cu, "cuStreamCreate");
    CUstream stream;
    bench_primary_context(cu);
    check(stream_create(&stream, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");

    int (*install)(unsigned, char *, size_t) = need(mh, "memhook_hooks_install");
    void *(*original)(const char *) = need(mh, "memhook_hooks_original");
    p_drain = need(mh, "memhook_events_drain");
    drainer_resolve(mh);
    if (exact) {
        /* FREEs sized in the hook (subscribe(exact=True), the trace); a core
         * from before the switch sizes them there always. */
        int (*want_exact)(int) = (int (*)(int))dlsym(mh, "memhook_events_exact_sizes");
        if (want_exact != NULL)
            want_exact(1);
    }
    if (precise) {
        /* A core from before the switch (--compare) has precise time always. */
        int (*want_precise)(int) = (int (*)(int))dlsym(mh, "memhook_events_precise_time");
        if (want_precise != NULL)
            want_precise(1);
    }
    char why[512] = "";
    if (install(MEMHOOK_MODE_BISTRO, why, sizeof why) != 0) {
        fprintf(stderr, "hook_cost_split: install failed: %s\n", why);
        return 4;
    }
    alloc_async_fn hooked_alloc = (alloc_async_fn)need(cu, "cuMemAllocAsync");
    free_async_fn hooked_free = (free_async_fn)need(cu, "cuMemFreeAsync");
    alloc_async_fn orig_alloc = (alloc_async_fn)original("cuMemAllocAsync");
    free_async_fn orig_free = (free_async_fn)original("cuMemFreeAsync");
    if (orig_alloc == NULL || orig_free == NULL) {
        fprintf(stderr, "hook_cost_split: memhook_hooks_original has no answer\n");
        return 4;
    }
    pthread_t thread;
    if (!same && pthread_create(&thread, NULL, drainer, NULL) != 0)
        return 2;

    static double hooked[BLOCKS], orig[BLOCKS];
    CUdeviceptr p;
    for (int b = 0; b < BLOCKS; b++) {
        for (int side = 0; side < 2; side++) {
            int hook = (side == 0) == (b % 2 == 0);
            alloc_async_fn a = hook ? hooked_alloc : orig_alloc;
            free_async_fn f = hook ? hooked_free : orig_free;
            uint64_t t0 = __rdtsc();
            for (int i = 0; i < BLOCK; i++) {
                check(a(&p, 64, stream), "cuMemAllocAsync");
                check(f(p, stream), "cuMemFreeAsync");
            }
            (hook ? hooked : orig)[b] = (double)(__rdtsc() - t0) / BLOCK;
            if (same)
                drain_all();
        }
    }
    if (!same) {
        atomic_store(&g_drainer_stop, 1);
        pthread_join(thread, NULL);
    }
    drain_all();
    double tick = ns_per_tick(), mean_added = 0, mean_orig = 0;  /* ns per TSC tick */
    for (int b = 0; b < BLOCKS; b++) {
        mean_added += hooked[b] - orig[b];
        mean_orig += orig[b];
    }
    qsort(hooked, BLOCKS, sizeof *hooked, cmp_double);
    qsort(orig, BLOCKS, sizeof *orig, cmp_double);
    printf("RESULT mean_added_ns=%.1f median_added_ns=%.1f original_ns=%.1f\n",
           mean_added / BLOCKS * tick, (hooked[BLOCKS / 2] - orig[BLOCKS / 2]) * tick,
           mean_orig / BLOCKS * tick);
    return 0;
}
