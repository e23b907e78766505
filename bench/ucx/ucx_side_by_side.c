/*
 * ucx_side_by_side.c - one process of the memhook-vs-UCX 1.22 comparison
 * (driven by bench/ucx/ucx_side_by_side.py, which builds and runs it).
 *
 * The program is linked against libcuda, so its cuMemAllocAsync /
 * cuMemFreeAsync calls go through its own PLT: a GOT rewrite (reloc) and an
 * entry patch (bistro) both see them, as they would in an application.
 *
 * One process measures one configuration:
 *   1. load the hooking library (libmemhook, or UCX's libucs) without
 *      installing anything, make a context and a stream, warm up;
 *   2. `rounds` rounds of `pairs` cuMemAllocAsync+cuMemFreeAsync pairs:
 *      "before";
 *   3. install, timed: memhook_hooks_install(mode), or UCX's first
 *      ucs_memtype_cache_lookup, which creates its memtype cache and with it
 *      the CUDA hooks (UCX_MEMTYPE_CACHE=y, UCX_MODULE_DIR and
 *      UCX_MEM_CUDA_HOOK_MODE are set by the driver);
 *   4. the same rounds again: "after";
 *   5. the memory type each side gives a cuMemAlloc_v2 region, a
 *      cuMemAllocAsync region and a malloc'd host buffer.
 * Before and after are in one process because the driver's pair cost wanders
 * from process to process by up to 2x; UCX cannot remove its hooks, so
 * before/after cannot alternate inside a process - the driver alternates
 * the configurations' processes instead, and side "none" (nothing
 * installed) measures what steps 2 -> 4 drift by themselves.
 *
 *   ucx_side_by_side --side none|memhook|ucx [--mode bistro|reloc|bistro,reloc]
 *                    [--libmemhook PATH] [--libucs PATH] [--rounds 9]
 *                    [--pairs 20000] [--size 64] [--no-drain]
 *
 * Output: human lines, and one `RESULT key=value ...` line for the driver.
 *
 * The UCX declarations below are this file's own, written from UCX 1.22's
 * public headers (ucs/memory/memtype_cache.h, memory_type.h,
 * type/status.h): only what is called here, nothing linked at build time.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memhook/cuda_abi.h"
#include "memhook/memhook.h"

#define BENCH_NAME "ucx_side_by_side"
#include "../common/pair_bench_common.h"

/* ---- the driver, through the PLT ---- */

extern CUresult cuInit(unsigned int flags);
extern CUresult cuDeviceGet(CUdevice *dev, int ordinal);
extern CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev);
extern CUresult cuCtxSetCurrent(CUcontext ctx);
extern CUresult cuStreamCreate(CUstream *s, unsigned int flags);
extern CUresult cuStreamSynchronize(CUstream s);
extern CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s);
extern CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
extern CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size);
extern CUresult cuMemFree_v2(CUdeviceptr p);
extern CUresult cuDriverGetVersion(int *v);

/* ---- UCX 1.22, looked up at run time ---- */

/* ucs_memory_type_t: HOST, CUDA, CUDA_MANAGED, ROCM, ROCM_MANAGED, RDMA,
 * ZE_HOST, ZE_DEVICE, ZE_MANAGED, GAUDI; LAST (= UNKNOWN) is 10. */
static const char *const ucx_type_names[] = {
    "HOST", "CUDA", "CUDA_MANAGED", "ROCM", "ROCM_MANAGED", "RDMA",
    "ZE_HOST", "ZE_DEVICE", "ZE_MANAGED", "GAUDI", "UNKNOWN"};
enum { UCX_TYPE_UNKNOWN = 10, UCX_OK = 0, UCX_ERR_NO_ELEM = -12 };

/* ucs_memory_info_t as 1.22 lays it out: enum, uint8_t sys_dev, base,
 * length, uint8_t flags. */
typedef struct ucx_memory_info {
    int type;
    uint8_t sys_dev;
    void *base_address;
    size_t alloc_length;
    uint8_t mem_flags;
} ucx_memory_info;

/* ucs_status_t is a signed enum (UCS_OK 0, errors negative). */
typedef int (*ucx_lookup_fn)(const void *address, size_t size, ucx_memory_info *out);
typedef const char *(*ucx_status_string_fn)(int status);

/* ---- memhook, looked up at run time (libmemhook is not linked, so the
 * same binary runs every configuration) ---- */

static int (*p_install)(unsigned, char *, size_t);
static void (*p_stats)(memhook_queue_stats *);

/* ---- the measured pairs ---- */

static double round_ns(CUstream s, long pairs, size_t size)
{
    CUdeviceptr p;
    uint64_t t0 = now_ns();
    for (long i = 0; i < pairs; i++) {
        check(cuMemAllocAsync(&p, size, s), "cuMemAllocAsync");
        check(cuMemFreeAsync(p, s), "cuMemFreeAsync");
    }
    uint64_t t = now_ns() - t0;
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    return (double)t / (double)pairs;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double s[256];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static unsigned memhook_mode_bits(const char *mode)
{
    if (strcmp(mode, "bistro") == 0)
        return MEMHOOK_MODE_BISTRO;
    if (strcmp(mode, "reloc") == 0)
        return MEMHOOK_MODE_RELOC;
    if (strcmp(mode, "bistro,reloc") == 0 || strcmp(mode, "bistro+reloc") == 0)
        return MEMHOOK_MODE_BISTRO | MEMHOOK_MODE_RELOC;
    fprintf(stderr, "ucx_side_by_side: unknown mode %s (bistro, reloc, bistro,reloc)\n", mode);
    exit(2);
}

static const char *memhook_type_name(int t)
{
    static const char *const names[] = {"HOST", "CUDA", "CUDA_MANAGED", "CUDA_HOST", "UNKNOWN"};
    return t >= 0 && t <= 4 ? names[t] : "?";
}

/* The type memhook's ALLOC events gave each watched address: what its
 * Python cache is fed with (memhook.memory_type answers from it). */
static void memhook_types(CUdeviceptr sync_p, CUdeviceptr async_p, const char **sync_t,
                          const char **async_t)
{
    static memhook_event buf[4096];
    size_t n;
    *sync_t = *async_t = "no-event";
    while ((n = p_drain(buf, 4096)) != 0) {
        atomic_fetch_add(&g_drained, n);
        for (size_t i = 0; i < n; i++) {
            if (buf[i].kind != MEMHOOK_EVENT_ALLOC)
                continue;
            if (buf[i].address == sync_p)
                *sync_t = memhook_type_name(buf[i].mem_type);
            else if (buf[i].address == async_p)
                *async_t = memhook_type_name(buf[i].mem_type);
        }
    }
}

static const char *ucx_type(ucx_lookup_fn lookup, ucx_status_string_fn status_string,
                            const void *p, char *buf, size_t cap)
{
    ucx_memory_info info;
    memset(&info, 0, sizeof info);
    int st = lookup(p, 1, &info);
    if (st == UCX_OK)
        snprintf(buf, cap, "%s", info.type >= 0 && info.type <= UCX_TYPE_UNKNOWN
                                     ? ucx_type_names[info.type] : "?");
    else if (st == UCX_ERR_NO_ELEM)
        snprintf(buf, cap, "not-in-cache");
    else
        snprintf(buf, cap, "error:%s", status_string ? status_string(st) : "?");
    return buf;
}

int main(int argc, char **argv)
{
    const char *side = NULL, *mode = "bistro", *libmemhook = NULL, *libucs = NULL;
    int rounds = 9, drain = 1;
    long pairs = 20000;
    size_t size = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name) (strcmp(a, name) == 0 && v != NULL && (++i, 1))
        if (OPT("--side"))
            side = v;
        else if (OPT("--mode"))
            mode = v;
        else if (OPT("--libmemhook"))
            libmemhook = v;
        else if (OPT("--libucs"))
            libucs = v;
        else if (OPT("--rounds"))
            rounds = atoi(v);
        else if (OPT("--pairs"))
            pairs = atol(v);
        else if (OPT("--size"))
            size = (size_t)atol(v);
        else if (strcmp(a, "--no-drain") == 0)
            drain = 0;
        else {
            fprintf(stderr, "ucx_side_by_side: bad argument %s (see the top of "
                            "bench/ucx/ucx_side_by_side.c)\n", a);
            return 2;
        }
#undef OPT
    }
    int is_mh = side && strcmp(side, "memhook") == 0, is_ucx = side && strcmp(side, "ucx") == 0;
    if (side == NULL || (!is_mh && !is_ucx && strcmp(side, "none") != 0) ||
        (is_mh && libmemhook == NULL) || (is_ucx && libucs == NULL) || rounds < 0 ||
        rounds > 256 || pairs < 1) {
        fprintf(stderr, "usage: ucx_side_by_side --side none|memhook|ucx [--mode bistro|reloc|"
                        "bistro,reloc] [--libmemhook PATH] [--libucs PATH] [--rounds 0-256] "
                        "[--pairs N] [--size B] [--no-drain]\n");
        return 2;
    }

    /* 1. The library in, nothing installed (its load timed: a library's
     * constructors may install hooks of their own). */
    void *lib = NULL;
    uint64_t load0 = now_ns();
    ucx_lookup_fn ucx_lookup = NULL;
    ucx_status_string_fn ucx_status_string = NULL;
    if (is_mh) {
        lib = dlopen(libmemhook, RTLD_NOW | RTLD_GLOBAL);
        if (lib == NULL) {
            fprintf(stderr, "ucx_side_by_side: %s\n", dlerror());
            return 2;
        }
        p_install = need(lib, "memhook_hooks_install");
        p_drain = need(lib, "memhook_events_drain");
    drainer_resolve(lib);
        p_stats = need(lib, "memhook_queue_stats_get");
    } else if (is_ucx) {
        lib = dlopen(libucs, RTLD_NOW | RTLD_GLOBAL);
        if (lib == NULL) {
            fprintf(stderr, "ucx_side_by_side: %s\n", dlerror());
            return 2;
        }
        ucx_lookup = (ucx_lookup_fn)need(lib, "ucs_memtype_cache_lookup");
        ucx_status_string = (ucx_status_string_fn)dlsym(lib, "ucs_status_string");
    }
    double load_us = (double)(now_ns() - load0) / 1e3;

    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */), "cuStreamCreate");
    int version = 0;
    cuDriverGetVersion(&version);
    Dl_info info;
    const char *driver = dladdr((void *)cuInit, &info) && info.dli_fname ? info.dli_fname : "?";

    pthread_t drain_thread;
    int drainer_on = is_mh && drain;
    if (drainer_on && pthread_create(&drain_thread, NULL, drainer, NULL) != 0) {
        perror("pthread_create");
        return 2;
    }

    /* 2. Before. */
    double before[256], after[256];
    round_ns(s, pairs, size); /* warm: the pool, the PLT slots, the caches */
    for (int r = 0; r < rounds; r++)
        before[r] = round_ns(s, pairs, size);

    /* 3. Install. */
    double install_us = 0;
    uint64_t t0 = now_ns();
    if (is_mh) {
        char why[512] = "";
        int rc = p_install(memhook_mode_bits(mode), why, sizeof why);
        install_us = (double)(now_ns() - t0) / 1e3;
        if (rc != 0) {
            fprintf(stderr, "ucx_side_by_side: memhook_hooks_install(%s) failed: %d %s\n", mode,
                    rc, why);
            return 4;
        }
    } else if (is_ucx) {
        /* The first lookup creates the cache and installs the hooks; a host
         * pointer is asked, which any cache answers "not here". */
        static char probe[64];
        ucx_memory_info mi;
        int st = ucx_lookup(probe, 1, &mi);
        install_us = (double)(now_ns() - t0) / 1e3;
        if (st != UCX_OK && st != UCX_ERR_NO_ELEM) {
            fprintf(stderr, "ucx_side_by_side: UCX's first ucs_memtype_cache_lookup gave %d "
                            "(%s): no memtype cache, so no hooks (is UCX_MEMTYPE_CACHE=y "
                            "set, and UCX_MODULE_DIR the folder with libucm_cuda.so?)\n",
                    st, ucx_status_string ? ucx_status_string(st) : "?");
            return 4;
        }
    }

    /* 4. After. */
    round_ns(s, pairs, size); /* the hooks' own first-call work (a lane, ...) */
    for (int r = 0; r < rounds; r++)
        after[r] = round_ns(s, pairs, size);

    /* 5. Types.  memhook's drainer stops first, so that the two ALLOCs'
     * events wait in the queue for memhook_types. */
    if (drainer_on) {
        atomic_store(&g_drainer_stop, 1);
        pthread_join(drain_thread, NULL);
    }
    CUdeviceptr sync_p = 0, async_p = 0;
    check(cuMemAlloc_v2(&sync_p, 1 << 20), "cuMemAlloc_v2");
    check(cuMemAllocAsync(&async_p, 1 << 20, s), "cuMemAllocAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    char *host = malloc(4096);
    const char *t_sync = "-", *t_async = "-", *t_host = "-";
    char b1[64], b2[64], b3[64];
    if (is_ucx) {
        t_sync = ucx_type(ucx_lookup, ucx_status_string, (void *)(uintptr_t)sync_p, b1, sizeof b1);
        t_async = ucx_type(ucx_lookup, ucx_status_string, (void *)(uintptr_t)async_p, b2,
                           sizeof b2);
        t_host = ucx_type(ucx_lookup, ucx_status_string, host, b3, sizeof b3);
    }
    unsigned long long produced = 0, expected = 0;
    if (is_mh) {
        memhook_types(sync_p, async_p, &t_sync, &t_async);
        t_host = "no-event";
        memhook_queue_stats st;
        p_stats(&st);
        produced = (unsigned long long)st.produced;
        /* The hooked pairs (warm-up round included) and the two ALLOCs. */
        expected = 2ull * (unsigned long long)pairs * (unsigned long long)(rounds + 1) + 2;
    }
    check(cuMemFree_v2(sync_p), "cuMemFree_v2");
    check(cuMemFreeAsync(async_p, s), "cuMemFreeAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    free(host);

    double mb = rounds ? median(before, rounds) : 0, ma = rounds ? median(after, rounds) : 0;
    printf("side %s mode %s: driver %s (version %d); %d rounds x %ld pairs of %zu B; "
           "load %.1f us, install %.1f us; pair before %.1f ns, after %.1f ns, added %.1f ns; "
           "cuMemAlloc_v2 region %s, cuMemAllocAsync region %s, host %s\n",
           side, is_mh || is_ucx ? mode : "-", driver, version, rounds, pairs, size, load_us,
           install_us, mb, ma, ma - mb, t_sync, t_async, t_host);
    printf("RESULT side=%s mode=%s rounds=%d pairs=%ld size=%zu before_ns=%.2f after_ns=%.2f "
           "added_ns=%.2f load_us=%.2f install_us=%.2f type_sync=%s type_async=%s type_host=%s "
           "events_expected=%llu events_produced=%llu events_drained=%llu driver_version=%d\n",
           side, is_mh || is_ucx ? mode : "-", rounds, pairs, size, mb, ma, ma - mb, load_us,
           install_us,
           t_sync, t_async, t_host, expected, produced,
           (unsigned long long)atomic_load(&g_drained), version);
    fflush(stdout);
    if (is_mh && produced != expected) {
        fprintf(stderr, "ucx_side_by_side: memhook recorded %llu events, the calls make %llu\n",
                produced, expected);
        return 5;
    }
    /* _exit: UCX's and memhook's destructors are not what is measured, and a
     * hooked process's teardown order is not this bench's question. */
    _exit(0);
}
