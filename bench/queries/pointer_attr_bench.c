/*
 * pointer_attr_bench.c - the driver's pointer-attribute calls, the driver
 * alone beside memhook's answers, in one process (run by
 * pointer_attr_bench.py with the core in LD_PRELOAD, the hooks installed at
 * load and MEMHOOK_POINTER_ATTRIBUTES=1).
 *
 * "driver" calls the real entry point (memhook_hooks_original: bistro's
 * trampoline, or the definition), "memhook" the exported one, which the
 * hooks route to memhook's answer.  Per case: cuPointerGetAttribute
 * (MEMORY_TYPE) and cuPointerGetAttributes (MEMORY_TYPE, DEVICE_ORDINAL,
 * RANGE_START_ADDR, RANGE_SIZE), on malloc'd host memory and on a device
 * allocation; the median of ROUNDS rounds, ns per call.  The four again
 * over ROT host buffers and ROT device allocations asked in turn (a
 * transport's ring: a pointer is not asked twice in a row).  Then the four
 * attributes on host memory again with no current context (RANGE_* are left
 * untouched for memory in no allocation, with a context or without); the
 * set libcudart 13's cudaPointerGetAttributes asks of cuPointerGetAttributes
 * (CONTEXT, MEMORY_TYPE, DEVICE_POINTER, HOST_POINTER, IS_MANAGED,
 * DEVICE_ORDINAL: never answerable together, so memhook passes it through
 * and only its decision costs); cudaPointerGetAttributes, the runtime's own
 * (memhook_hooks_original) beside memhook's, where a libcudart.so.13 loads
 * (on the simulator the runtime's own asks the driver through memhook's
 * wrappers, which answer its calls); and cuCtxGetCurrent and cuCtxGetDevice
 * alone, for scale.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memhook/memhook.h"
#include "memhook_internal/api.h"

typedef int (*get_fn)(void *, int, unsigned long long);
typedef int (*gets_fn)(unsigned, int *, void **, unsigned long long);

#define ROUNDS 9

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

typedef int (*ctx_current_fn)(void **);

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static volatile unsigned sink;

static double time_get(get_fn f, unsigned long long p, long n)
{
    double r[ROUNDS];
    unsigned v = 0;
    for (int k = 0; k < ROUNDS; k++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            f(&v, 2, p);
            sink = v;
        }
        r[k] = (now_ns() - t0) / (double)n;
    }
    qsort(r, ROUNDS, sizeof r[0], cmp);
    return r[ROUNDS / 2];
}

/* The four attributes of ROT pointers in turn, one call each (a
 * transport's pattern: a ring of buffers, each asked once per lap), in
 * ns per call. */
#define ROT 8

static double time_gets_rot(gets_fn f, const unsigned long long *ps, long n)
{
    int attrs[4] = {2, 9, 11, 12};
    unsigned type = 0;
    int dev = 0;
    unsigned long long start = 0, size = 0;
    void *data[4] = {&type, &dev, &start, &size};
    double r[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            f(4, attrs, data, ps[i % ROT]);
            sink = type;
        }
        r[k] = (now_ns() - t0) / (double)n;
    }
    qsort(r, ROUNDS, sizeof r[0], cmp);
    return r[ROUNDS / 2];
}

/* The four attributes of one pointer, asked again and again (the ring's
 * loop over ROT copies of it: one loop times both rows). */
static double time_gets(gets_fn f, unsigned long long p, long n)
{
    unsigned long long ps[ROT];
    for (int i = 0; i < ROT; i++)
        ps[i] = p;
    return time_gets_rot(f, ps, n);
}

/* The attribute set libcudart 13 asks (its cudaPointerGetAttributes). */
static double time_runtime_set(gets_fn f, unsigned long long p, long n)
{
    int attrs[6] = {1, 2, 3, 4, 8, 9};
    void *ctx = NULL, *dptr = NULL, *hptr = NULL;
    unsigned type = 0, managed = 0;
    int dev = 0;
    void *data[6] = {&ctx, &type, &dptr, &hptr, &managed, &dev};
    double r[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            f(6, attrs, data, p);
            sink = type;
        }
        r[k] = (now_ns() - t0) / (double)n;
    }
    qsort(r, ROUNDS, sizeof r[0], cmp);
    return r[ROUNDS / 2];
}

/* cudaPointerAttributes as CUDA 13 lays it out. */
struct rt_attributes {
    int type, device;
    void *device_pointer, *host_pointer;
    long reserved[8];
};
typedef int (*rt_get_fn)(struct rt_attributes *, const void *);

static double time_rt(rt_get_fn f, unsigned long long p, long n)
{
    double r[ROUNDS];
    struct rt_attributes a;
    for (int k = 0; k < ROUNDS; k++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            f(&a, (const void *)(uintptr_t)p);
            sink = (unsigned)a.type;
        }
        r[k] = (now_ns() - t0) / (double)n;
    }
    qsort(r, ROUNDS, sizeof r[0], cmp);
    return r[ROUNDS / 2];
}

typedef int (*ctx_device_fn)(int *);

static double time_ctx_device(ctx_device_fn f, long n)
{
    double r[ROUNDS];
    int dev = 0;
    for (int k = 0; k < ROUNDS; k++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            f(&dev);
            sink = (unsigned)dev;
        }
        r[k] = (now_ns() - t0) / (double)n;
    }
    qsort(r, ROUNDS, sizeof r[0], cmp);
    return r[ROUNDS / 2];
}

static double time_ctx_current(ctx_current_fn f, long n)
{
    double r[ROUNDS];
    void *ctx = NULL;
    for (int k = 0; k < ROUNDS; k++) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            f(&ctx);
            sink = (unsigned)(uintptr_t)ctx;
        }
        r[k] = (now_ns() - t0) / (double)n;
    }
    qsort(r, ROUNDS, sizeof r[0], cmp);
    return r[ROUNDS / 2];
}

/* `pointer_attr_bench CALLS count WHO:CALL:WHERE` (pointer_attr_bench.py
 * --callgrind): CALL n times, nothing else, in count_calls alone - the
 * function callgrind collects in (--toggle-collect), so its instructions
 * per call are the call's, load or not.  WHO: driver, memhook; CALL: get,
 * gets (the four attributes), runtime6 (libcudart 13's set), cuda
 * (cudaPointerGetAttributes); WHERE: host, device, host-held, device-held
 * (below). */
enum count_call { COUNT_GET, COUNT_GETS, COUNT_RUNTIME6, COUNT_CUDA };

__attribute__((noinline)) static void count_calls(enum count_call what, void *fn,
                                                  unsigned long long p, long n)
{
    int four[4] = {2, 9, 11, 12}, six[6] = {1, 2, 3, 4, 8, 9};
    void *ctx = NULL, *dptr = NULL, *hptr = NULL;
    unsigned type = 0, managed = 0;
    int dev = 0;
    unsigned long long start = 0, size = 0;
    void *data4[4] = {&type, &dev, &start, &size};
    void *data6[6] = {&ctx, &type, &dptr, &hptr, &managed, &dev};
    struct rt_attributes a;
    for (long i = 0; i < n; i++) {
        switch (what) {
        case COUNT_GET:
            ((get_fn)fn)(&type, 2, p);
            break;
        case COUNT_GETS:
            ((gets_fn)fn)(4, four, data4, p);
            break;
        case COUNT_RUNTIME6:
            ((gets_fn)fn)(6, six, data6, p);
            break;
        case COUNT_CUDA:
            ((rt_get_fn)fn)(&a, (const void *)(uintptr_t)p);
            type = (unsigned)a.type;
            break;
        }
        sink = type;
    }
}

/* The four attributes of ROT pointers in turn (WHERE `host-rot`,
 * `device-rot`): a loop of its own, so the single-pointer cases above count
 * what they always counted. */
__attribute__((noinline)) static void count_rot(gets_fn fn, const unsigned long long *ps, long n)
{
    int four[4] = {2, 9, 11, 12};
    unsigned type = 0;
    int dev = 0;
    unsigned long long start = 0, size = 0;
    void *data4[4] = {&type, &dev, &start, &size};
    for (long i = 0; i < n; i++) {
        fn(4, four, data4, ps[i % ROT]);
        sink = type;
    }
}

/* WHERE `host-held`, `device-held`: another thread holds the consumer lock
 * (a drain that takes its time) and a third's ALLOCs and FREEs elsewhere
 * wait unfed, so the cache lacks events - none of them about p. */
static struct {
    int (*setcur)(void *);
    int (*alloc)(unsigned long long *, size_t);
    int (*free)(unsigned long long);
    void *ctx;
    atomic_int held, release;
} g_busy;

static void *hold_drain(void *arg)
{
    (void)arg;
    memhook_testing_drain_hold(1);
    atomic_store(&g_busy.held, 1);
    while (!atomic_load(&g_busy.release))
        sched_yield();
    memhook_testing_drain_hold(0);
    return NULL;
}

static void *alloc_elsewhere(void *arg)
{
    (void)arg;
    if (g_busy.setcur(g_busy.ctx) != 0)
        return NULL;
    for (int i = 0; i < 100; i++) {
        unsigned long long x;
        if (g_busy.alloc(&x, 4096) == 0)
            g_busy.free(x);
    }
    return NULL;
}

static int count_main(const char *spec, long n, get_fn get, gets_fn gets, get_fn real_get,
                      gets_fn real_gets, const unsigned long long *hs,
                      const unsigned long long *ds)
{
    char who[16], call[16], where[16];
    if (sscanf(spec, "%15[^:]:%15[^:]:%15s", who, call, where) != 3)
        return 2;
    bool mine = strcmp(who, "memhook") == 0;
    unsigned long long h = hs[0], d = ds[0];
    if (strstr(where, "-rot") != NULL) {
        if (strcmp(call, "gets") != 0)
            return 2;
        const unsigned long long *ps = strncmp(where, "device", 6) == 0 ? ds : hs;
        gets_fn fn = mine ? gets : real_gets;
        count_rot(fn, ps, 2 * ROT);  /* (warm) */
        unsigned long long before = memhook_testing_pointer_attributes_answered();
        count_rot(fn, ps, n);
        printf("answered %llu of %ld\n", memhook_testing_pointer_attributes_answered() - before,
               n);
        return 0;
    }
    unsigned long long p = strncmp(where, "device", 6) == 0 ? d : h;
    pthread_t holder = 0;
    if (strstr(where, "-held") != NULL) {
        /* (what this thread recorded is fed first: only the others' wait) */
        memhook_region r = {.struct_size = sizeof r};
        memhook_query((const void *)(uintptr_t)h, 1, &r);
        pthread_t t;
        if (pthread_create(&holder, NULL, hold_drain, NULL) != 0)
            return 2;
        while (!atomic_load(&g_busy.held))
            sched_yield();
        if (pthread_create(&t, NULL, alloc_elsewhere, NULL) != 0 || pthread_join(t, NULL) != 0)
            return 2;
    }
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
    void *rt_get = rt != NULL ? dlsym(rt, "cudaPointerGetAttributes") : NULL;
    void *real_rt_get = memhook_hooks_original("cudaPointerGetAttributes");
    enum count_call what;
    void *fn;
    if (strcmp(call, "get") == 0) {
        what = COUNT_GET;
        fn = mine ? (void *)get : (void *)real_get;
    } else if (strcmp(call, "gets") == 0 || strcmp(call, "runtime6") == 0) {
        what = call[4] == '\0' ? COUNT_GETS : COUNT_RUNTIME6;
        fn = mine ? (void *)gets : (void *)real_gets;
    } else if (strcmp(call, "cuda") == 0 && rt_get != NULL && real_rt_get != NULL) {
        what = COUNT_CUDA;
        fn = mine ? rt_get : real_rt_get;
        struct rt_attributes a;
        ((rt_get_fn)rt_get)(&a, (const void *)(uintptr_t)p);  /* the runtime initialised */
    } else {
        return 2;
    }
    count_calls(what, fn, p, 16);  /* (warm) */
    unsigned long long before = memhook_testing_pointer_attributes_answered();
    count_calls(what, fn, p, n);
    printf("answered %llu of %ld\n", memhook_testing_pointer_attributes_answered() - before, n);
    if (holder != 0) {
        atomic_store(&g_busy.release, 1);
        pthread_join(holder, NULL);
    }
    return 0;
}

/* The ring's buffers past the first (hs[0], ds[0]): ROT - 1 more of each,
 * kept to the end (distinct buffers). */
static bool make_ring(int (*alloc)(unsigned long long *, size_t), unsigned long long *hs,
                      unsigned long long *ds)
{
    for (int i = 1; i < ROT; i++) {
        void *m = malloc(4096);
        if (m == NULL || alloc(&ds[i], 1 << 20) != 0) {
            fprintf(stderr, "the ring's buffers: allocation failed\n");
            return false;
        }
        hs[i] = (uintptr_t)m;
    }
    return true;
}

static void print_ring(gets_fn real_gets, gets_fn gets, const unsigned long long *hs,
                       const unsigned long long *ds, long n)
{
    printf("%-44s %10.1f %10.1f\n", "host   cuPointerGetAttributes(4), 8 in turn",
           time_gets_rot(real_gets, hs, n), time_gets_rot(gets, hs, n));
    printf("%-44s %10.1f %10.1f\n", "device cuPointerGetAttributes(4), 8 in turn",
           time_gets_rot(real_gets, ds, n), time_gets_rot(gets, ds, n));
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (cuda == NULL) {
        fprintf(stderr, "libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(cuda, "cuInit");
    int (*retain)(void **, int) = (int (*)(void **, int))dlsym(cuda, "cuDevicePrimaryCtxRetain");
    int (*setcur)(void *) = (int (*)(void *))dlsym(cuda, "cuCtxSetCurrent");
    int (*alloc)(unsigned long long *, size_t) =
        (int (*)(unsigned long long *, size_t))dlsym(cuda, "cuMemAlloc_v2");
    get_fn get = (get_fn)dlsym(cuda, "cuPointerGetAttribute");
    gets_fn gets = (gets_fn)dlsym(cuda, "cuPointerGetAttributes");
    ctx_current_fn ctx_current = (ctx_current_fn)dlsym(cuda, "cuCtxGetCurrent");
    get_fn real_get = (get_fn)memhook_hooks_original("cuPointerGetAttribute");
    gets_fn real_gets = (gets_fn)memhook_hooks_original("cuPointerGetAttributes");
    void *ctx;
    unsigned long long ds[ROT];
    if (init(0) || retain(&ctx, 0) || setcur(ctx)) {
        fprintf(stderr, "CUDA setup failed\n");
        return 2;
    }
    if (alloc(&ds[0], 1 << 20)) {
        fprintf(stderr, "CUDA setup failed\n");
        return 2;
    }
    unsigned long long d = ds[0];
    if (real_get == NULL || real_gets == NULL || !memhook_hooks_pointer_attributes()) {
        fprintf(stderr, "memhook's pointer attributes are not on (run pointer_attr_bench.py)\n");
        return 2;
    }
    char *host = malloc(4096);
    unsigned long long h = (uintptr_t)host, hs[ROT] = {h};
    /* The ring's other buffers, made only where they are asked: the other
     * cases keep a map of one allocation, as they always had. */
    if (argc > 3 && strstr(argv[3], "-rot") != NULL && !make_ring(alloc, hs, ds))
        return 2;
    g_busy.setcur = setcur;
    g_busy.alloc = alloc;
    g_busy.free = (int (*)(unsigned long long))dlsym(cuda, "cuMemFree_v2");
    g_busy.ctx = ctx;
    if (argc > 3 && strcmp(argv[2], "count") == 0)
        return count_main(argv[3], n, get, gets, real_get, real_gets, hs, ds);
    unsigned long long before = memhook_testing_pointer_attributes_answered();
    int attrs[4] = {2, 9, 11, 12};
    unsigned type = 0;
    int dev = 0;
    unsigned long long start = 0, size = 0;
    void *data[4] = {&type, &dev, &start, &size};
    get(&(unsigned){0}, 2, h);
    get(&(unsigned){0}, 2, d);
    gets(4, attrs, data, h);
    gets(4, attrs, data, d);
    int answered = (int)(memhook_testing_pointer_attributes_answered() - before);
    printf("memhook answered %d of 4 probe calls (host, device; one and four attributes)\n",
           answered);
    printf("%-44s %10s %10s\n", "ns per call (median of 9 rounds)", "driver", "memhook");
    printf("%-44s %10.1f %10.1f\n", "host   cuPointerGetAttribute(MEMORY_TYPE)",
           time_get(real_get, h, n), time_get(get, h, n));
    printf("%-44s %10.1f %10.1f\n", "host   cuPointerGetAttributes(4 attributes)",
           time_gets(real_gets, h, n), time_gets(gets, h, n));
    printf("%-44s %10.1f %10.1f\n", "device cuPointerGetAttribute(MEMORY_TYPE)",
           time_get(real_get, d, n), time_get(get, d, n));
    printf("%-44s %10.1f %10.1f\n", "device cuPointerGetAttributes(4 attributes)",
           time_gets(real_gets, d, n), time_gets(gets, d, n));
    printf("%-44s %10.1f %10.1f\n", "host   cuPointerGetAttributes(runtime's 6)",
           time_runtime_set(real_gets, h, n), time_runtime_set(gets, h, n));
    printf("%-44s %10.1f %10.1f\n", "device cuPointerGetAttributes(runtime's 6)",
           time_runtime_set(real_gets, d, n), time_runtime_set(gets, d, n));
    /* The runtime: the exported name (memhook's, reloc routes it) and the
     * runtime's own definition. */
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
    rt_get_fn rt_get = rt != NULL ? (rt_get_fn)dlsym(rt, "cudaPointerGetAttributes") : NULL;
    rt_get_fn real_rt_get = (rt_get_fn)memhook_hooks_original("cudaPointerGetAttributes");
    if (rt_get != NULL && real_rt_get != NULL) {
        struct rt_attributes a;
        rt_get(&a, host);  /* (the runtime's first call initialises it) */
        before = memhook_testing_pointer_attributes_answered();
        rt_get(&a, host);
        rt_get(&a, (const void *)(uintptr_t)d);
        printf("memhook answered %d of 2 cudaPointerGetAttributes probe calls "
               "(the runtime's own in the first column)\n",
               (int)(memhook_testing_pointer_attributes_answered() - before));
        printf("%-44s %10.1f %10.1f\n", "host   cudaPointerGetAttributes",
               time_rt(real_rt_get, h, n), time_rt(rt_get, h, n));
        printf("%-44s %10.1f %10.1f\n", "device cudaPointerGetAttributes",
               time_rt(real_rt_get, d, n), time_rt(rt_get, d, n));
    } else {
        printf("cudaPointerGetAttributes: no libcudart.so.13 here, or not hooked (reloc)\n");
    }
    if (setcur(NULL) != 0)
        return 2;
    before = memhook_testing_pointer_attributes_answered();
    gets(4, attrs, data, h);
    int noctx = (int)(memhook_testing_pointer_attributes_answered() - before);
    printf("memhook answered %d of 1 probe call with no current context\n", noctx);
    answered += noctx;
    printf("%-44s %10.1f %10.1f\n", "host   cuPointerGetAttributes(4), no context",
           time_gets(real_gets, h, n), time_gets(gets, h, n));
    if (setcur(ctx) != 0)
        return 2;
    if (ctx_current != NULL)
        printf("%-44s %10.1f\n", "cuCtxGetCurrent alone (for scale)",
               time_ctx_current(ctx_current, n));
    ctx_device_fn ctx_device = (ctx_device_fn)dlsym(cuda, "cuCtxGetDevice");
    if (ctx_device != NULL)
        printf("%-44s %10.1f\n", "cuCtxGetDevice alone (for scale)",
               time_ctx_device(ctx_device, n));
    /* (last: the map holds the ring's allocations from here on) */
    if (!make_ring(alloc, hs, ds))
        return 2;
    print_ring(real_gets, gets, hs, ds, n);
    free(host);
    return answered == 5 ? 0 : 1;
}
