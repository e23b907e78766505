/*
 * LD_PRELOAD shim that counts the CUDA driver calls (and the ioctl/close
 * system calls under them) a process makes, with the time spent in each.
 * Built on the device by tools/gpu/ucx_why.sh:
 *     cc -O2 -shared -fPIC -o ucx_count_shim.so ucx_count_shim.c -ldl -lpthread
 *
 * What it sees:
 *   - calls made through the PLT to libcuda.so.1's exported names listed in
 *     GETTERS and PLAIN below (libuct_cuda.so links libcuda directly, so all of UCX's
 *     direct calls are seen);
 *   - pointers handed out by cuGetProcAddress_v2 / cuGetProcAddress for a
 *     name in those lists, when the pointer handed out is that exported symbol
 *     (the shim then hands out its own wrapper instead);
 *   - ioctl() and close() calls that reach libc through a PLT (libcuda's
 *     do), on any file descriptor.
 * What it cannot see: driver entry points fetched by cuGetProcAddress that
 * resolve to something other than the exported symbol (counted under
 * "gpa_unwrapped", with an "unwrapped:<name>" line each), entry points fetched before the shim was loaded, and
 * raw syscalls made without libc's wrappers.
 *
 * Output, at exit, one line per counted function with a nonzero count,
 * tab-separated:  label pid name calls ns
 * plus lines for the attribute sets asked of cuPointerGetAttribute(s),
 * keyed by the attributes (in the order asked) and the MEMORY_TYPE answered:
 *     label pid <get|gets>:<a,b,c>:mt=<n>:rc=<n> calls ns
 * (mt=-1: MEMORY_TYPE not asked or not answered).
 * to $UCX_COUNT_OUT.<pid> if UCX_COUNT_OUT is set, else to stderr.
 * UCX_COUNT_LABEL names the process in the output.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long u64;

/* The driver entry points counted: the two pointer-attribute getters (written
 * out below: they also record the attributes asked) and PLAIN, each given as
 * name, return type, parameter list, argument list. */
#define GETTERS(X)                                                                \
    X(cuPointerGetAttribute)                                                      \
    X(cuPointerGetAttributes)
#define PLAIN(X)                                                                  \
    X(cuPointerSetAttribute, CUresult, (const void *v, int a, CUdeviceptr p), (v, a, p)) \
    X(cuMemRetainAllocationHandle, CUresult, (u64 * h, void *p), (h, p))          \
    X(cuMemGetAllocationPropertiesFromHandle, CUresult, (void *prop, u64 h), (prop, h)) \
    X(cuMemRelease, CUresult, (u64 h), (h))                                       \
    X(cuMemGetAddressRange_v2, CUresult, (CUdeviceptr * b, size_t *s, CUdeviceptr p), \
      (b, s, p))                                                                  \
    X(cuMemRangeGetAttribute, CUresult,                                           \
      (void *d, size_t ds, int a, CUdeviceptr p, size_t n), (d, ds, a, p, n))     \
    X(cuMemGetHandleForAddressRange, CUresult,                                    \
      (void *h, CUdeviceptr p, size_t n, int t, u64 f), (h, p, n, t, f))          \
    X(cuCtxGetCurrent, CUresult, (void **c), (c))                                 \
    X(cuCtxSetCurrent, CUresult, (void *c), (c))                                  \
    X(cuCtxGetDevice, CUresult, (int *d), (d))                                    \
    X(cuCtxGetId, CUresult, (void *c, u64 *id), (c, id))                          \
    X(cuCtxPushCurrent_v2, CUresult, (void *c), (c))                              \
    X(cuCtxPopCurrent_v2, CUresult, (void **c), (c))                              \
    X(cuCtxSetFlags, CUresult, (unsigned f), (f))                                 \
    X(cuDevicePrimaryCtxRetain, CUresult, (void **c, int d), (c, d))              \
    X(cuDevicePrimaryCtxRelease_v2, CUresult, (int d), (d))                       \
    X(cuDevicePrimaryCtxGetState, CUresult, (int d, unsigned *f, int *a), (d, f, a)) \
    X(cuDeviceGetAttribute, CUresult, (int *v, int a, int d), (v, a, d))          \
    X(cuDeviceTotalMem_v2, CUresult, (size_t *b, int d), (b, d))                  \
    X(cuMemcpyAsync, CUresult, (CUdeviceptr d, CUdeviceptr s, size_t n, void *st), \
      (d, s, n, st))                                                              \
    X(cuMemcpyDtoDAsync_v2, CUresult, (CUdeviceptr d, CUdeviceptr s, size_t n, void *st), \
      (d, s, n, st))                                                              \
    X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr d, const void *s, size_t n), (d, s, n)) \
    X(cuStreamSynchronize, CUresult, (void *st), (st))                            \
    X(cuStreamQuery, CUresult, (void *st), (st))                                  \
    X(cuEventRecord, CUresult, (void *e, void *st), (e, st))                      \
    X(cuEventQuery, CUresult, (void *e), (e))

enum {
#define ENUM_G(name) F_##name,
#define ENUM(name, ret, params, args) F_##name,
    GETTERS(ENUM_G) PLAIN(ENUM)
#undef ENUM
#undef ENUM_G
    F_cuGetProcAddress,
    F_gpa_unwrapped,
    F_ioctl,
    F_close,
    NFUNCS
};

static const char *const names[NFUNCS] = {
#define NAME_G(name) [F_##name] = #name,
#define NAME(name, ret, params, args) [F_##name] = #name,
    GETTERS(NAME_G) PLAIN(NAME)
#undef NAME
#undef NAME_G
    [F_cuGetProcAddress] = "cuGetProcAddress",
    [F_gpa_unwrapped] = "gpa_unwrapped",
    [F_ioctl] = "ioctl",
    [F_close] = "close",
};

/* Counters: one process-wide set, updated with relaxed atomics from any
 * thread; read once, at exit. */
static _Atomic u64 calls[NFUNCS], nanos[NFUNCS];
static void *_Atomic real[NFUNCS];

static inline u64 now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (u64)t.tv_sec * 1000000000u + (u64)t.tv_nsec;
}

static inline void account(int f, u64 t0)
{
    atomic_fetch_add_explicit(&calls[f], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&nanos[f], now_ns() - t0, memory_order_relaxed);
}

/* libcuda may sit in a dlopen()ed module's local scope, where RTLD_NEXT
 * does not look; it is loaded by the time a caller reaches a wrapper. */
static void *libcuda(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    return h != NULL ? h : dlopen("libcuda.so.1", RTLD_LAZY);
}

static void *resolve(int f)
{
    void *p = atomic_load_explicit(&real[f], memory_order_acquire);
    if (p != NULL)
        return p;
    const char *n = names[f];
    if (f == F_cuGetProcAddress)
        n = "cuGetProcAddress_v2";
    if (n[0] == 'c' && n[1] == 'u') {
        void *h = libcuda();
        p = h != NULL ? dlsym(h, n) : NULL;
    } else {
        p = dlsym(RTLD_NEXT, n);
    }
    if (p != NULL)
        atomic_store_explicit(&real[f], p, memory_order_release);
    return p;
}

/* --- attribute sets ------------------------------------------------------ */

#define MAX_SETS 32
#define MAX_KEY 96
struct attr_set {
    char key[MAX_KEY];
    u64 calls, ns;
};
/* Guarded by set_lock; the lock is taken outside the timed region. */
static struct attr_set sets[MAX_SETS];
static unsigned nsets;
static u64 sets_dropped;
static pthread_mutex_t set_lock = PTHREAD_MUTEX_INITIALIZER;

static void note_key(const char *kind, const char *what, u64 ns)
{
    char key[MAX_KEY];
    snprintf(key, sizeof key, "%s:%s", kind, what);
    pthread_mutex_lock(&set_lock);
    unsigned i = 0;
    while (i < nsets && strcmp(sets[i].key, key) != 0)
        i++;
    if (i == nsets && nsets < MAX_SETS)
        memcpy(sets[nsets++].key, key, sizeof key);
    if (i < nsets) {
        sets[i].calls++;
        sets[i].ns += ns;
    } else {
        sets_dropped++;
    }
    pthread_mutex_unlock(&set_lock);
}

static void note_set(const char *fn, const int *attrs, unsigned n, int mt, CUresult rc, u64 ns)
{
    char what[MAX_KEY];
    int len = 0;
    what[0] = '\0';
    for (unsigned i = 0; i < n && len < (int)sizeof what; i++)
        len += snprintf(what + len, sizeof what - (size_t)len, "%s%d", i ? "," : "", attrs[i]);
    if (len < (int)sizeof what)
        snprintf(what + len, sizeof what - (size_t)len, ":mt=%d:rc=%d", mt, rc);
    note_key(fn, what, ns);
}

/* --- the wrappers -------------------------------------------------------- */

#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2

/* The two pointer-attribute calls are written out: they record the set. */
CUresult cuPointerGetAttribute(void *d, int a, CUdeviceptr p)
{
    CUresult (*fn)(void *, int, CUdeviceptr) = resolve(F_cuPointerGetAttribute);
    if (fn == NULL)
        return 3; /* CUDA_ERROR_NOT_INITIALIZED */
    u64 t0 = now_ns();
    CUresult rc = fn(d, a, p);
    u64 dt = now_ns() - t0;
    atomic_fetch_add_explicit(&calls[F_cuPointerGetAttribute], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&nanos[F_cuPointerGetAttribute], dt, memory_order_relaxed);
    int mt = (a == CU_POINTER_ATTRIBUTE_MEMORY_TYPE && rc == 0) ? (int)*(unsigned *)d : -1;
    note_set("get", &a, 1, mt, rc, dt);
    return rc;
}

CUresult cuPointerGetAttributes(unsigned n, int *a, void **d, CUdeviceptr p)
{
    CUresult (*fn)(unsigned, int *, void **, CUdeviceptr) = resolve(F_cuPointerGetAttributes);
    if (fn == NULL)
        return 3;
    u64 t0 = now_ns();
    CUresult rc = fn(n, a, d, p);
    u64 dt = now_ns() - t0;
    atomic_fetch_add_explicit(&calls[F_cuPointerGetAttributes], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&nanos[F_cuPointerGetAttributes], dt, memory_order_relaxed);
    int mt = -1;
    for (unsigned i = 0; rc == 0 && i < n; i++)
        if (a[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE && d[i] != NULL)
            mt = (int)*(unsigned *)d[i];
    note_set("gets", a, n, mt, rc, dt);
    return rc;
}

#define WRAP(name, ret, params, args)                                             \
    ret name params                                                              \
    {                                                                            \
        ret(*fn) params = resolve(F_##name);                                     \
        if (fn == NULL)                                                          \
            return 3;                                                            \
        u64 t0 = now_ns();                                                       \
        ret rc = fn args;                                                        \
        account(F_##name, t0);                                                   \
        return rc;                                                               \
    }
PLAIN(WRAP)

/* Our wrapper for each counted entry point, for cuGetProcAddress to hand out. */
static void *const wrappers[NFUNCS] = {
#define ADDR_G(name) [F_##name] = (void *)name,
#define ADDR(name, ret, params, args) [F_##name] = (void *)name,
    GETTERS(ADDR_G) PLAIN(ADDR)
#undef ADDR
#undef ADDR_G
};

/* The name cuGetProcAddress is asked for: the exported one without a
 * _v2 suffix (the driver picks the version from cudaVersion). */
static int lookup(const char *sym)
{
    size_t n = strlen(sym);
    for (int f = 0; f < F_cuGetProcAddress; f++) {
        size_t m = strlen(names[f]);
        if (m > 3 && strcmp(names[f] + m - 3, "_v2") == 0)
            m -= 3;
        if (n == m && strncmp(sym, names[f], m) == 0)
            return f;
    }
    return -1;
}

static void swap_in(const char *sym, void **pfn)
{
    int f = lookup(sym);
    if (f < 0 || *pfn == NULL)
        return;
    void *exported = resolve(f);
    if (*pfn == wrappers[f])
        return; /* the driver resolved its own export to ours */
    if (exported != NULL && *pfn == exported) {
        *pfn = wrappers[f];
        return;
    }
    atomic_fetch_add_explicit(&calls[F_gpa_unwrapped], 1, memory_order_relaxed);
    note_key("unwrapped", sym, 0);
}

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, u64 flags, int *status)
{
    CUresult (*fn)(const char *, void **, int, u64, int *) = resolve(F_cuGetProcAddress);
    if (fn == NULL)
        return 3;
    u64 t0 = now_ns();
    CUresult rc = fn(sym, pfn, ver, flags, status);
    account(F_cuGetProcAddress, t0);
    if (rc == 0 && pfn != NULL)
        swap_in(sym, pfn);
    return rc;
}

int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int (*fn)(int, unsigned long, void *) = resolve(F_ioctl);
    u64 t0 = now_ns();
    int rc = fn(fd, req, arg);
    account(F_ioctl, t0);
    return rc;
}

int close(int fd)
{
    int (*fn)(int) = resolve(F_close);
    u64 t0 = now_ns();
    int rc = fn(fd);
    account(F_close, t0);
    return rc;
}

/* --- the report ---------------------------------------------------------- */

__attribute__((destructor)) static void report(void)
{
    const char *label = getenv("UCX_COUNT_LABEL");
    const char *out = getenv("UCX_COUNT_OUT");
    FILE *fp = stderr;
    char path[4096];
    if (label == NULL)
        label = "proc";
    if (out != NULL && snprintf(path, sizeof path, "%s.%d", out, (int)getpid()) < (int)sizeof path) {
        FILE *f = fopen(path, "w");
        if (f != NULL)
            fp = f;
    }
    for (int f = 0; f < NFUNCS; f++) {
        u64 c = atomic_load_explicit(&calls[f], memory_order_relaxed);
        if (c != 0)
            fprintf(fp, "%s\t%d\t%s\t%llu\t%llu\n", label, (int)getpid(), names[f], c,
                    (unsigned long long)atomic_load_explicit(&nanos[f], memory_order_relaxed));
    }
    pthread_mutex_lock(&set_lock);
    for (unsigned i = 0; i < nsets; i++)
        fprintf(fp, "%s\t%d\t%s\t%llu\t%llu\n", label, (int)getpid(), sets[i].key,
                sets[i].calls, sets[i].ns);
    if (sets_dropped != 0)
        fprintf(fp, "%s\t%d\tkeys_dropped\t%llu\t0\n", label, (int)getpid(), sets_dropped);
    pthread_mutex_unlock(&set_lock);
    if (fp != stderr)
        fclose(fp);
}
