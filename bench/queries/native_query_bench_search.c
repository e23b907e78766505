/*
 * native_query_bench_search.c - the cache's lookups alone, for callgrind's
 * instruction counts (load-proof where timings on a shared box are not):
 * run by native_query_bench.py --callgrind, once per counted function
 * (--toggle-collect=nqs_*), with the core in LD_PRELOAD and the simulator.
 *
 *   nqs_types    memhook_testing_cache_types of POINTERS random pointers
 *                over REGIONS regions of a private cache (the batch's
 *                search: mh_cache_types), up to twice a region's size past
 *                its start (so about half fall between regions)
 *   nqs_lookup   memhook_testing_cache_lookup of each (a single search)
 *   nqs_query    memhook_query of 16 pointers in one hooked cuMemAlloc,
 *                then 16 in a malloc'd buffer, 1,000 rounds (the memo)
 *   nqs_publish  one publish of the map (every apply of a private cache
 *                publishes): an allocation in a gap inside the map, then
 *                its free, PUBLISHES rounds - what a drain's commit costs
 *                where the map is republished at once (under 2,048
 *                regions), the snapshot's build included
 *
 * Prints each loop's pointers (the divisor) and, outside valgrind, its ns
 * a pointer (thread CPU time, one pass: a sanity check, not a figure).
 *
 * Usage: native_query_bench_search [REGIONS [POINTERS]]
 */
#include <string.h>
#include <time.h>

#include "memhook_internal/api.h"

#define NQ_NAME "native_query_bench_search"
#include "../../tests/fixtures/native_query_common.h"

static volatile int g_sink;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void nqs_types(memhook_testing_cache *c, const uint64_t *p,
                                                size_t m, uint8_t *types)
{
    memhook_testing_cache_types(c, p, m, types);
}

__attribute__((noinline)) static void nqs_lookup(memhook_testing_cache *c, const uint64_t *p,
                                                 size_t m)
{
    memhook_region r = {.struct_size = sizeof r};
    for (size_t i = 0; i < m; i++) {
        memhook_testing_cache_lookup(c, p[i], 1, &r);
        g_sink += r.mem_type;
    }
}

__attribute__((noinline)) static void nqs_publish(memhook_testing_cache *c, const uint64_t *start,
                                                  size_t regions, size_t rounds)
{
    for (size_t k = 0; k < rounds; k++) {
        /* (regions are at most 64 KiB every 128 KiB: 96 KiB past a start
         * is a gap) */
        uint64_t at = start[(k * 7919u) % regions] + (96u << 10);
        memhook_event ev = {.kind = MEMHOOK_EVENT_ALLOC, .address = at, .size = 4096,
                            .mem_type = MEMHOOK_MEM_CUDA};
        memhook_testing_cache_apply(c, &ev, 1);
        ev.kind = MEMHOOK_EVENT_FREE;
        memhook_testing_cache_apply(c, &ev, 1);
    }
}

__attribute__((noinline)) static void nqs_query(const uint64_t *p, size_t n, int rounds)
{
    memhook_region r = {.struct_size = sizeof r};
    for (int k = 0; k < rounds; k++)
        for (size_t i = 0; i < n; i++) {
            memhook_query((const void *)(uintptr_t)p[i], 1, &r);
            g_sink += r.mem_type;
        }
}

int main(int argc, char **argv)
{
    size_t regions = argc > 1 ? strtoul(argv[1], NULL, 0) : 10000;
    size_t m = argc > 2 ? strtoul(argv[2], NULL, 0) : 65536;
    if (regions == 0 || m == 0)
        NQ_SETUP_FAIL("REGIONS and POINTERS must be positive");

    /* A private cache: regions of 4-64 KiB every 128 KiB, vouched. */
    memhook_testing_cache *c = memhook_testing_cache_new();
    memhook_testing_cache_hooks(c, 1, 1);
    memhook_event *ev = calloc(regions, sizeof *ev);
    uint64_t *start = malloc(regions * sizeof *start), *size = malloc(regions * sizeof *size);
    unsigned seed = 7;
    for (size_t i = 0; i < regions; i++) {
        start[i] = 0x7f0000000000ull + (uint64_t)i * (128u << 10);
        size[i] = 4096u * (1u + (unsigned)rand_r(&seed) % 16u);
        ev[i] = (memhook_event){.kind = MEMHOOK_EVENT_ALLOC, .address = start[i],
                                .size = size[i], .mem_type = MEMHOOK_MEM_CUDA};
    }
    memhook_testing_cache_apply(c, ev, regions);
    uint64_t *p = malloc(m * sizeof *p);
    uint8_t *types = malloc(m);
    for (size_t i = 0; i < m; i++) {
        size_t k = (size_t)rand_r(&seed) % regions;
        p[i] = start[k] + (uint64_t)rand_r(&seed) % (2 * size[k]);
    }
    memhook_testing_cache_types(c, p, m, types);  /* (warm, outside the counted loops) */
    uint64_t t0 = now_ns();
    nqs_types(c, p, m, types);
    uint64_t t1 = now_ns();
    nqs_lookup(c, p, m);
    uint64_t t2 = now_ns();
    printf("nqs_types pointers %zu ns_per_ptr %.2f\n", m, (double)(t1 - t0) / (double)m);
    printf("nqs_lookup pointers %zu ns_per_ptr %.2f\n", m, (double)(t2 - t1) / (double)m);
    enum { PUBLISHES = 64 };
    nqs_publish(c, start, regions, 2);  /* (warm: the spare snapshots) */
    t0 = now_ns();
    nqs_publish(c, start, regions, PUBLISHES);
    t1 = now_ns();
    printf("nqs_publish publishes %d ns_each %.0f\n", 2 * PUBLISHES,
           (double)(t1 - t0) / (2.0 * PUBLISHES));

    /* memhook_query through installed hooks and real events. */
    void *cuda = nq_load_driver();
    nq_install(nq_env_mode());
    nq_driver cu = nq_start(cuda, true);
    CUdeviceptr d = nq_alloc(&cu, 1 << 20);
    char *h = malloc(1 << 20);
    memset(h, 1, 1 << 20);
    enum { N = 16, ROUNDS = 1000 };
    uint64_t q[2 * N];
    for (int i = 0; i < N; i++) {
        q[i] = d + (uint64_t)i * 4096u;
        q[N + i] = (uint64_t)(uintptr_t)(h + i * 4096);
    }
    memhook_region r = {.struct_size = sizeof r};
    for (int i = 0; i < 2 * N; i++)  /* (warm: the memo; outside the counted loops) */
        memhook_query((const void *)(uintptr_t)q[i], 1, &r);
    t0 = now_ns();
    nqs_query(q, N, ROUNDS);
    nqs_query(q + N, N, ROUNDS);
    t1 = now_ns();
    printf("nqs_query pointers %d ns_per_ptr %.2f\n", 2 * N * ROUNDS,
           (double)(t1 - t0) / (2.0 * N * ROUNDS));
    cu.free(d);
    free(h);
    memhook_testing_cache_free(c);
    free(types);
    free(p);
    free(size);
    free(start);
    free(ev);
    return 0;
}
