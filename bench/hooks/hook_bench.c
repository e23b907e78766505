/*
 * hook_bench.c - the ns memhook's CUDA hooks add per alloc+free pair.
 *
 * The same pairs are timed unhooked and hooked in the same run.  Rounds are
 * interleaved (unhooked, hooked, then hooked, unhooked, ...) so that drift -
 * frequency, a neighbour on a shared VM - hits both sides alike; each
 * figure is the median over rounds of the ns per pair.  Before a hooked
 * round the mode is installed, after it uninstalled; the entry points are
 * looked up with dlsym after each change, as an application that resolves
 * after memhook would (reloc answers the wrapper then; bistro patches the
 * entry itself).  A drainer thread empties the event queue while producers
 * run, so the queue stays small as it would under Python's drain; the
 * events it drained are checked against the count the pairs must produce.
 *
 *   hook_bench --libcuda PATH --libmemhook PATH [options]   (the simulator)
 *   hook_bench --real --libmemhook PATH [options]           (system libcuda.so.1)
 *
 * Options:
 *   --api sync,async      cuMemAlloc_v2+cuMemFree_v2 and/or
 *                         cuMemAllocAsync+cuMemFreeAsync (default both)
 *   --modes LIST          of bistro | reloc | bistro+reloc (default all three)
 *   --threads LIST        producer threads (default 1,2)
 *   --rounds N            rounds per side (default 21)
 *   --pairs N             pairs per thread per round (default 20000)
 *   --size BYTES          bytes per allocation (default 64)
 *   --no-drain            no drainer thread (the queue grows; drained after each round)
 *   --no-profile          skip the timing of the pieces (print_profile)
 *   --no-paired           skip the paired in-thread measurement (paired_work)
 *   --paired-block N      pairs per block there (default 500; 20 blocks a round)
 *   --exact               exact sizes (memhook_events_exact_sizes: FREEs sized in the
 *                         hook, precise stamps), as subscribe(exact=True)
 *   --precise             precise timestamps (memhook_events_precise_time), as under
 *                         memhook trace; without it, the coarse ones every other
 *                         process gets
 *   --goal-ns N           "goal met" when 1 thread adds at most N ns (default 60)
 *   --goal-pct P          ... or at most P percent (replaces --goal-ns)
 *   --label TEXT          what the driver is, for the header line
 *
 * Environment: MEMHOOK_BENCH_DRAINER_BURN_NS=N has the drainer spin N ns (user
 * space only) per event it drained (bench/common/pair_bench_common.h).
 *
 * Output: a table, then one `RESULT key=value ...` line per row for scripts;
 * at the end the drainer's CPU time per event drained.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memhook/cuda_abi.h"
#include "memhook/memhook.h"

#define BENCH_NAME "hook_bench"
#include "../common/pair_bench_common.h"

/* ---- what we call, looked up at run time ---- */

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static void *g_cuda;
static CUcontext g_ctx;
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned int);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuStreamSynchronize)(CUstream);

static int (*p_install)(unsigned, char *, size_t);
static int (*p_uninstall)(void);
static void (*p_stats)(memhook_queue_stats *);

typedef struct entry_points {
    alloc_fn alloc;
    free_fn free;
    alloc_async_fn alloc_async;
    free_async_fn free_async;
} entry_points;

/* The entry points as the application would see them now (re-looked-up
 * after each install/uninstall). */
static entry_points g_fn;
/* While hooks are installed: what their wrappers call (bistro's
 * trampoline, or the real definition) - the same driver code, no hook. */
static entry_points g_orig;
static void *(*p_original)(const char *);

static void resolve_entry_points(void)
{
    g_fn.alloc = (alloc_fn)need(g_cuda, "cuMemAlloc_v2");
    g_fn.free = (free_fn)need(g_cuda, "cuMemFree_v2");
    g_fn.alloc_async = (alloc_async_fn)need(g_cuda, "cuMemAllocAsync");
    g_fn.free_async = (free_async_fn)need(g_cuda, "cuMemFreeAsync");
}

/* ---- the drainer ---- */

static int g_drainer_on;
/* Events that are not the pairs' (the profile's own records). */
static uint64_t extra_events;

static uint64_t drain_all(void)
{
    static memhook_event buf[4096];
    uint64_t total = 0;
    size_t n;
    while ((n = p_drain(buf, 4096)) != 0)
        total += count_calls(buf, n);
    atomic_fetch_add(&g_drained, total);
    return total;
}

/* ---- producers ---- */

enum api { API_SYNC, API_ASYNC };
static const char *const api_name[] = {"sync", "async"};
static const char *const api_label[] = {"cuMemAlloc_v2+cuMemFree_v2",
                                        "cuMemAllocAsync+cuMemFreeAsync"};

typedef struct worker {
    pthread_t thread;
    enum api api;
    long pairs;
    size_t size;
    pthread_barrier_t *start;
    double ns_per_pair;
} worker;

static void run_pairs_via(const entry_points *via, enum api api, long n, size_t size,
                          CUstream s)
{
    CUdeviceptr p;
    if (api == API_SYNC) {
        alloc_fn a = via->alloc;
        free_fn f = via->free;
        for (long i = 0; i < n; i++) {
            check(a(&p, size), "cuMemAlloc_v2");
            check(f(p), "cuMemFree_v2");
        }
    } else {
        alloc_async_fn a = via->alloc_async;
        free_async_fn f = via->free_async;
        for (long i = 0; i < n; i++) {
            check(a(&p, size, s), "cuMemAllocAsync");
            check(f(p, s), "cuMemFreeAsync");
        }
    }
}

static void run_pairs(enum api api, long n, size_t size, CUstream s)
{
    run_pairs_via(&g_fn, api, n, size, s);
}

static void *work(void *arg)
{
    worker *w = arg;
    check(p_cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
    CUstream s = NULL;
    if (w->api == API_ASYNC)
        check(p_cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
    long warm = w->pairs / 20 + 1;
    run_pairs(w->api, warm, w->size, s);
    if (s)
        check(p_cuStreamSynchronize(s), "cuStreamSynchronize");
    pthread_barrier_wait(w->start);
    uint64_t t0 = now_ns();
    run_pairs(w->api, w->pairs, w->size, s);
    uint64_t t1 = now_ns();
    w->ns_per_pair = (double)(t1 - t0) / (double)w->pairs;
    if (s) {
        check(p_cuStreamSynchronize(s), "cuStreamSynchronize");
        check(p_cuStreamDestroy(s), "cuStreamDestroy");
    }
    return NULL;
}

/* One round: `threads` producers, each timing its own pairs; the round's
 * figure is their mean ns per pair (the latency each thread saw). */
static double round_ns(enum api api, int threads, long pairs, size_t size)
{
    worker w[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        w[t] = (worker){.api = api, .pairs = pairs, .size = size, .start = &start};
        if (pthread_create(&w[t].thread, NULL, work, &w[t]) != 0) {
            perror("pthread_create");
            exit(2);
        }
    }
    double sum = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(w[t].thread, NULL);
        sum += w[t].ns_per_pair;
    }
    pthread_barrier_destroy(&start);
    return sum / threads;
}

/* ---- paired in one thread ----
 *
 * The rounds above install and uninstall between rounds, and each round is
 * a fresh thread (and stream): on the real driver the unhooked pair itself
 * wanders from round to round (610-1020 ns for cuMemAllocAsync+FreeAsync on
 * the H200 host) by more than the hooks cost.  Here, with the hooks
 * installed, one thread alternates blocks of pairs through the hooked entry
 * points and through the originals their wrappers call
 * (memhook_hooks_original), ABBA within each round: both sides share the
 * driver's state, the stream, the core and the moment.  The original side
 * runs the same driver code (through bistro's trampoline when the entry is
 * patched: one extra jump), so hooked minus original is what the hooks add. */

typedef struct paired_job {
    enum api api;
    int rounds;
    long blocks, block;
    size_t size;
    double added[512], base[512];
} paired_job;

static void *paired_work(void *arg)
{
    paired_job *j = arg;
    check(p_cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
    CUstream s = NULL;
    if (j->api == API_ASYNC)
        check(p_cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
    run_pairs_via(&g_fn, j->api, j->block, j->size, s);  /* warm both paths */
    run_pairs_via(&g_orig, j->api, j->block, j->size, s);
    for (int r = 0; r < j->rounds; r++) {
        uint64_t hooked_ns = 0, orig_ns = 0;
        for (long b = 0; b < j->blocks; b++) {
            for (int side = 0; side < 2; side++) {
                int hooked = (side == 0) == (b % 2 == 0);
                uint64_t t0 = now_ns();
                run_pairs_via(hooked ? &g_fn : &g_orig, j->api, j->block, j->size, s);
                uint64_t t = now_ns() - t0;
                if (hooked)
                    hooked_ns += t;
                else
                    orig_ns += t;
            }
        }
        double pairs = (double)j->blocks * (double)j->block;
        j->added[r] = ((double)hooked_ns - (double)orig_ns) / pairs;
        j->base[r] = (double)orig_ns / pairs;
    }
    if (s) {
        check(p_cuStreamSynchronize(s), "cuStreamSynchronize");
        check(p_cuStreamDestroy(s), "cuStreamDestroy");
    }
    return NULL;
}

/* Hooked pairs the job makes (each gives two events). */
static uint64_t paired_hooked_pairs(const paired_job *j)
{
    return (uint64_t)j->block + (uint64_t)j->rounds * (uint64_t)j->blocks * (uint64_t)j->block;
}

static void resolve_originals(void)
{
    g_orig.alloc = (alloc_fn)p_original("cuMemAlloc_v2");
    g_orig.free = (free_fn)p_original("cuMemFree_v2");
    g_orig.alloc_async = (alloc_async_fn)p_original("cuMemAllocAsync");
    g_orig.free_async = (free_async_fn)p_original("cuMemFreeAsync");
    if (!g_orig.alloc || !g_orig.free || !g_orig.alloc_async || !g_orig.free_async) {
        fprintf(stderr, "hook_bench: memhook_hooks_original has no answer for a pair's "
                        "function\n");
        exit(4);
    }
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(const double *v, int n, double q)
{
    static double s[8 * 512];  /* a paired run pools up to 8 threads' rounds */
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    double pos = q * (n - 1);
    int i = (int)pos;
    double f = pos - i;
    return i + 1 < n ? s[i] * (1 - f) + s[i + 1] * f : s[i];
}

/* ---- where a hooked pair's time goes ----
 *
 * The pieces a hooked alloc+free pair adds, each timed alone on this
 * machine before any hook is installed (median of 9 runs):
 *   - clock_gettime(CLOCK_MONOTONIC): one per event, two per pair;
 *   - cuCtxGetDevice: the query an ALLOC wrapper makes for the device
 *     where the driver shows several devices (with one it asks nothing);
 *   - memhook_events_record: one event through the queue (its own
 *     clock_gettime included), with the drainer running as in the rounds.
 * What is left of the added ns beyond 2 x record (+ 1 x cuCtxGetDevice) is
 * the wrappers themselves and the live table (insert at ALLOC, take at
 * FREE). */

static double median_of(double *v, int n) { return quantile(v, n, 0.5); }

static double time_clock(long n)
{
    struct timespec ts;
    uint64_t sink = 0, t0 = now_ns();
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        sink += (uint64_t)ts.tv_nsec;
    }
    double r = (double)(now_ns() - t0) / (double)n;
    return sink == 1 ? r + 1e-9 : r;
}

static double time_ctx_get_device(CUresult (*fn)(CUdevice *), long n)
{
    CUdevice d;
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++)
        fn(&d);
    return (double)(now_ns() - t0) / (double)n;
}

/* The two timestamps a hooked pair takes (csrc/cuda/cuda_hooks.h,
 * mh_clock_stamp): rdtsc for the FREE, lfence + rdtsc for the ALLOC. */
static double time_stamps(long n)
{
    uint64_t sink = 0, t0 = now_ns();
    for (long i = 0; i < n; i++) {
        sink += __builtin_ia32_rdtsc();
        __builtin_ia32_lfence();
        sink += __builtin_ia32_rdtsc();
    }
    double r = (double)(now_ns() - t0) / (double)n;
    return sink == 1 ? r + 1e-9 : r;
}

/* cuCtxGetCurrent beside cuCtxGetDevice: a per-thread cache of the
 * device keyed by the current context would still ask the driver for the
 * context at every ALLOC, so it pays only if this is much the cheaper. */
static double time_ctx_get_current(CUresult (*fn)(CUcontext *), long n)
{
    CUcontext c;
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++)
        fn(&c);
    return (double)(now_ns() - t0) / (double)n;
}

typedef int (*record_fn)(int, int, uint64_t, uint64_t, int, int, int);

static double time_record(record_fn rec, long n)
{
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++)
        rec(MEMHOOK_EVENT_ALLOC, 1, 0x10000 + (uint64_t)i * 256, 64, MEMHOOK_MEM_CUDA, 0, 0);
    return (double)(now_ns() - t0) / (double)n;
}

static void print_profile(void *mh)
{
    record_fn rec = (record_fn)need(mh, "memhook_events_record");
    CUresult (*ctx_dev)(CUdevice *) = need(g_cuda, "cuCtxGetDevice");
    /* (optional: the stub driver and the simulator may not have it) */
    CUresult (*ctx_cur)(CUcontext *) = (CUresult (*)(CUcontext *))dlsym(g_cuda,
                                                                        "cuCtxGetCurrent");
    double c[9], d[9], r[9], t[9], g[9];
    long n = 200000;
    for (int i = 0; i < 9; i++) {
        c[i] = time_clock(n);
        d[i] = time_ctx_get_device(ctx_dev, n);
        g[i] = ctx_cur != NULL ? time_ctx_get_current(ctx_cur, n) : -1;
        r[i] = time_record(rec, n);
        t[i] = time_stamps(n);
    }
    printf("profile (each alone, ns per call): clock_gettime(CLOCK_MONOTONIC) %.1f | "
           "cuCtxGetDevice %.1f | memhook_events_record (one event, clock included, "
           "drainer %s) %.1f\n",
           median_of(c, 9), median_of(d, 9), g_drainer_on ? "running" : "off",
           median_of(r, 9));
    if (ctx_cur != NULL)
        printf("profile: cuCtxGetCurrent %.1f ns (beside cuCtxGetDevice's above)\n",
               median_of(g, 9));
    CUresult (*count)(int *) = (CUresult (*)(int *))dlsym(g_cuda, "cuDeviceGetCount");
    int devices = 0;
    if (count == NULL || count(&devices) != CUDA_SUCCESS)
        devices = 0;
    if (devices == 1)
        printf("profile: a hooked pair costs at least 2 x record = %.1f ns (one device: no "
               "cuCtxGetDevice); the rest of `added` is the wrappers\n",
               2 * median_of(r, 9));
    else
        printf("profile: a hooked pair costs at least 2 x record + 1 x cuCtxGetDevice = %.1f "
               "ns; the rest of `added` is the wrappers\n",
               2 * median_of(r, 9) + median_of(d, 9));
    printf("profile: the pair's two TSC stamps alone (rdtsc, lfence+rdtsc) cost %.1f ns on "
           "this CPU\n", median_of(t, 9));
    extra_events += (uint64_t)9 * (uint64_t)n;
}

/* ---- modes ---- */

static unsigned mode_bits(const char *name)
{
    if (strcmp(name, "bistro") == 0)
        return MEMHOOK_MODE_BISTRO;
    if (strcmp(name, "reloc") == 0)
        return MEMHOOK_MODE_RELOC;
    if (strcmp(name, "bistro+reloc") == 0 || strcmp(name, "bistro,reloc") == 0 ||
        strcmp(name, "3") == 0)
        return MEMHOOK_MODE_BISTRO | MEMHOOK_MODE_RELOC;
    fprintf(stderr, "hook_bench: unknown mode %s (bistro, reloc, bistro+reloc)\n", name);
    exit(2);
}

static void install(unsigned mode)
{
    char why[512] = "";
    int rc = p_install(mode, why, sizeof why);
    if (rc != 0) {
        fprintf(stderr, "hook_bench: memhook_hooks_install(%u) failed: %d %s\n", mode, rc, why);
        exit(4);
    }
    resolve_entry_points();
}

static void uninstall(void)
{
    p_uninstall();
    resolve_entry_points();
}

/* ---- main ---- */

static int split(char *s, char **out, int max)
{
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

int main(int argc, char **argv)
{
    const char *libcuda = NULL, *libmemhook = NULL, *label = NULL;
    char apis_s[64] = "sync,async", modes_s[128] = "bistro,reloc,bistro+reloc",
         threads_s[64] = "1,2";
    int rounds = 21, drain = 1, real = 0, profile = 1, paired = 1, precise = 0, exact = 0;
    long paired_blocks = 20, paired_block = 500;
    long pairs = 20000;
    size_t size = 64;
    double goal_ns = 60, goal_pct = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (strcmp(a, name) == 0 && v != NULL && (++i, 1))
        if (OPT("--libcuda"))
            libcuda = v;
        else if (OPT("--libmemhook"))
            libmemhook = v;
        else if (OPT("--label"))
            label = v;
        else if (strcmp(a, "--real") == 0)
            real = 1;
        else if (OPT("--api"))
            snprintf(apis_s, sizeof apis_s, "%s", v);
        else if (OPT("--modes"))
            snprintf(modes_s, sizeof modes_s, "%s", v);
        else if (OPT("--threads"))
            snprintf(threads_s, sizeof threads_s, "%s", v);
        else if (OPT("--rounds"))
            rounds = atoi(v);
        else if (OPT("--pairs"))
            pairs = atol(v);
        else if (OPT("--size"))
            size = (size_t)atol(v);
        else if (strcmp(a, "--no-drain") == 0)
            drain = 0;
        else if (strcmp(a, "--no-profile") == 0)
            profile = 0;
        else if (strcmp(a, "--no-paired") == 0)
            paired = 0;
        else if (strcmp(a, "--precise") == 0)
            precise = 1;
        else if (strcmp(a, "--exact") == 0)
            exact = 1;
        else if (OPT("--paired-block"))
            paired_block = atol(v);
        else if (OPT("--goal-ns"))
            goal_ns = atof(v);
        else if (OPT("--goal-pct"))
            goal_pct = atof(v);
        else {
            fprintf(stderr, "hook_bench: bad argument %s (see the comment at the top of "
                            "bench/hooks/hook_bench.c)\n", a);
            return 2;
        }
#undef OPT
    }
    if (libmemhook == NULL || (libcuda == NULL) == (real == 0) || rounds < 1 ||
        rounds > 512 || pairs < 1 || paired_block < 1) {
        fprintf(stderr, "usage: hook_bench (--libcuda PATH | --real) --libmemhook PATH "
                        "[--api sync,async] [--modes bistro,reloc,bistro+reloc] "
                        "[--threads 1,2] [--rounds 21] [--pairs 20000] [--size 64] "
                        "[--no-drain] [--no-profile] [--no-paired] [--paired-block 500] "
                        "[--precise] [--exact] "
                        "[--goal-ns 60 | --goal-pct 10]\n");
        return 2;
    }

    /* The driver first, by path (the simulator) or by soname (the system's):
     * bistro's own dlopen("libcuda.so.1") then finds this one. */
    g_cuda = dlopen(real ? "libcuda.so.1" : libcuda, RTLD_NOW | RTLD_GLOBAL);
    if (g_cuda == NULL) {
        fprintf(stderr, "hook_bench: %s\n", dlerror());
        return 2;
    }
    void *mh = dlopen(libmemhook, RTLD_NOW | RTLD_GLOBAL);
    if (mh == NULL) {
        fprintf(stderr, "hook_bench: %s\n", dlerror());
        return 2;
    }
    p_install = need(mh, "memhook_hooks_install");
    p_uninstall = need(mh, "memhook_hooks_uninstall");
    p_drain = need(mh, "memhook_events_drain");
    drainer_resolve(mh);
    p_stats = need(mh, "memhook_queue_stats_get");
    p_original = need(mh, "memhook_hooks_original");
    if (exact) {
        /* Exact sizes, as for subscribe(exact=True): FREEs sized in the
         * hook (the live table), precise stamps with them.  A core from
         * before the switch sized every FREE in the hook. */
        int (*want_exact)(int) = (int (*)(int))dlsym(mh, "memhook_events_exact_sizes");
        if (want_exact != NULL)
            want_exact(1);
    }
    if (precise) {
        /* Precise timestamps, as under memhook trace (the trace itself
         * would add its own copy of every event: its cost is not this). */
        int (*want_precise)(int) = need(mh, "memhook_events_precise_time");
        want_precise(1);
    }

    CUresult (*p_version)(int *) = need(g_cuda, "cuDriverGetVersion");
    p_cuCtxSetCurrent = need(g_cuda, "cuCtxSetCurrent");
    p_cuStreamCreate = need(g_cuda, "cuStreamCreate");
    p_cuStreamDestroy = need(g_cuda, "cuStreamDestroy_v2");
    p_cuStreamSynchronize = need(g_cuda, "cuStreamSynchronize");
    g_ctx = bench_primary_context(g_cuda);
    int version = 0;
    p_version(&version);
    Dl_info info;
    const char *driver_path = dladdr((void *)p_version, &info) && info.dli_fname ? info.dli_fname
                                                                                  : "?";
    resolve_entry_points();

    pthread_t drain_thread;
    g_drainer_on = drain;
    if (drain && pthread_create(&drain_thread, NULL, drainer, NULL) != 0) {
        perror("pthread_create");
        return 2;
    }

    char *apis[4], *modes[8], *threads_list[8];
    int n_api = split(apis_s, apis, 4), n_mode = split(modes_s, modes, 8),
        n_thr = split(threads_s, threads_list, 8);
    const char *far = getenv("MEMHOOK_BISTRO_FAR_JUMP");
    printf("hook_bench: driver %s (version %d), %s; %d rounds x %ld pairs per thread, %zu B; "
           "drainer %s%s\n",
           driver_path, version, label ? label : real ? "real driver" : "simulator", rounds,
           pairs, size,
           drain ? "on (drains while producers run)" : "off (drained after each round)",
           far && far[0] == '1' ? "; MEMHOOK_BISTRO_FAR_JUMP=1" : "");
    if (profile) {
        print_profile(mh);
        if (!drain)
            drain_all();
    }
    const char *goal_txt = goal_pct >= 0 ? "added <= goal %" : "added <= goal ns";
    printf("%-32s %-13s %3s %11s %11s %9s %8s %17s  %s\n", "pair", "mode", "thr",
           "unhooked ns", "hooked ns", "added ns", "added %", "paired p25..p75", goal_txt);

    uint64_t expected_events = extra_events;
    for (int ai = 0; ai < n_api; ai++) {
        enum api api = strcmp(apis[ai], "async") == 0 ? API_ASYNC : API_SYNC;
        if (api == API_SYNC && strcmp(apis[ai], "sync") != 0) {
            fprintf(stderr, "hook_bench: unknown api %s (sync, async)\n", apis[ai]);
            return 2;
        }
        for (int mi = 0; mi < n_mode; mi++) {
            unsigned mode = mode_bits(modes[mi]);
            for (int ti = 0; ti < n_thr; ti++) {
                int threads = atoi(threads_list[ti]);
                if (threads < 1 || threads > 64) {
                    fprintf(stderr, "hook_bench: threads must be 1-64\n");
                    return 2;
                }
                double un[512], ho[512], diff[512];
                memhook_queue_stats before;
                p_stats(&before);
                for (int r = 0; r < rounds; r++) {
                    /* ABBA: which side goes first alternates per round. */
                    for (int side = 0; side < 2; side++) {
                        int hooked = (side == 0) == (r % 2 == 1);
                        if (hooked)
                            install(mode);
                        double v = round_ns(api, threads, pairs, size);
                        if (hooked) {
                            uninstall();
                            ho[r] = v;
                            expected_events += 2ull * (uint64_t)threads *
                                               (uint64_t)(pairs + pairs / 20 + 1);
                        } else {
                            un[r] = v;
                        }
                        if (!drain)
                            drain_all();
                    }
                    diff[r] = ho[r] - un[r];
                }
                memhook_queue_stats after;
                p_stats(&after);
                double mu = quantile(un, rounds, 0.5), mhk = quantile(ho, rounds, 0.5);
                double added = mhk - mu, pct = 100.0 * added / mu;
                double d25 = quantile(diff, rounds, 0.25), d75 = quantile(diff, rounds, 0.75);
                const char *verdict = "-";
                if (threads == 1)
                    verdict = (goal_pct >= 0 ? pct <= goal_pct : added <= goal_ns) ? "yes"
                                                                                    : "NO";
                char goal_col[48];
                snprintf(goal_col, sizeof goal_col, "%s (%g%s)", verdict,
                         goal_pct >= 0 ? goal_pct : goal_ns, goal_pct >= 0 ? "%" : " ns");
                char spread[32];
                snprintf(spread, sizeof spread, "%.1f..%.1f", d25, d75);
                printf("%-32s %-13s %3d %11.1f %11.1f %9.1f %7.1f%% %17s  %s\n",
                       api_label[api], modes[mi], threads, mu, mhk, added, pct, spread,
                       threads == 1 ? goal_col : "- (goal is for 1 thread)");
                printf("RESULT api=%s mode=%s threads=%d unhooked_ns=%.2f hooked_ns=%.2f "
                       "added_ns=%.2f added_pct=%.2f paired_p25=%.2f paired_p75=%.2f "
                       "rounds=%d pairs=%ld size=%zu drainer=%s real=%d segments_peak=%llu "
                       "segment_bytes=%llu events=%llu\n",
                       api_name[api], modes[mi], threads, mu, mhk, added, pct, d25, d75,
                       rounds, pairs, size, drain ? "on" : "off", real,
                       (unsigned long long)after.segments_peak,
                       (unsigned long long)after.segment_bytes,
                       (unsigned long long)(after.produced - before.produced));
                fflush(stdout);
            }
        }
    }

    /* Paired with several threads too, each alternating its own blocks at
     * the same time: hooked minus original per thread is what the hooks add
     * while other threads call the driver and record - memhook's share of
     * the 2-thread figure, with the driver's own contention on both sides
     * (the rounds' 2-thread unhooked pair includes it; issue 26 goal 3). */
    if (paired) {
        printf("\npaired: hooked entry vs the original it calls, alternating blocks of %ld "
               "pairs, %ld blocks a round, in each of thr threads at once\n", paired_block,
               paired_blocks);
        printf("%-32s %-13s %3s %11s %9s %8s %17s  %s\n", "pair", "mode", "thr", "original ns",
               "added ns", "added %", "paired p25..p75", goal_txt);
    }
    for (int ai = 0; paired && ai < n_api; ai++) {
        enum api api = strcmp(apis[ai], "async") == 0 ? API_ASYNC : API_SYNC;
        for (int mi = 0; mi < n_mode; mi++) {
            for (int ti = 0; ti < n_thr; ti++) {
                int threads = atoi(threads_list[ti]);
                if (threads < 1 || threads > 8)
                    continue;  /* (the rounds said what is valid) */
                static paired_job jobs[8];
                static double added_all[8 * 512], base_all[8 * 512];
                install(mode_bits(modes[mi]));
                resolve_originals();
                pthread_t t[8];
                for (int k = 0; k < threads; k++) {
                    jobs[k] = (paired_job){.api = api, .rounds = rounds,
                                           .blocks = paired_blocks, .block = paired_block,
                                           .size = size};
                    if (pthread_create(&t[k], NULL, paired_work, &jobs[k]) != 0) {
                        perror("pthread_create");
                        return 2;
                    }
                }
                int n_all = 0;
                for (int k = 0; k < threads; k++) {
                    pthread_join(t[k], NULL);
                    expected_events += 2 * paired_hooked_pairs(&jobs[k]);
                    for (int r = 0; r < rounds; r++, n_all++) {
                        added_all[n_all] = jobs[k].added[r];
                        base_all[n_all] = jobs[k].base[r];
                    }
                }
                uninstall();
                if (!drain)
                    drain_all();
                double base = quantile(base_all, n_all, 0.5);
                double added = quantile(added_all, n_all, 0.5), pct = 100.0 * added / base;
                double d25 = quantile(added_all, n_all, 0.25);
                double d75 = quantile(added_all, n_all, 0.75);
                const char *verdict =
                    threads != 1 ? "-"
                    : (goal_pct >= 0 ? pct <= goal_pct : added <= goal_ns) ? "yes" : "NO";
                char spread[32];
                snprintf(spread, sizeof spread, "%.1f..%.1f", d25, d75);
                printf("%-32s %-13s %3d %11.1f %9.1f %7.1f%% %17s  %s (%g%s)\n", api_label[api],
                       modes[mi], threads, base, added, pct, spread, verdict,
                       goal_pct >= 0 ? goal_pct : goal_ns, goal_pct >= 0 ? "%" : " ns");
                printf("RESULT method=paired api=%s mode=%s threads=%d unhooked_ns=%.2f "
                       "hooked_ns=%.2f added_ns=%.2f added_pct=%.2f paired_p25=%.2f "
                       "paired_p75=%.2f rounds=%d blocks=%ld block=%ld size=%zu real=%d\n",
                       api_name[api], modes[mi], threads, base, base + added, added, pct, d25,
                       d75, rounds, paired_blocks, paired_block, size, real);
                fflush(stdout);
            }
        }
    }

    if (drain) {
        atomic_store(&g_drainer_stop, 1);
        pthread_join(drain_thread, NULL);
    }
    drain_all();
    memhook_queue_stats st;
    p_stats(&st);
    unsigned long long drained = atomic_load(&g_drained);
    unsigned long long markers = atomic_load(&g_markers);
    printf("events: expected %llu, produced %llu, drained %llu (+ %llu markers); queue peak %llu "
           "segments of %llu B (%.1f KiB); FREE sizes from the driver %llu, unknown %llu\n",
           (unsigned long long)expected_events, (unsigned long long)st.produced, drained, markers,
           (unsigned long long)st.segments_peak, (unsigned long long)st.segment_bytes,
           (double)(st.segments_peak * st.segment_bytes) / 1024.0,
           (unsigned long long)st.free_size_from_driver,
           (unsigned long long)st.free_size_unknown);
    if (drain) {
        unsigned long long cpu = atomic_load(&g_drainer_cpu_ns);
        unsigned long long calls = atomic_load(&g_drainer_calls);
        printf("drainer: %.1f ms CPU, %.1f ns an event, %llu calls with events (%.0f events a "
               "call)\n", (double)cpu / 1e6, drained ? (double)cpu / (double)drained : 0.0,
               calls, calls ? (double)drained / (double)calls : 0.0);
    }
    int ok = drained == expected_events && st.produced == expected_events + markers;
    printf("EVENTS %s expected=%llu drained=%llu\n", ok ? "ok" : "MISMATCH",
           (unsigned long long)expected_events, drained);
    return ok ? 0 : 1;
}
