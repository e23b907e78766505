/*
 * native_query_bench.c - memhook_query from C, through installed hooks and
 * real events, beside the driver's own cuPointerGetAttribute in the same
 * run (on the simulator in CI and on the dev box; on a GPU host, NVIDIA's).
 *
 * Prints, one line each (ns are medians of 7 timed passes, in the thread's
 * CPU time):
 *   query_device_ns     memhook_query of a hooked cuMemAlloc pointer
 *   query_host_ns       memhook_query of malloc'd memory
 *   query_mixed_ns      the two in turn (a transport sending from device
 *                       memory and receiving into host memory)
 *   driver_device_ns    cuPointerGetAttribute(MEMORY_TYPE) on the same pointers
 *   driver_host_ns
 *   batch_ns_per_ptr    memhook_query_types over REGIONS live allocations,
 *                       random pointers (half in them, half in host memory)
 *   batch_sorted_ns_per_ptr   the same pointers in address order
 *   batch_device_ns_per_ptr   random pointers all in the allocations
 *   batch_regions_ns_per_ptr  memhook_query_batch (a memhook_region each) of
 *                       the same random pointers
 *   backlog_events / backlog_absorb_ms
 *                       events pending after BACKLOG/2 alloc+free pairs with
 *                       nobody draining, and how long the first query takes
 *                       to put them in the cache
 *   cache_apply_ms      the same kind of stream into a private cache alone
 *   churn_ns            with REGIONS separate allocations live (2 x REGIONS
 *                       made, every other one freed), a cuMemAlloc, then
 *                       memhook_query of the new pointer, then its
 *                       cuMemFree, in a loop: a program that asks about
 *                       each buffer it makes (every query drains the two
 *                       events and, under 2,048 regions, republishes the
 *                       map); churn_query_ns the query's part alone (its
 *                       own clock reads included)
 *   contention          8 threads querying (a hooked pointer, host memory)
 *                       while 4 threads allocate and free in tight loops for
 *                       a second: each query's wall time, p50/p99/max, and
 *                       how many answers came from the hooks or the driver
 *                       (a query that finds another thread's drain at work
 *                       and another thread's events pending asks the
 *                       driver: it never waits; on a box with fewer cores
 *                       than threads the max is a thread losing its core)
 *   goals               the figures, met or not
 *
 * Usage: native_query_bench [REGIONS [BACKLOG]]  (run by native_query_bench.py)
 * MEMHOOK_BENCH_PARTS (comma-separated, of query, batch, backlog, churn, contention;
 * default all) picks the parts to run.
 */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "memhook_internal/api.h"

#define NQ_NAME "native_query_bench"
#include "../../tests/fixtures/native_query_common.h"

/* The thread's CPU time: a box shared with other jobs (the dev box) then
 * times the calls, not the other jobs' turns on the cores. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Whether MEMHOOK_BENCH_PARTS asks for `name` (unset: every part). */
static int part(const char *name)
{
    const char *parts = getenv("MEMHOOK_BENCH_PARTS");
    if (parts == NULL || *parts == 0)
        return 1;
    size_t n = strlen(name);
    for (const char *p = parts; (p = strstr(p, name)) != NULL; p += n)
        if ((p == parts || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return 1;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static CUresult (*p_get_attribute)(void *, CUpointer_attribute, CUdeviceptr);
static volatile int g_sink;

enum { PASSES = 7 };

/* The median of t[0 .. PASSES) (sorts them). */
static double median(double *t)
{
    qsort(t, PASSES, sizeof t[0], cmp_double);
    return t[PASSES / 2];
}

/* Median ns per call of memhook_query over ptrs[0 .. n), `reps` times. */
static double time_query(const uint64_t *ptrs, size_t n, size_t reps)
{
    double t[PASSES];
    memhook_region r = {.struct_size = sizeof r};
    for (int p = 0; p < PASSES; p++) {
        uint64_t t0 = now_ns();
        for (size_t k = 0; k < reps; k++)
            for (size_t i = 0; i < n; i++) {
                memhook_query((const void *)(uintptr_t)ptrs[i], 1, &r);
                g_sink += r.mem_type;
            }
        t[p] = (double)(now_ns() - t0) / (double)(reps * n);
    }
    return median(t);
}

static double time_driver(const uint64_t *ptrs, size_t n, size_t reps)
{
    double t[PASSES];
    unsigned type = 0;
    for (int p = 0; p < PASSES; p++) {
        uint64_t t0 = now_ns();
        for (size_t k = 0; k < reps; k++)
            for (size_t i = 0; i < n; i++) {
                p_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)ptrs[i]);
                g_sink += (int)type;
            }
        t[p] = (double)(now_ns() - t0) / (double)(reps * n);
    }
    return median(t);
}

/* ---- 8 query threads beside 4 allocating threads ---- */

static nq_driver g_cu;
static _Atomic int g_stop;
static uint64_t g_dev_ptr, g_host_ptr;

enum { QUERIERS = 8, ALLOCATORS = 4, SAMPLES = 1 << 18 };
typedef struct qstats {
    uint64_t *ns;
    size_t n;
    unsigned long origin[3];
} qstats;

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *allocator(void *arg)
{
    (void)arg;
    g_cu.set_current(g_cu.ctx);
    while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
        CUdeviceptr x;
        if (g_cu.alloc(&x, 4096) == CUDA_SUCCESS)
            g_cu.free(x);
    }
    return NULL;
}

static void *querier(void *arg)
{
    qstats *st = arg;
    memhook_region r = {.struct_size = sizeof r};
    for (uint64_t i = 0; !atomic_load_explicit(&g_stop, memory_order_relaxed); i++) {
        uint64_t p = (i & 1) ? g_dev_ptr : g_host_ptr;
        uint64_t t0 = wall_ns();
        memhook_query((const void *)(uintptr_t)p, 1, &r);
        uint64_t t = wall_ns() - t0;
        st->origin[r.origin]++;
        if (st->n < SAMPLES)
            st->ns[st->n++] = t;
        else
            st->ns[i % SAMPLES] = t;  /* (a later sample over an earlier one) */
    }
    return NULL;
}

static void contention(double seconds)
{
    pthread_t a[ALLOCATORS], q[QUERIERS];
    static qstats st[QUERIERS];
    for (int i = 0; i < QUERIERS; i++)
        st[i].ns = malloc(SAMPLES * sizeof(uint64_t));
    nq_threads_start(a, ALLOCATORS, allocator, NULL, 0);
    nq_threads_start(q, QUERIERS, querier, st, sizeof st[0]);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&g_stop, 1);
    nq_threads_join(a, ALLOCATORS);
    nq_threads_join(q, QUERIERS);
    size_t total = 0;
    unsigned long origin[3] = {0, 0, 0};
    for (int i = 0; i < QUERIERS; i++) {
        total += st[i].n;
        for (int o = 0; o < 3; o++)
            origin[o] += st[i].origin[o];
    }
    uint64_t *all = malloc(total * sizeof *all);
    size_t at = 0;
    for (int i = 0; i < QUERIERS; i++) {
        memcpy(all + at, st[i].ns, st[i].n * sizeof *all);
        at += st[i].n;
        free(st[i].ns);
    }
    qsort(all, total, sizeof *all, cmp_u64);
    printf("contention queriers %d allocators %d: p50_ns %llu p99_ns %llu max_ns %llu "
           "(answers: hooks %lu driver %lu unknown %lu)\n", QUERIERS, ALLOCATORS,
           (unsigned long long)all[total / 2], (unsigned long long)all[total * 99 / 100],
           (unsigned long long)all[total - 1], origin[1], origin[2], origin[0]);
    free(all);
}

int main(int argc, char **argv)
{
    size_t regions = argc > 1 ? strtoul(argv[1], NULL, 0) : 10000;
    size_t backlog = argc > 2 ? strtoul(argv[2], NULL, 0) : 1000000;
    void *cuda = nq_load_driver();
    unsigned mode = nq_env_mode();
    nq_install(mode);
    p_get_attribute = nq_need(cuda, "cuPointerGetAttribute");
    g_cu = nq_start(cuda, true);
    printf("mode %u coverage_complete %d\n", mode, memhook_hooks_coverage_complete());

    /* Single pointers: 16 inside one hooked allocation, 16 in a malloc'd
     * buffer. */
    enum { N = 16 };
    CUdeviceptr d = nq_alloc(&g_cu, 1 << 20);
    char *h = malloc(1 << 20);
    memset(h, 1, 1 << 20);
    uint64_t dev_ptrs[N], host_ptrs[N];
    for (int i = 0; i < N; i++) {
        dev_ptrs[i] = d + (uint64_t)i * 4096u;
        host_ptrs[i] = (uint64_t)(uintptr_t)(h + i * 4096);
    }
    memhook_region r = {.struct_size = sizeof r};
    memhook_query((void *)(uintptr_t)d, 1, &r);
    printf("device answer: type %d origin %d; ", r.mem_type, r.origin);
    memhook_query(h, 1, &r);
    printf("host answer: type %d origin %d\n", r.mem_type, r.origin);
    double qd = 0, qh = 0, batch_ns = 0, backlog_ms = 0;
    if (part("query")) {
        qd = time_query(dev_ptrs, N, 200000);
        qh = time_query(host_ptrs, N, 200000);
        printf("query_device_ns %.2f\n", qd);
        printf("query_host_ns %.2f\n", qh);
        uint64_t mixed[2 * N];
        for (int i = 0; i < N; i++) {
            mixed[2 * i] = dev_ptrs[i];
            mixed[2 * i + 1] = host_ptrs[i];
        }
        printf("query_mixed_ns %.2f\n", time_query(mixed, 2 * N, 100000));
        printf("driver_device_ns %.2f\n", time_driver(dev_ptrs, N, 20000));
        printf("driver_host_ns %.2f\n", time_driver(host_ptrs, N, 20000));
    }

    /* The batch: `regions` live allocations, random pointers. */
    if (part("batch")) {
        CUdeviceptr *live = malloc(regions * sizeof *live);
        for (size_t i = 0; i < regions; i++)
            live[i] = nq_alloc(&g_cu, 4096 * (1 + i % 4));
        memhook_query((void *)(uintptr_t)live[0], 1, &r);  /* (applies them) */
        enum { M = 1 << 20 };
        uint64_t *ptrs = malloc(M * sizeof *ptrs), *sorted = malloc(M * sizeof *sorted);
        uint8_t *types = malloc(M);
        unsigned seed = 7;
        for (size_t i = 0; i < M; i++) {
            size_t k = (size_t)rand_r(&seed) % regions;
            ptrs[i] = (rand_r(&seed) & 1) ? live[k] + (uint64_t)(rand_r(&seed) % 4096)
                                          : (uint64_t)(uintptr_t)(h + rand_r(&seed) % (1 << 20));
        }
        memcpy(sorted, ptrs, M * sizeof *ptrs);
        qsort(sorted, M, sizeof *sorted, cmp_u64);
        double bt[PASSES], bs[PASSES];
        for (int p = 0; p < PASSES; p++) {
            uint64_t t0 = now_ns();
            memhook_query_types(sorted, M, types);
            bs[p] = (double)(now_ns() - t0) / M;
            t0 = now_ns();
            memhook_query_types(ptrs, M, types);
            bt[p] = (double)(now_ns() - t0) / M;
        }
        size_t gpu = 0;
        for (size_t i = 0; i < M; i++)
            gpu += types[i] == MEMHOOK_MEMORY_CUDA;
        batch_ns = median(bt);
        printf("batch_regions %zu batch_ns_per_ptr %.2f (device answers %zu of %d)\n", regions,
               batch_ns, gpu, M);
        printf("batch_sorted_ns_per_ptr %.2f\n", median(bs));
        for (size_t i = 0; i < M; i++)
            sorted[i] = live[(size_t)rand_r(&seed) % regions] + (uint64_t)(rand_r(&seed) % 4096);
        for (int p = 0; p < PASSES; p++) {
            uint64_t t0 = now_ns();
            memhook_query_types(sorted, M, types);
            bs[p] = (double)(now_ns() - t0) / M;
        }
        printf("batch_device_ns_per_ptr %.2f\n", median(bs));
        /* memhook_query_batch: a whole memhook_region per pointer. */
        enum { MB = 1 << 16 };
        memhook_region *regs = malloc(MB * sizeof *regs);
        regs[0].struct_size = sizeof *regs;
        for (int p = 0; p < PASSES; p++) {
            uint64_t t0 = now_ns();
            memhook_query_batch((const void *const *)ptrs, MB, regs);
            bt[p] = (double)(now_ns() - t0) / MB;
        }
        printf("batch_regions_ns_per_ptr %.2f\n", median(bt));
        /* Single queries of random pointers over the same map. */
        for (int p = 0; p < PASSES; p++) {
            uint64_t t0 = now_ns();
            for (size_t i = 0; i < MB; i++) {
                memhook_query((const void *)(uintptr_t)ptrs[i], 1, &r);
                g_sink += r.mem_type;
            }
            bt[p] = (double)(now_ns() - t0) / MB;
        }
        printf("query_random_ns %.2f\n", median(bt));
        for (size_t i = 0; i < regions; i++)
            g_cu.free(live[i]);
        free(regs);
        free(types);
        free(sorted);
        free(ptrs);
        free(live);
    }

    if (part("backlog")) {
        /* The backlog: nobody drains while it builds (no query, no Python). */
        memhook_query(h, 1, &r);
        memhook_queue_stats st0, st1;
        memhook_queue_stats_get(&st0);
        for (size_t i = 0; i < backlog / 2; i++) {
            CUdeviceptr x;
            g_cu.alloc(&x, 4096 * (1 + i % 8));
            g_cu.free(x);
        }
        memhook_queue_stats_get(&st1);
        uint64_t t0 = now_ns();
        memhook_query((void *)(uintptr_t)d, 1, &r);
        uint64_t t1 = now_ns();
        backlog_ms = (double)(t1 - t0) / 1e6;
        printf("backlog_events %llu backlog_absorb_ms %.2f (answer type %d origin %d)\n",
               (unsigned long long)(st1.produced - st0.produced), backlog_ms, r.mem_type, r.origin);

        /* The cache's part alone: the same kind of stream into a private cache
         * (memhook_testing_cache_apply: what the feed does with a drained
         * batch), one batch. */
        memhook_event *ev = calloc(backlog, sizeof *ev);
        for (size_t i = 0; i < backlog; i++) {
            ev[i].kind = (i & 1) ? MEMHOOK_EVENT_FREE : MEMHOOK_EVENT_ALLOC;
            ev[i].address = d + (uint64_t)((i / 2) % 64) * (1u << 16);
            ev[i].size = 4096u * (1u + (uint64_t)((i / 2) % 8));
            ev[i].mem_type = MEMHOOK_MEM_CUDA;
            ev[i].device = 0;
        }
        memhook_testing_cache *tc = memhook_testing_cache_new();
        uint64_t a0 = now_ns();
        memhook_testing_cache_apply(tc, ev, backlog);
        printf("cache_apply_events %zu cache_apply_ms %.2f\n", backlog,
               (double)(now_ns() - a0) / 1e6);
        memhook_testing_cache_free(tc);
        free(ev);
    }

    if (part("churn")) {
        CUdeviceptr *live = malloc(2 * regions * sizeof *live);
        for (size_t i = 0; i < 2 * regions; i++)
            live[i] = nq_alloc(&g_cu, 4096 * (1 + i % 4));
        for (size_t i = 0; i < 2 * regions; i += 2)  /* (apart: no two merge) */
            g_cu.free(live[i]);
        memhook_query((void *)(uintptr_t)d, 1, &r);
        size_t in_map = memhook_cache_regions(NULL, 0);
        enum { CHURN = 2000 };
        double tc[PASSES], tq[PASSES];
        int wrong = 0;
        for (int p = 0; p < PASSES; p++) {
            uint64_t q = 0, t0 = now_ns();
            for (int k = 0; k < CHURN; k++) {
                CUdeviceptr x;
                if (g_cu.alloc(&x, 4096) != CUDA_SUCCESS)
                    NQ_SETUP_FAIL("cuMemAlloc failed in the churn loop");
                uint64_t q0 = now_ns();
                memhook_query((void *)(uintptr_t)x, 1, &r);
                q += now_ns() - q0;
                wrong += r.mem_type != MEMHOOK_MEMORY_CUDA;
                g_cu.free(x);
            }
            tc[p] = (double)(now_ns() - t0) / CHURN;
            tq[p] = (double)q / CHURN;
        }
        printf("churn_regions %zu churn_ns %.1f churn_query_ns %.1f (wrong answers %d)\n",
               in_map, median(tc), median(tq), wrong);
        for (size_t i = 1; i < 2 * regions; i += 2)
            g_cu.free(live[i]);
        free(live);
    }

    g_dev_ptr = d + 64;
    g_host_ptr = (uint64_t)(uintptr_t)h + 64;
    if (part("contention"))
        contention(1.0);
    /* (the cache's goals, docs/design/native-cache.md; the contention
     * case's is structural - a query takes no lock another thread holds:
     * tests/fixtures/native_query_nowait.c) */
    printf("goals:");
    if (part("query"))
        printf(" query <= 10 ns %s (%.1f / %.1f) |", qd <= 10 && qh <= 10 ? "met" : "NOT met",
               qd, qh);
    if (part("batch"))
        printf(" batch <= 8 ns/ptr %s (%.1f) |", batch_ns <= 8 ? "met" : "NOT met", batch_ns);
    if (part("backlog"))
        printf(" backlog of 1,000,000 <= 100 ms %s (%.1f)", backlog_ms <= 100 ? "met" : "NOT met",
               backlog_ms);
    printf("\n");
    g_cu.free(d);
    free(h);
    return 0;
}
