/*
 * test_cudart.c - exercises memhook's simulated CUDA runtime against the
 * simulated driver.  Built twice by tests/sim/test_cudart.py: linked to
 * libcudart.so.13 and to libcudart_static.a.  Exit 0 = every check passed.
 *
 *   test_cudart            everything (run with MEMHOOK_SIM_DEVICE_MEMORY set
 *                          small so that the out-of-memory checks are cheap)
 *   test_cudart nodriver   run where libcuda.so.1 is missing or lacks
 *                          cuGetProcAddress_v2: the runtime reports
 *                          cudaErrorInsufficientDriver
 *
 * The driver is opened here too (dlopen + cuGetProcAddress, like the runtime)
 * only to check which context each thread ended up with.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cudart_sim.h"

static atomic_int failures;   /* bumped from several threads */

#define CHECK(cond)                                                               \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                           \
        }                                                                         \
    } while (0)

/* Expect a runtime call to return `want`; print both names otherwise. */
#define EXPECT(call, want)                                                        \
    do {                                                                          \
        cudaError_t got_ = (call);                                                \
        if (got_ != (want)) {                                                     \
            fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s)\n", __FILE__, \
                    __LINE__, #call, (int)got_, cudaGetErrorName(got_), (int)(want), \
                    cudaGetErrorName(want));                                      \
            failures++;                                                           \
        }                                                                         \
    } while (0)

#define OK(call) EXPECT(call, cudaSuccess)

/* ---- the driver, only to look at contexts ------------------------------------ */

typedef int (*gpa_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*ctx_get_current_fn)(void **);
typedef int (*primary_retain_fn)(void **, int);
typedef int (*primary_release_fn)(int);
static ctx_get_current_fn drv_ctx_get_current;
static primary_retain_fn drv_primary_retain;
static primary_release_fn drv_primary_release;

static void open_driver_for_checks(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL);
    if (lib == NULL)
        return;
    gpa_fn gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
    CHECK(gpa != NULL);
    if (gpa == NULL)
        return;
    int status = -1;
    CHECK(gpa("cuCtxGetCurrent", (void **)&drv_ctx_get_current, 13000, 0, &status) == 0);
    CHECK(gpa("cuDevicePrimaryCtxRetain", (void **)&drv_primary_retain, 13000, 0, &status) == 0);
    CHECK(gpa("cuDevicePrimaryCtxRelease", (void **)&drv_primary_release, 13000, 0, &status) == 0);
}

/* The primary context of device 0 (retained and released again). */
static void *primary_ctx0(void)
{
    void *ctx = NULL;
    if (drv_primary_retain == NULL || drv_primary_retain(&ctx, 0) != 0)
        return NULL;
    drv_primary_release(0);
    return ctx;
}

static void *current_ctx(void)
{
    void *ctx = NULL;
    if (drv_ctx_get_current == NULL || drv_ctx_get_current(&ctx) != 0)
        return NULL;
    return ctx;
}

/* ---- symbols registered the way nvcc's host code registers them --------------- */

static char fake_fatbin[16];
static void **module_handle;
static char sym_x[64];          /* __device__ char x[64]; (host shadow) */
static int sym_c;               /* __constant__ int c; */
static void *sym_m_slot;        /* __managed__ double m[16]; (pointer slot) */
static int not_a_symbol;

static void fake_kernel(void) {}

__attribute__((constructor)) static void register_module(void)
{
    module_handle = __cudaRegisterFatBinary(fake_fatbin);
    __cudaRegisterVar(module_handle, sym_x, (char *)"x", "x", 0, sizeof(sym_x), 0, 0);
    __cudaRegisterVar(module_handle, (char *)&sym_c, (char *)"c", "c", 0, sizeof(sym_c), 1, 0);
    __cudaRegisterManagedVar(module_handle, &sym_m_slot, (char *)"m", "m", 0,
                             16 * sizeof(double), 0, 0);
    __cudaRegisterFunction(module_handle, (const char *)fake_kernel, (char *)"_Z1kv", "_Z1kv",
                           -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(module_handle);
}

/* ---- helpers ----------------------------------------------------------------- */

static enum cudaMemoryType type_of(const void *p, int *device)
{
    struct cudaPointerAttributes a;
    memset(&a, 0xab, sizeof(a));
    cudaError_t err = cudaPointerGetAttributes(&a, p);
    if (err != cudaSuccess) {
        fprintf(stderr, "cudaPointerGetAttributes(%p) = %s\n", p, cudaGetErrorName(err));
        failures++;
        return (enum cudaMemoryType)-1;
    }
    if (device)
        *device = a.device;
    return a.type;
}

static void check_attrs(const void *p, enum cudaMemoryType type, int device)
{
    struct cudaPointerAttributes a;
    memset(&a, 0xab, sizeof(a));
    OK(cudaPointerGetAttributes(&a, p));
    CHECK(a.type == type);
    if (a.type != type)
        fprintf(stderr, "  %p: type %d, want %d\n", p, (int)a.type, (int)type);
    switch (type) {
    case cudaMemoryTypeDevice:
        CHECK(a.device == device);
        CHECK(a.devicePointer == p);
        CHECK(a.hostPointer == NULL);
        break;
    case cudaMemoryTypeManaged:
        CHECK(a.device == device);
        CHECK(a.devicePointer == p);
        CHECK(a.hostPointer == p);
        break;
    case cudaMemoryTypeHost:
        CHECK(a.hostPointer == p);
        CHECK(a.device >= 0);
        break;
    case cudaMemoryTypeUnregistered:
        /* libcudart 13 on an H200: no device alias, the host alias is p */
        CHECK(a.device == cudaInvalidDeviceId);
        CHECK(a.devicePointer == NULL);
        CHECK(a.hostPointer == p);
        break;
    }
}

/* ---- the checks ---------------------------------------------------------------- */

static void test_versions_and_errors(void)
{
    int v = 0;
    EXPECT(cudaGetLastError(), cudaSuccess);
    OK(cudaRuntimeGetVersion(&v));
    CHECK(v == 13000);
    v = 0;
    OK(cudaDriverGetVersion(&v));
    CHECK(v >= 13000);
    EXPECT(cudaRuntimeGetVersion(NULL), cudaErrorInvalidValue);
    EXPECT(cudaDriverGetVersion(NULL), cudaErrorInvalidValue);

    CHECK(strcmp(cudaGetErrorName(cudaSuccess), "cudaSuccess") == 0);
    CHECK(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);
    CHECK(strcmp(cudaGetErrorName(cudaErrorInvalidSymbol), "cudaErrorInvalidSymbol") == 0);
    CHECK(strcmp(cudaGetErrorString(cudaSuccess), "no error") == 0);
    CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0);
    CHECK(strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code") == 0);
    CHECK(strcmp(cudaGetErrorName((cudaError_t)12345), "unrecognized error code") == 0);
    CHECK(cudaErrorInsufficientDriver == 35 && cudaErrorInitializationError == 3 &&
          cudaErrorInvalidSymbol == 13 && cudaErrorHostMemoryAlreadyRegistered == 712);

    /* Sticky last error: recorded on failure, kept across successes, cleared
     * by cudaGetLastError only. */
    EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError(), cudaSuccess);
    EXPECT(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
    int dev = -1;
    OK(cudaGetDevice(&dev));
    EXPECT(cudaPeekAtLastError(), cudaErrorInvalidValue);
    EXPECT(cudaPeekAtLastError(), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError(), cudaSuccess);
    EXPECT(cudaPeekAtLastError(), cudaSuccess);
}

static void test_devices(void)
{
    int count = 0, dev = -1;
    OK(cudaGetDeviceCount(&count));
    CHECK(count >= 1);
    EXPECT(cudaGetDeviceCount(NULL), cudaErrorInvalidValue);
    OK(cudaGetDevice(&dev));
    CHECK(dev == 0);
    EXPECT(cudaGetDevice(NULL), cudaErrorInvalidValue);
    EXPECT(cudaSetDevice(count), cudaErrorInvalidDevice);
    EXPECT(cudaSetDevice(-1), cudaErrorInvalidDevice);
    EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
    OK(cudaSetDevice(0));
    OK(cudaGetDevice(&dev));
    CHECK(dev == 0);
    /* cudaSetDevice makes the primary context current at once. */
    CHECK(current_ctx() != NULL);
    CHECK(current_ctx() == primary_ctx0());
    OK(cudaDeviceSynchronize());
}

static void test_device_memory(void)
{
    void *p = (void *)1;
    OK(cudaMalloc(&p, 0));
    CHECK(p == NULL);
    OK(cudaFree(NULL));
    EXPECT(cudaMalloc(NULL, 64), cudaErrorInvalidValue);

    unsigned char host[4096], back[4096];
    void *d = NULL, *d2 = NULL;
    OK(cudaMalloc(&d, sizeof(host)));
    CHECK(d != NULL);
    OK(cudaMalloc(&d2, sizeof(host)));
    check_attrs(d, cudaMemoryTypeDevice, 0);
    /* An interior pointer is device memory too. */
    check_attrs((char *)d + 100, cudaMemoryTypeDevice, 0);

    OK(cudaMemset(d, 0x5a, sizeof(host)));
    memset(back, 0, sizeof(back));
    OK(cudaMemcpy(back, d, sizeof(back), cudaMemcpyDeviceToHost));
    CHECK(back[0] == 0x5a && back[4095] == 0x5a);

    for (size_t i = 0; i < sizeof(host); i++)
        host[i] = (unsigned char)(i * 7);
    OK(cudaMemcpy(d, host, sizeof(host), cudaMemcpyHostToDevice));
    OK(cudaMemcpy(d2, d, sizeof(host), cudaMemcpyDeviceToDevice));
    memset(back, 0, sizeof(back));
    OK(cudaMemcpy(back, d2, sizeof(back), cudaMemcpyDefault));
    CHECK(memcmp(back, host, sizeof(host)) == 0);

    OK(cudaMemset_ptds(d2, 0x11, 100));
    OK(cudaMemcpy_ptds(back, d2, 100, cudaMemcpyDeviceToHost));
    CHECK(back[0] == 0x11 && back[99] == 0x11);

    unsigned char h2[16] = {0};
    OK(cudaMemcpy(h2, host, sizeof(h2), cudaMemcpyHostToHost));
    CHECK(memcmp(h2, host, sizeof(h2)) == 0);
    EXPECT(cudaMemcpy(back, d, 16, (enum cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
    OK(cudaMemcpy(back, d, 0, cudaMemcpyDeviceToHost));

    OK(cudaFree(d));
    OK(cudaFree(d2));
    /* Freed device memory is no longer known. */
    CHECK(type_of(d, NULL) == cudaMemoryTypeUnregistered);
    EXPECT(cudaFree(d), cudaErrorInvalidValue);
    EXPECT(cudaGetLastError(), cudaErrorInvalidValue);

    /* Pitched. */
    void *pp = NULL;
    size_t pitch = 0;
    OK(cudaMallocPitch(&pp, &pitch, 100, 10));
    CHECK(pp != NULL && pitch >= 100);
    check_attrs(pp, cudaMemoryTypeDevice, 0);
    EXPECT(cudaMallocPitch(&pp, NULL, 100, 10), cudaErrorInvalidValue);
    OK(cudaFree(pp));
}

static void test_managed(void)
{
    void *m = NULL;
    OK(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal));
    CHECK(m != NULL);
    check_attrs(m, cudaMemoryTypeManaged, 0);
    /* Managed memory is usable from the host. */
    ((volatile int *)m)[0] = 42;
    int v = 0;
    OK(cudaMemcpy(&v, m, sizeof(v), cudaMemcpyDefault));
    CHECK(v == 42);
    OK(cudaFree(m));

    void *h = NULL;
    OK(cudaMallocManaged(&h, 64, cudaMemAttachHost));
    check_attrs(h, cudaMemoryTypeManaged, 0);
    OK(cudaFree(h));
    m = (void *)1;
    OK(cudaMallocManaged(&m, 0, cudaMemAttachGlobal)); /* as libcudart 13 answers */
    CHECK(m == NULL);
    EXPECT(cudaMallocManaged(&m, 64, 0), cudaErrorInvalidValue);
    EXPECT(cudaMallocManaged(NULL, 64, cudaMemAttachGlobal), cudaErrorInvalidValue);
}

static void test_host_memory(void)
{
    void *h = NULL, *h2 = NULL, *h3 = NULL;
    OK(cudaMallocHost(&h, 4096));
    CHECK(h != NULL);
    check_attrs(h, cudaMemoryTypeHost, 0);
    memset(h, 0x33, 4096);                      /* page-locked host memory: host-usable */
    OK(cudaHostAlloc(&h2, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    check_attrs(h2, cudaMemoryTypeHost, 0);
    OK(cudaHostAlloc(&h3, 100, cudaHostAllocWriteCombined));
    check_attrs(h3, cudaMemoryTypeHost, 0);
    EXPECT(cudaHostAlloc(&h3, 100, 0x80), cudaErrorInvalidValue);
    EXPECT(cudaMallocHost(NULL, 100), cudaErrorInvalidValue);
    OK(cudaFreeHost(h));
    OK(cudaFreeHost(h2));
    OK(cudaFreeHost(h3));
    OK(cudaFreeHost(NULL));

    /* Registered memory. */
    size_t len = 3 * 4096;
    void *buf = aligned_alloc(4096, len);
    CHECK(buf != NULL);
    check_attrs(buf, cudaMemoryTypeUnregistered, 0);
    OK(cudaHostRegister(buf, len, cudaHostRegisterDefault));
    check_attrs(buf, cudaMemoryTypeHost, 0);
    check_attrs((char *)buf + 5000, cudaMemoryTypeHost, 0);
    EXPECT(cudaHostRegister(buf, len, cudaHostRegisterDefault),
           cudaErrorHostMemoryAlreadyRegistered);
    OK(cudaHostUnregister(buf));
    EXPECT(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
    check_attrs(buf, cudaMemoryTypeUnregistered, 0);
    OK(cudaHostRegister(buf, len, cudaHostRegisterMapped | cudaHostRegisterPortable));
    check_attrs(buf, cudaMemoryTypeHost, 0);
    OK(cudaHostUnregister(buf));
    EXPECT(cudaHostRegister(NULL, len, 0), cudaErrorInvalidValue);
    EXPECT(cudaHostRegister(buf, len, 0x100), cudaErrorInvalidValue);
    free(buf);
    (void)cudaGetLastError();

    /* Plain host memory: Unregistered, and the call succeeds. */
    int on_stack = 0;
    check_attrs(&on_stack, cudaMemoryTypeUnregistered, 0);
    char *heap = malloc(64);
    check_attrs(heap, cudaMemoryTypeUnregistered, 0);
    free(heap);
    check_attrs(NULL, cudaMemoryTypeUnregistered, 0);
    EXPECT(cudaPointerGetAttributes(NULL, &on_stack), cudaErrorInvalidValue);
}

static void test_streams_and_pools(void)
{
    cudaStream_t s = NULL, nb = NULL;
    OK(cudaStreamCreate(&s));
    CHECK(s != NULL);
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    EXPECT(cudaStreamCreate(NULL), cudaErrorInvalidValue);

    unsigned char host[256], back[256];
    for (size_t i = 0; i < sizeof(host); i++)
        host[i] = (unsigned char)(255 - i);
    void *d = NULL;
    OK(cudaMalloc(&d, sizeof(host)));
    OK(cudaMemcpyAsync(d, host, sizeof(host), cudaMemcpyHostToDevice, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaMemcpyAsync_ptsz(back, d, sizeof(back), cudaMemcpyDeviceToHost, cudaStreamPerThread));
    OK(cudaStreamSynchronize_ptsz(cudaStreamPerThread));
    CHECK(memcmp(back, host, sizeof(host)) == 0);
    OK(cudaMemsetAsync(d, 1, 10, nb));
    OK(cudaMemsetAsync_ptsz((char *)d + 10, 2, 10, cudaStreamPerThread));
    OK(cudaStreamSynchronize(nb));
    OK(cudaMemcpy(back, d, 20, cudaMemcpyDeviceToHost));
    CHECK(back[0] == 1 && back[9] == 1 && back[10] == 2 && back[19] == 2);
    OK(cudaFree(d));

    /* Stream-ordered allocation from the default pool. */
    cudaMemPool_t def = NULL;
    OK(cudaDeviceGetDefaultMemPool(&def, 0));
    CHECK(def != NULL);
    EXPECT(cudaDeviceGetDefaultMemPool(&def, 99), cudaErrorInvalidDevice);
    EXPECT(cudaDeviceGetDefaultMemPool(NULL, 0), cudaErrorInvalidValue);
    void *a = NULL, *b = NULL;
    OK(cudaMallocAsync(&a, 5000, s));
    OK(cudaMallocAsync_ptsz(&b, 300, cudaStreamPerThread));
    CHECK(a != NULL && b != NULL);
    check_attrs(a, cudaMemoryTypeDevice, 0);
    check_attrs(b, cudaMemoryTypeDevice, 0);
    OK(cudaMemsetAsync(a, 0x7e, 5000, s));
    OK(cudaFreeAsync(a, s));
    OK(cudaFreeAsync_ptsz(b, cudaStreamPerThread));
    OK(cudaFreeAsync(NULL, s));
    OK(cudaStreamSynchronize(s));
    OK(cudaMallocAsync(&a, 0, s));
    CHECK(a == NULL);

    /* An explicit device pool. */
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool = NULL;
    OK(cudaMemPoolCreate(&pool, &props));
    CHECK(pool != NULL);
    EXPECT(cudaMemPoolCreate(&pool, NULL), cudaErrorInvalidValue);
    void *pa = NULL, *pb = NULL;
    OK(cudaMallocFromPoolAsync(&pa, 4096, pool, s));
    OK(cudaMallocFromPoolAsync_ptsz(&pb, 100, pool, cudaStreamPerThread));
    check_attrs(pa, cudaMemoryTypeDevice, 0);
    check_attrs(pb, cudaMemoryTypeDevice, 0);
    EXPECT(cudaMallocFromPoolAsync(&pa, 16, NULL, s), cudaErrorInvalidValue);
    OK(cudaFreeAsync(pa, s));
    OK(cudaFreeAsync_ptsz(pb, cudaStreamPerThread));
    OK(cudaStreamSynchronize(s));
    OK(cudaMemPoolDestroy(pool));

    OK(cudaStreamDestroy(s));
    OK(cudaStreamDestroy(nb));
    (void)cudaGetLastError();
}

static void test_mem_info_and_oom(void)
{
    size_t free0 = 0, total = 0, free1 = 0;
    OK(cudaMemGetInfo(&free0, &total));
    CHECK(total > 0 && free0 <= total);
    EXPECT(cudaMemGetInfo(NULL, &total), cudaErrorInvalidValue);
    const char *limit = getenv("MEMHOOK_SIM_DEVICE_MEMORY");
    if (limit != NULL)
        CHECK(total <= (size_t)1 << 30);   /* the tests set a small arena */

    void *d = NULL;
    OK(cudaMalloc(&d, 1 << 20));
    OK(cudaMemGetInfo(&free1, &total));
    CHECK(free1 + (1 << 20) <= free0);
    OK(cudaFree(d));

    /* Past the arena: out of memory, NULL out, sticky last error. */
    (void)cudaGetLastError();
    void *big = (void *)1;
    EXPECT(cudaMalloc(&big, total + (1 << 20)), cudaErrorMemoryAllocation);
    CHECK(big == NULL);
    EXPECT(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
    EXPECT(cudaGetLastError(), cudaSuccess);
    void *m = (void *)1;
    EXPECT(cudaMallocManaged(&m, total + (1 << 20), cudaMemAttachGlobal),
           cudaErrorMemoryAllocation);
    CHECK(m == NULL);
    void *a = (void *)1;
    EXPECT(cudaMallocAsync(&a, total + (1 << 20), NULL), cudaErrorMemoryAllocation);
    CHECK(a == NULL);
    (void)cudaGetLastError();
}

static void test_symbols(void)
{
    void *x = NULL, *x2 = NULL, *c = NULL;
    size_t size = 0;
    OK(cudaGetSymbolAddress(&x, sym_x));
    CHECK(x != NULL);
    check_attrs(x, cudaMemoryTypeDevice, 0);
    OK(cudaGetSymbolAddress(&x2, sym_x));
    CHECK(x2 == x);
    OK(cudaGetSymbolSize(&size, sym_x));
    CHECK(size == sizeof(sym_x));
    OK(cudaGetSymbolAddress(&c, &sym_c));
    CHECK(c != NULL && c != x);
    OK(cudaGetSymbolSize(&size, &sym_c));
    CHECK(size == sizeof(int));

    char src[64], dst[64];
    for (int i = 0; i < 64; i++)
        src[i] = (char)('A' + i % 26);
    OK(cudaMemcpyToSymbol(sym_x, src, sizeof(src), 0, cudaMemcpyHostToDevice));
    memset(dst, 0, sizeof(dst));
    OK(cudaMemcpyFromSymbol(dst, sym_x, sizeof(dst), 0, cudaMemcpyDeviceToHost));
    CHECK(memcmp(src, dst, sizeof(src)) == 0);
    /* Through the address, too. */
    memset(dst, 0, sizeof(dst));
    OK(cudaMemcpy(dst, x, sizeof(dst), cudaMemcpyDeviceToHost));
    CHECK(memcmp(src, dst, sizeof(src)) == 0);
    OK(cudaMemcpyToSymbol_ptds(sym_x, "zz", 2, 10, cudaMemcpyHostToDevice));
    OK(cudaMemcpyFromSymbol_ptds(dst, sym_x, 4, 9, cudaMemcpyDefault));
    CHECK(dst[0] == src[9] && dst[1] == 'z' && dst[2] == 'z' && dst[3] == src[12]);
    int cv = 1234, cb = 0;
    OK(cudaMemcpyToSymbol(&sym_c, &cv, sizeof(cv), 0, cudaMemcpyHostToDevice));
    OK(cudaMemcpyFromSymbol(&cb, &sym_c, sizeof(cb), 0, cudaMemcpyDeviceToHost));
    CHECK(cb == 1234);

    /* Range and direction errors. */
    EXPECT(cudaMemcpyToSymbol(sym_x, src, 65, 0, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT(cudaMemcpyToSymbol(sym_x, src, 8, 60, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT(cudaMemcpyToSymbol(sym_x, src, 8, 0, cudaMemcpyDeviceToHost),
           cudaErrorInvalidMemcpyDirection);
    EXPECT(cudaMemcpyFromSymbol(dst, sym_x, 8, 0, cudaMemcpyHostToDevice),
           cudaErrorInvalidMemcpyDirection);

    /* Unknown symbols. */
    void *u = (void *)1;
    EXPECT(cudaGetSymbolAddress(&u, &not_a_symbol), cudaErrorInvalidSymbol);
    EXPECT(cudaGetLastError(), cudaErrorInvalidSymbol);
    EXPECT(cudaGetSymbolSize(&size, &not_a_symbol), cudaErrorInvalidSymbol);
    EXPECT(cudaMemcpyToSymbol(&not_a_symbol, src, 4, 0, cudaMemcpyHostToDevice),
           cudaErrorInvalidSymbol);
    EXPECT(cudaGetSymbolAddress(&u, NULL), cudaErrorInvalidSymbol);
    EXPECT(cudaGetSymbolAddress(NULL, sym_x), cudaErrorInvalidValue);
    (void)cudaGetLastError();

    /* Managed: __cudaInitModule fills the host pointer slot, as the code
     * nvcc generates for a __managed__ variable expects. */
    CHECK(__cudaInitModule(module_handle) == 1);
    CHECK(sym_m_slot != NULL);
    check_attrs(sym_m_slot, cudaMemoryTypeManaged, 0);
    void *m = NULL, *m2 = NULL;
    OK(cudaGetSymbolAddress(&m, sym_m_slot));       /* &m in nvcc's host code */
    OK(cudaGetSymbolAddress(&m2, &sym_m_slot));     /* the registered slot */
    CHECK(m == sym_m_slot && m2 == sym_m_slot);
    OK(cudaGetSymbolSize(&size, sym_m_slot));
    CHECK(size == 16 * sizeof(double));
    ((volatile double *)sym_m_slot)[3] = 2.5;
    double dv = 0;
    OK(cudaMemcpyFromSymbol(&dv, sym_m_slot, sizeof(dv), 3 * sizeof(double),
                            cudaMemcpyDeviceToHost));
    CHECK(dv == 2.5);
}

/* ---- threads ------------------------------------------------------------------- */

#define NTHREADS 8

struct thread_result {
    void *ctx;
    void *sym;
    int device;
    int ok;
};

static void *thread_main(void *arg)
{
    struct thread_result *r = arg;
    int before = failures;
    /* A fresh thread has no context until its first runtime call. */
    CHECK(current_ctx() == NULL);
    EXPECT(cudaGetLastError(), cudaSuccess);     /* not the main thread's */
    OK(cudaGetDevice(&r->device));
    for (int i = 0; i < 20; i++) {
        void *d = NULL;
        OK(cudaMalloc(&d, 1000 + (size_t)i * 64));
        check_attrs(d, cudaMemoryTypeDevice, 0);
        OK(cudaMemset(d, i, 64));
        OK(cudaFree(d));
    }
    r->ctx = current_ctx();
    OK(cudaGetSymbolAddress(&r->sym, sym_x));
    /* Errors stay in their thread. */
    EXPECT(cudaMalloc(NULL, 1), cudaErrorInvalidValue);
    EXPECT(cudaPeekAtLastError(), cudaErrorInvalidValue);
    r->ok = failures == before;
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[NTHREADS];
    struct thread_result res[NTHREADS];
    memset(res, 0, sizeof(res));
    (void)cudaGetLastError();
    for (int i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&t[i], NULL, thread_main, &res[i]) == 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    void *primary = primary_ctx0();
    void *x = NULL;
    OK(cudaGetSymbolAddress(&x, sym_x));
    CHECK(primary != NULL);
    for (int i = 0; i < NTHREADS; i++) {
        CHECK(res[i].ok);
        CHECK(res[i].device == 0);
        CHECK(res[i].ctx == primary);   /* each thread got the primary context */
        CHECK(res[i].sym == x);         /* ...and so the same globals */
    }
    EXPECT(cudaPeekAtLastError(), cudaSuccess);
}

/* ---- reset and fork ---------------------------------------------------------- */

static void test_reset(void)
{
    void *d = NULL;
    OK(cudaMalloc(&d, 4096));
    check_attrs(d, cudaMemoryTypeDevice, 0);
    OK(cudaDeviceReset());
    /* Everything the context owned is gone... */
    CHECK(type_of(d, NULL) == cudaMemoryTypeUnregistered);
    /* ...and the runtime starts a fresh primary context on the next call. */
    void *d2 = NULL;
    OK(cudaMalloc(&d2, 4096));
    check_attrs(d2, cudaMemoryTypeDevice, 0);
    CHECK(current_ctx() != NULL);
    void *x = NULL;
    OK(cudaGetSymbolAddress(&x, sym_x));
    check_attrs(x, cudaMemoryTypeDevice, 0);
    OK(cudaFree(d2));
}

static void test_fork(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The driver refuses a forked child of an initialised parent; the
         * runtime reports that as an initialisation error. */
        void *d = NULL;
        cudaError_t e = cudaMalloc(&d, 64);
        if (e != cudaErrorInitializationError) {
            fprintf(stderr, "child: cudaMalloc returned %s\n", cudaGetErrorName(e));
            _exit(1);
        }
        if (cudaGetLastError() != cudaErrorInitializationError)
            _exit(2);
        _exit(0);
    }
    CHECK(pid > 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Every runtime entry point is its own function. */
static void test_distinct_functions(void)
{
    const void *fns[] = {
        (const void *)cudaMalloc, (const void *)cudaMallocManaged, (const void *)cudaMallocPitch,
        (const void *)cudaMallocAsync, (const void *)cudaMallocAsync_ptsz,
        (const void *)cudaMallocFromPoolAsync, (const void *)cudaMallocFromPoolAsync_ptsz,
        (const void *)cudaMallocHost, (const void *)cudaHostAlloc, (const void *)cudaFree,
        (const void *)cudaFreeAsync, (const void *)cudaFreeAsync_ptsz,
        (const void *)cudaFreeHost, (const void *)cudaGetSymbolAddress,
        (const void *)cudaHostRegister, (const void *)cudaHostUnregister,
        (const void *)cudaMemcpy, (const void *)cudaMemcpy_ptds, (const void *)cudaMemcpyAsync,
        (const void *)cudaMemcpyAsync_ptsz, (const void *)cudaMemset,
        (const void *)cudaMemset_ptds, (const void *)cudaMemsetAsync,
        (const void *)cudaMemsetAsync_ptsz, (const void *)cudaStreamSynchronize,
        (const void *)cudaStreamSynchronize_ptsz, (const void *)cudaGetLastError,
        (const void *)cudaPeekAtLastError, (const void *)cudaMemcpyToSymbol,
        (const void *)cudaMemcpyToSymbol_ptds, (const void *)cudaMemcpyFromSymbol,
        (const void *)cudaMemcpyFromSymbol_ptds,
    };
    size_t n = sizeof(fns) / sizeof(fns[0]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (fns[i] == fns[j]) {
                fprintf(stderr, "entry points %zu and %zu share an address\n", i, j);
                failures++;
            }
}

static int run_nodriver(void)
{
    void *d = (void *)1;
    int count = 7, v = 7;
    EXPECT(cudaMalloc(&d, 64), cudaErrorInsufficientDriver);
    EXPECT(cudaGetLastError(), cudaErrorInsufficientDriver);
    EXPECT(cudaGetDeviceCount(&count), cudaErrorInsufficientDriver);
    CHECK(count == 0);
    OK(cudaDriverGetVersion(&v));
    CHECK(v == 0);
    OK(cudaRuntimeGetVersion(&v));
    CHECK(v == 13000);
    EXPECT(cudaFree(NULL), cudaErrorInsufficientDriver);
    void *x = NULL;
    EXPECT(cudaGetSymbolAddress(&x, sym_x), cudaErrorInsufficientDriver);
    return failures;
}

/* Print which libcudart files are mapped, so the harness can tell that the
 * simulator's runtime (and not another one on the system) was loaded. */
static void print_cudart_mappings(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    if (maps == NULL)
        return;
    while (fgets(line, sizeof(line), maps) != NULL) {
        char *path = strchr(line, '/');
        if (path != NULL && strstr(path, "libcudart") != NULL)
            printf("cudart-mapping: %s", path);
    }
    fclose(maps);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    print_cudart_mappings();
    if (argc > 1 && strcmp(argv[1], "nodriver") == 0) {
        int f = run_nodriver();
        printf("test_cudart nodriver: %s\n", f ? "FAILED" : "ok");
        return f ? 1 : 0;
    }
    open_driver_for_checks();
    /* The first thing: registration has happened in a constructor, nothing
     * has touched the driver yet, so the main thread has no context. */
    CHECK(current_ctx() == NULL);
    test_distinct_functions();
    test_versions_and_errors();
    test_devices();
    test_device_memory();
    test_managed();
    test_host_memory();
    test_streams_and_pools();
    test_mem_info_and_oom();
    test_symbols();
    test_threads();
    test_reset();
    test_fork();
    printf("test_cudart: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
