/*
 * test_sim_control.c - exercises the control half of the simulated driver
 * (state, devices, contexts, streams, errors, cuGetProcAddress, modules and
 * libraries) through libcuda.so.1's exported ABI.
 *
 * Usage: test_sim_control EXPECTED_DEVICES EXPECTED_BYTES_PER_DEVICE TMPDIR
 * (run with MEMHOOK_SIM_DEVICES / MEMHOOK_SIM_DEVICE_MEMORY set to match; the
 * multi-device checks need EXPECTED_DEVICES >= 2).  Exit status 0 when every
 * check passed; each failure is reported on stderr with its line.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_api.h"

static int failures;
static int checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#define CHECK_RC(call, want)                                                          \
    do {                                                                              \
        checks++;                                                                     \
        CUresult rc_ = (call);                                                        \
        if (rc_ != (want)) {                                                          \
            fprintf(stderr, "%s:%d: %s returned %d, expected %d (%s)\n", __FILE__,    \
                    __LINE__, #call, (int)rc_, (int)(want), #want);                   \
            failures++;                                                               \
        }                                                                             \
    } while (0)

#define OK(call) CHECK_RC(call, CUDA_SUCCESS)

static int g_devices;
static unsigned long long g_memory;
static const char *g_tmp;

static const char *sym_name(void *fn)
{
    Dl_info info;
    if (fn == NULL || dladdr(fn, &info) == 0 || info.dli_sname == NULL)
        return "(none)";
    return info.dli_sname;
}

/* cuGetProcAddress_v2(name, version, flags) resolves to `expect`. */
static void check_proc(int line, const char *name, int version, cuuint64_t flags,
                       const char *expect)
{
    void *fn = (void *)0x1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)99;
    CUresult rc = cuGetProcAddress_v2(name, &fn, version, flags, &st);
    checks++;
    if (rc != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS ||
        strcmp(sym_name(fn), expect) != 0) {
        fprintf(stderr, "%s:%d: cuGetProcAddress_v2(%s, %d, %llu) -> rc %d status %d %s, "
                "expected %s\n", __FILE__, line, name, version, (unsigned long long)flags,
                (int)rc, (int)st, sym_name(fn), expect);
        failures++;
    }
}
#define PROC(name, version, flags, expect) check_proc(__LINE__, name, version, flags, expect)

static void check_proc_fail(int line, const char *name, int version, cuuint64_t flags,
                            CUresult want, CUdriverProcAddressQueryResult want_st)
{
    void *fn = (void *)0x1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)99;
    CUresult rc = cuGetProcAddress_v2(name, &fn, version, flags, &st);
    checks++;
    if (rc != want || fn != NULL || st != want_st) {
        fprintf(stderr, "%s:%d: cuGetProcAddress_v2(%s, %d, %llu) -> rc %d status %d fn %p, "
                "expected rc %d status %d fn NULL\n", __FILE__, line, name ? name : "NULL",
                version, (unsigned long long)flags, (int)rc, (int)st, fn, (int)want,
                (int)want_st);
        failures++;
    }
}
#define PROC_FAIL(name, version, flags, want, st) \
    check_proc_fail(__LINE__, name, version, flags, want, st)

static bool alloc_alive(CUdeviceptr p)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    return cuMemGetAddressRange_v2(&base, &size, p) == CUDA_SUCCESS;
}

/* ---- before cuInit ------------------------------------------------------- */

static void test_before_init(void)
{
    int v = 0;
    OK(cuDriverGetVersion(&v));
    CHECK(v == 13000);
    CHECK_RC(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
    int n;
    CHECK_RC(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CUdevice d;
    CHECK_RC(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    CUcontext c;
    CHECK_RC(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuDevicePrimaryCtxRetain(&c, 0), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuCtxCreate_v2(&c, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
    CUstream s;
    CHECK_RC(cuStreamCreate(&s, 0), CUDA_ERROR_NOT_INITIALIZED);
    CUmodule m;
    CHECK_RC(cuModuleLoadData(&m, "MEMHOOK-SIM-MODULE 1\n"), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuModuleGetGlobal(NULL, NULL, NULL, NULL), CUDA_ERROR_NOT_INITIALIZED);
    CUdeviceptr p;
    CHECK_RC(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    const char *str;
    OK(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &str));
    PROC("cuInit", 13000, 0, "cuInit");

    /* a child forked before the parent initialised may initialise */
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        int count = 0;
        _exit(cuInit(0) == CUDA_SUCCESS && cuDeviceGetCount(&count) == CUDA_SUCCESS &&
              count == g_devices ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    CHECK_RC(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    OK(cuInit(0));
    OK(cuInit(0));
}

/* ---- devices ------------------------------------------------------------- */

static void test_devices(void)
{
    int n = -1;
    OK(cuDeviceGetCount(&n));
    CHECK(n == g_devices);
    CHECK_RC(cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE);
    CUdevice d = -7;
    OK(cuDeviceGet(&d, 0));
    CHECK(d == 0);
    CHECK_RC(cuDeviceGet(&d, g_devices), CUDA_ERROR_INVALID_DEVICE);
    CHECK_RC(cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
    CHECK_RC(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);

    char name[128];
    OK(cuDeviceGetName(name, sizeof name, 0));
    CHECK(strcmp(name, "NVIDIA H200 (memhook simulator)") == 0);
    char small[6];
    OK(cuDeviceGetName(small, sizeof small, 0));
    CHECK(strcmp(small, "NVIDI") == 0);
    CHECK_RC(cuDeviceGetName(NULL, 10, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetName(name, sizeof name, g_devices), CUDA_ERROR_INVALID_DEVICE);

    CUuuid u1, u2, u3;
    OK(cuDeviceGetUuid(&u1, 0));
    OK(cuDeviceGetUuid_v2(&u2, 0));
    CHECK(memcmp(&u1, &u2, sizeof u1) == 0);
    CHECK_RC(cuDeviceGetUuid_v2(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetUuid(&u1, -1), CUDA_ERROR_INVALID_DEVICE);
    if (g_devices >= 2) {
        OK(cuDeviceGetUuid_v2(&u3, 1));
        CHECK(memcmp(&u1, &u3, sizeof u1) != 0);
    }

    size_t total = 0;
    OK(cuDeviceTotalMem_v2(&total, 0));
    CHECK(total == g_memory);
    unsigned int total32 = 0;
    OK(cuDeviceTotalMem(&total32, 0));
    CHECK(total32 == (g_memory > 0xffffffffull ? 0xffffffffu : (unsigned)g_memory));
    CHECK_RC(cuDeviceTotalMem_v2(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceTotalMem_v2(&total, g_devices), CUDA_ERROR_INVALID_DEVICE);

    int v = -1;
    struct { CUdevice_attribute a; int want; } expect[] = {
        { CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9 },
        { CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0 },
        { CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132 },
        { CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1 },
        { CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1 },
        { CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1 },
        { CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1 },
        { CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0 },
        { CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32 },
        { CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024 },
    };
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        OK(cuDeviceGetAttribute(&v, expect[i].a, 0));
        CHECK(v == expect[i].want);
    }
    for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++) {
        checks++;
        if (cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0) != CUDA_SUCCESS) {
            fprintf(stderr, "%s:%d: attribute %d not answered\n", __FILE__, __LINE__, a);
            failures++;
        }
    }
    CHECK_RC(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetAttribute(&v, (CUdevice_attribute)100000, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, g_devices),
             CUDA_ERROR_INVALID_DEVICE);

    for (int dev = 0; dev < g_devices; dev++) {
        char bus[32], want[32];
        int busno = -1, dom = -1, slot = -1;
        OK(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
        OK(cuDeviceGetAttribute(&busno, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev));
        OK(cuDeviceGetAttribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev));
        OK(cuDeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev));
        snprintf(want, sizeof want, "%04x:%02x:%02x.0", dom, busno, slot);
        CHECK(strcmp(bus, want) == 0);
        if (dev > 0) {
            int bus0 = -1;
            OK(cuDeviceGetAttribute(&bus0, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0));
            CHECK(bus0 != busno);
        }
    }
    char bus[32];
    CHECK_RC(cuDeviceGetPCIBusId(NULL, 13, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetPCIBusId(bus, sizeof bus, g_devices), CUDA_ERROR_INVALID_DEVICE);

    int major = -1, minor = -1;
    OK(cuDeviceComputeCapability(&major, &minor, 0));
    CHECK(major == 9 && minor == 0);
    CHECK_RC(cuDeviceComputeCapability(NULL, &minor, 0), CUDA_ERROR_INVALID_VALUE);

    int can = -1;
    OK(cuDeviceCanAccessPeer(&can, 0, 0));
    CHECK(can == 0);
    if (g_devices >= 2) {
        OK(cuDeviceCanAccessPeer(&can, 0, 1));
        CHECK(can == 1);
    }
    CHECK_RC(cuDeviceCanAccessPeer(&can, 0, g_devices), CUDA_ERROR_INVALID_DEVICE);
    CHECK_RC(cuDeviceCanAccessPeer(NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

/* ---- contexts ------------------------------------------------------------ */

static void test_no_context(void)
{
    CUcontext c = (CUcontext)0x1;
    OK(cuCtxGetCurrent(&c));
    CHECK(c == NULL);
    CUdevice d;
    unsigned int u;
    unsigned long long id;
    CHECK_RC(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxGetDevice_v2(&d, NULL), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxSynchronize_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxGetFlags(&u), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxGetId(NULL, &id), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxGetApiVersion(NULL, &u), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxPopCurrent_v2(&c), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxPushCurrent_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxDestroy_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CUstream s;
    CHECK_RC(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuStreamQuery_ptsz(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_CONTEXT);
    CUdeviceptr p;
    CHECK_RC(cuMemAlloc_v2(&p, 64), CUDA_ERROR_INVALID_CONTEXT);
    CUmodule m;
    CHECK_RC(cuModuleLoadData(&m, "MEMHOOK-SIM-MODULE 1\nglobal x 4\n"),
             CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuModuleGetGlobal(NULL, NULL, NULL, NULL), CUDA_ERROR_INVALID_CONTEXT);
}

static void test_primary(void)
{
    unsigned int flags = 99;
    int active = 99;
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 0);
    CHECK_RC(cuDevicePrimaryCtxGetState(0, NULL, &active), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDevicePrimaryCtxGetState(g_devices, &flags, &active), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
    CHECK_RC(cuDevicePrimaryCtxSetFlags(0, 0x1000), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);

    CUcontext p1 = NULL, p2 = NULL;
    OK(cuDevicePrimaryCtxRetain(&p1, 0));
    OK(cuDevicePrimaryCtxRetain(&p2, 0));
    CHECK(p1 != NULL && p1 == p2);
    CHECK_RC(cuDevicePrimaryCtxRetain(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDevicePrimaryCtxRetain(&p2, g_devices), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1 && flags == CU_CTX_SCHED_BLOCKING_SYNC);
    CHECK_RC(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_SPIN), CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE);
    OK(cuDevicePrimaryCtxSetFlags_v2(0, CU_CTX_SCHED_SPIN));
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(flags == CU_CTX_SCHED_SPIN);

    /* retaining does not make it current */
    CUcontext cur = (CUcontext)0x1;
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    OK(cuCtxSetCurrent(p1));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == p1);
    CUdevice d = -1;
    OK(cuCtxGetDevice(&d));
    CHECK(d == 0);
    unsigned int f = 0;
    OK(cuCtxGetFlags(&f));
    CHECK(f == CU_CTX_SCHED_SPIN);
    CHECK_RC(cuCtxDestroy_v2(p1), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxDestroy(p1), CUDA_ERROR_INVALID_CONTEXT);

    CUdeviceptr a = 0;
    OK(cuMemAlloc_v2(&a, 4096));
    CHECK(alloc_alive(a));
    OK(cuDevicePrimaryCtxRelease(0));         /* 2 -> 1: still alive */
    CHECK(alloc_alive(a));
    OK(cuCtxSynchronize());
    OK(cuDevicePrimaryCtxRelease_v2(0));      /* 1 -> 0: freed */
    CHECK(!alloc_alive(a));
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 0);
    CHECK_RC(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxPushCurrent(p1), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);

    /* retained again: the same handle, current again for this thread */
    OK(cuDevicePrimaryCtxRetain(&p2, 0));
    CHECK(p2 == p1);
    OK(cuCtxGetDevice(&d));
    OK(cuMemAlloc_v2(&a, 4096));
    OK(cuDevicePrimaryCtxReset(0));
    CHECK(!alloc_alive(a));
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 0 && flags == CU_CTX_SCHED_SPIN);
    OK(cuDevicePrimaryCtxRetain(&p2, 0));
    OK(cuMemAlloc_v2(&a, 4096));
    OK(cuDevicePrimaryCtxReset_v2(0));
    CHECK(!alloc_alive(a));
    OK(cuDevicePrimaryCtxReset_v2(0));        /* inactive: nothing to do */
    CHECK_RC(cuDevicePrimaryCtxReset(g_devices), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDevicePrimaryCtxSetFlags_v2(0, 0));
    OK(cuCtxSetCurrent(NULL));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
}

static void test_created(void)
{
    CUcontext c1 = NULL, c2 = NULL, c3 = NULL, c4 = NULL, cur = NULL;
    unsigned int ver = 0, f = 0;
    unsigned long long id1 = 0, id2 = 0;

    CHECK_RC(cuCtxCreate_v2(NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuCtxCreate_v2(&c1, 0x100, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuCtxCreate_v2(&c1, 0, g_devices), CUDA_ERROR_INVALID_DEVICE);
    CHECK_RC(cuCtxCreate(&c1, 0, -1), CUDA_ERROR_INVALID_DEVICE);

    OK(cuCtxCreate(&c1, CU_CTX_SCHED_YIELD, 0));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c1);
    OK(cuCtxGetApiVersion(c1, &ver));
    CHECK(ver == 3010);
    OK(cuCtxGetFlags(&f));
    CHECK(f == CU_CTX_SCHED_YIELD);

    OK(cuCtxCreate_v2(&c2, CU_CTX_MAP_HOST, g_devices >= 2 ? 1 : 0));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c2 && c2 != c1);
    OK(cuCtxGetApiVersion(NULL, &ver));
    CHECK(ver == 3020);
    OK(cuCtxGetId(c1, &id1));
    OK(cuCtxGetId(NULL, &id2));
    CHECK(id1 != id2 && id1 != 0 && id2 != 0);
    CHECK_RC(cuCtxGetId(c1, NULL), CUDA_ERROR_INVALID_VALUE);
    CUdevice d = -1;
    OK(cuCtxGetDevice_v2(&d, c2));
    CHECK(d == (g_devices >= 2 ? 1 : 0));
    OK(cuCtxGetDevice_v2(&d, c1));
    CHECK(d == 0);
    CHECK_RC(cuCtxGetDevice(NULL), CUDA_ERROR_INVALID_VALUE);
    OK(cuCtxSynchronize_v2(c1));
    OK(cuCtxSynchronize_v2(NULL));

    /* stack: c1, c2 -> pop c2 -> current c1 */
    CUcontext popped = NULL;
    OK(cuCtxPopCurrent_v2(&popped));
    CHECK(popped == c2);
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c1);
    OK(cuCtxPushCurrent_v2(c2));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c2);
    OK(cuCtxPopCurrent(&popped));
    OK(cuCtxPushCurrent(c2));
    /* SetCurrent replaces the top */
    OK(cuCtxSetCurrent(c1));
    OK(cuCtxPopCurrent(NULL));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c1);

    CUexecAffinityParam aff = { CU_EXEC_AFFINITY_TYPE_SM_COUNT, { { 66 } } };
    OK(cuCtxCreate_v3(&c3, &aff, 1, 0, 0));
    CHECK_RC(cuCtxCreate_v3(&c4, NULL, 1, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuCtxCreate_v3(&c4, &aff, -1, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CUexecAffinityParam bad = { (CUexecAffinityType)7, { { 1 } } };
    CHECK_RC(cuCtxCreate_v3(&c4, &bad, 1, 0, 0), CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    OK(cuCtxCreate_v4(&c4, NULL, 0, 0));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c4);
    CUctxCreateParams params = { &aff, 1, NULL };
    CUcontext c5 = NULL;
    OK(cuCtxCreate_v4(&c5, &params, 0, 0));
    params.cigParams = (CUctxCigParam *)&aff;
    params.numExecAffinityParams = 0;
    CUcontext c6 = NULL;
    CHECK_RC(cuCtxCreate_v4(&c6, &params, 0, 0), CUDA_ERROR_NOT_SUPPORTED);

    /* destroy frees what the context owns and pops it if current */
    CUdeviceptr a4 = 0, a1 = 0;
    OK(cuCtxSetCurrent(c5));
    OK(cuCtxDestroy_v2(c5));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c4);
    OK(cuMemAlloc_v2(&a4, 8192));
    CUcontext owner = NULL;
    OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, a4));
    CHECK(owner == c4);
    OK(cuCtxPushCurrent(c1));
    OK(cuMemAlloc_v2(&a1, 8192));
    OK(cuCtxPopCurrent(NULL));
    OK(cuCtxDestroy(c4));
    CHECK(!alloc_alive(a4));
    CHECK(alloc_alive(a1));
    CHECK_RC(cuCtxDestroy(c4), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxPushCurrent(c4), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxSetCurrent(c4), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuCtxGetId(c4, &id1), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c3);
    OK(cuCtxDestroy_v2(c3));
    OK(cuCtxDestroy_v2(c2));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c1);
    OK(cuCtxDestroy_v2(c1));
    CHECK(!alloc_alive(a1));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
}

/* ---- threads ------------------------------------------------------------- */

static pthread_barrier_t g_barrier;

struct thread_arg {
    CUcontext mine;
    int ok;
};

static void *ctx_thread(void *p)
{
    struct thread_arg *arg = p;
    int ok = 1;
    CUcontext cur = (CUcontext)0x1;
    ok &= cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == NULL;   /* fresh thread */
    ok &= cuCtxSetCurrent(arg->mine) == CUDA_SUCCESS;
    pthread_barrier_wait(&g_barrier);
    for (int i = 0; i < 2000; i++) {
        ok &= cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == arg->mine;
        ok &= cuCtxPushCurrent(arg->mine) == CUDA_SUCCESS;
        ok &= cuCtxPopCurrent(&cur) == CUDA_SUCCESS && cur == arg->mine;
    }
    pthread_barrier_wait(&g_barrier);
    arg->ok = ok;
    return NULL;
}

static void *orphan_thread(void *p)
{
    struct thread_arg *arg = p;
    int ok = cuCtxSetCurrent(arg->mine) == CUDA_SUCCESS;
    pthread_barrier_wait(&g_barrier);   /* main destroys arg->mine */
    pthread_barrier_wait(&g_barrier);
    CUcontext cur = (CUcontext)0x1;
    CUdevice d;
    ok &= cuCtxGetCurrent(&cur) == CUDA_ERROR_CONTEXT_IS_DESTROYED && cur == NULL;
    ok &= cuCtxGetDevice(&d) == CUDA_ERROR_INVALID_CONTEXT;
    ok &= cuCtxPopCurrent(NULL) == CUDA_SUCCESS;
    ok &= cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == NULL;
    arg->ok = ok;
    return NULL;
}

static void test_threads(void)
{
    CUcontext a = NULL, b = NULL;
    OK(cuCtxCreate_v2(&a, 0, 0));
    OK(cuCtxCreate_v2(&b, 0, g_devices >= 2 ? 1 : 0));
    OK(cuCtxSetCurrent(NULL));
    OK(cuCtxSetCurrent(NULL));
    struct thread_arg ta = { a, 0 }, tb = { b, 0 };
    pthread_t t1, t2;
    pthread_barrier_init(&g_barrier, NULL, 2);
    pthread_create(&t1, NULL, ctx_thread, &ta);
    pthread_create(&t2, NULL, ctx_thread, &tb);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_barrier_destroy(&g_barrier);
    CHECK(ta.ok && tb.ok);
    CUcontext cur = (CUcontext)0x1;
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);      /* other threads' SetCurrent did not leak here */

    struct thread_arg to = { a, 0 };
    pthread_barrier_init(&g_barrier, NULL, 2);
    pthread_create(&t1, NULL, orphan_thread, &to);
    pthread_barrier_wait(&g_barrier);
    OK(cuCtxDestroy_v2(a));
    pthread_barrier_wait(&g_barrier);
    pthread_join(t1, NULL);
    pthread_barrier_destroy(&g_barrier);
    CHECK(to.ok);
    OK(cuCtxDestroy_v2(b));
}

/* ---- streams ------------------------------------------------------------- */

static void test_streams(void)
{
    CUcontext c = NULL, other = NULL, got = NULL;
    OK(cuCtxCreate_v2(&c, 0, 0));
    CUstream s1 = NULL, s2 = NULL;
    unsigned int f = 99;
    OK(cuStreamCreate(&s1, CU_STREAM_DEFAULT));
    OK(cuStreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, -100));
    CHECK_RC(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuStreamCreate(&s2, 0x10), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamGetFlags(s1, &f));
    CHECK(f == CU_STREAM_DEFAULT);
    OK(cuStreamGetFlags_ptsz(s2, &f));
    CHECK(f == CU_STREAM_NON_BLOCKING);
    OK(cuStreamGetFlags(NULL, &f));
    CHECK(f == 0);
    CHECK_RC(cuStreamGetFlags(s1, NULL), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamGetCtx(s1, &got));
    CHECK(got == c);
    OK(cuStreamGetCtx_ptsz(CU_STREAM_PER_THREAD, &got));
    CHECK(got == c);
    CUgreenCtx green = (CUgreenCtx)0x1;
    OK(cuStreamGetCtx_v2(s2, &got, &green));
    CHECK(got == c && green == NULL);
    OK(cuStreamGetCtx_v2_ptsz(CU_STREAM_LEGACY, &got, &green));
    CHECK(got == c);
    CHECK_RC(cuStreamGetCtx(s1, NULL), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamSynchronize(s1));
    OK(cuStreamSynchronize_ptsz(NULL));
    OK(cuStreamSynchronize(CU_STREAM_LEGACY));
    OK(cuStreamQuery(s2));
    OK(cuStreamQuery_ptsz(CU_STREAM_PER_THREAD));
    CUstream bogus = (CUstream)(uintptr_t)0xdead0;
    CHECK_RC(cuStreamQuery(bogus), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuStreamSynchronize(bogus), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE);

    /* a stream lives with its context; synchronising it needs no current one */
    OK(cuCtxCreate_v2(&other, 0, 0));
    OK(cuStreamQuery(s1));
    OK(cuStreamGetCtx(s1, &got));
    CHECK(got == c);
    OK(cuCtxDestroy_v2(other));

    OK(cuStreamDestroy(s1));
    CHECK_RC(cuStreamDestroy(s1), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuStreamQuery(s1), CUDA_ERROR_INVALID_HANDLE);
    CUstream s3 = NULL;
    OK(cuStreamCreate(&s3, 0));
    OK(cuCtxDestroy_v2(c));                      /* destroys s2 and s3 */
    CHECK_RC(cuStreamQuery(s2), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuStreamDestroy_v2(s3), CUDA_ERROR_INVALID_HANDLE);
}

/* ---- errors -------------------------------------------------------------- */

static void test_errors(void)
{
    static const CUresult all[] = {
        0, 1, 2, 3, 4, 5, 6, 7, 8, 34, 36, 46, 100, 101, 102, 200, 201, 202, 205, 206,
        207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222,
        223, 224, 225, 226, 300, 301, 302, 303, 304, 400, 401, 402, 500, 600, 700, 701,
        702, 703, 704, 705, 708, 709, 710, 711, 712, 713, 714, 715, 716, 717, 718, 719,
        720, 721, 800, 801, 802, 803, 804, 805, 806, 807, 808, 809, 810, 811, 812, 900,
        901, 902, 903, 904, 905, 906, 907, 908, 909, 910, 911, 912, 913, 914, 915, 916, 999,
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const char *n = NULL, *s = NULL;
        checks++;
        if (cuGetErrorName(all[i], &n) != CUDA_SUCCESS || n == NULL ||
            strncmp(n, "CUDA_", 5) != 0 || cuGetErrorString(all[i], &s) != CUDA_SUCCESS ||
            s == NULL || s[0] == '\0') {
            fprintf(stderr, "%s:%d: no name/string for CUresult %d\n", __FILE__, __LINE__,
                    (int)all[i]);
            failures++;
        }
    }
    const char *s = NULL;
    struct { CUresult r; const char *name, *text; } known[] = {
        { CUDA_SUCCESS, "CUDA_SUCCESS", "no error" },
        { CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
        { CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
        { CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
        { CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
        { CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
        { CUDA_ERROR_KEY_ROTATION, "CUDA_ERROR_KEY_ROTATION", NULL },
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        OK(cuGetErrorName(known[i].r, &s));
        CHECK(s != NULL && strcmp(s, known[i].name) == 0);
        OK(cuGetErrorString(known[i].r, &s));
        CHECK(s != NULL && (known[i].text == NULL || strcmp(s, known[i].text) == 0));
    }
    s = "x";
    CHECK_RC(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);
    s = "x";
    CHECK_RC(cuGetErrorString((CUresult)-1, &s), CUDA_ERROR_INVALID_VALUE);
    CHECK(s == NULL);
    CHECK_RC(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuGetErrorString(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* ---- cuGetProcAddress ---------------------------------------------------- */

static void test_proc_address(void)
{
    const cuuint64_t DEF = CU_GET_PROC_ADDRESS_DEFAULT;
    const cuuint64_t LEG = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    const cuuint64_t PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    PROC("cuMemAlloc", 3010, DEF, "cuMemAlloc");
    PROC("cuMemAlloc", 3020, DEF, "cuMemAlloc_v2");
    PROC("cuMemAlloc", 13000, PT, "cuMemAlloc_v2");
    PROC("cuMemAllocAsync", 13000, PT, "cuMemAllocAsync_ptsz");
    PROC("cuMemAllocAsync", 13000, LEG, "cuMemAllocAsync");
    PROC("cuMemAllocAsync", 13000, DEF, "cuMemAllocAsync");
    PROC("cuStreamSynchronize", 13000, DEF, "cuStreamSynchronize");
    PROC("cuStreamSynchronize", 13000, PT, "cuStreamSynchronize_ptsz");
    PROC("cuStreamSynchronize", 6050, PT, "cuStreamSynchronize");
    PROC("cuCtxCreate", 12050, DEF, "cuCtxCreate_v4");
    PROC("cuCtxCreate", 12040, DEF, "cuCtxCreate_v3");
    PROC("cuCtxCreate", 11000, DEF, "cuCtxCreate_v2");
    PROC("cuCtxCreate", 2000, DEF, "cuCtxCreate");
    PROC("cuCtxDestroy", 13000, DEF, "cuCtxDestroy_v2");
    PROC("cuCtxGetDevice", 12080, DEF, "cuCtxGetDevice");
    PROC("cuCtxGetDevice", 13000, DEF, "cuCtxGetDevice_v2");
    PROC("cuMemcpyHtoD", 13000, PT, "cuMemcpyHtoD_v2_ptds");
    PROC("cuMemcpyHtoD", 6000, PT, "cuMemcpyHtoD_v2");
    PROC("cuMemcpyHtoD", 13000, LEG, "cuMemcpyHtoD_v2");
    PROC("cuMemcpy", 13000, PT, "cuMemcpy_ptds");
    PROC("cuStreamGetCtx", 12000, PT, "cuStreamGetCtx_ptsz");
    PROC("cuStreamGetCtx", 13000, PT, "cuStreamGetCtx_v2_ptsz");
    PROC("cuStreamGetCtx", 13000, DEF, "cuStreamGetCtx_v2");
    PROC("cuDevicePrimaryCtxRelease", 13000, DEF, "cuDevicePrimaryCtxRelease_v2");
    PROC("cuIpcOpenMemHandle", 11000, DEF, "cuIpcOpenMemHandle_v2");
    PROC("cuModuleGetGlobal", 3020, DEF, "cuModuleGetGlobal_v2");
    PROC("cuGetProcAddress", 13000, DEF, "cuGetProcAddress_v2");
    PROC("cuGetProcAddress", 11030, DEF, "cuGetProcAddress");
    PROC("cuLibraryGetGlobal", 12000, PT, "cuLibraryGetGlobal");

    /* both stream bits: accepted (the recorded driver does), per-thread wins */
    PROC("cuMemAlloc", 13000, LEG | PT, "cuMemAlloc_v2");
    PROC("cuMemAllocAsync", 13000, LEG | PT, "cuMemAllocAsync_ptsz");

    /* With a status pointer, "not found" is reported through the status and
     * the call succeeds (what libcuda 580 does); the status is left alone
     * when the arguments are invalid. */
    const CUdriverProcAddressQueryResult UNTOUCHED = (CUdriverProcAddressQueryResult)99;
    PROC_FAIL("cuNoSuchThing", 13000, DEF, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    PROC_FAIL("cuMemAlloc_v2", 13000, DEF, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    PROC_FAIL("cuMemAllocAsync", 11010, DEF, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    PROC_FAIL("cuMemAlloc", 1000, PT, CUDA_SUCCESS, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    PROC_FAIL("cuMemAlloc", 13000, 4, CUDA_ERROR_INVALID_VALUE, UNTOUCHED);
    PROC_FAIL("cuMemAlloc", 13000, 8 | PT, CUDA_ERROR_INVALID_VALUE, UNTOUCHED);
    PROC_FAIL("cuMemAlloc", 99000, DEF, CUDA_ERROR_INVALID_VALUE, UNTOUCHED);
    PROC_FAIL("cuMemAlloc", 13010, DEF, CUDA_ERROR_INVALID_VALUE, UNTOUCHED);
    PROC_FAIL(NULL, 13000, DEF, CUDA_ERROR_INVALID_VALUE, UNTOUCHED);
    CHECK_RC(cuGetProcAddress_v2("cuMemAlloc", NULL, 13000, 0, NULL), CUDA_ERROR_INVALID_VALUE);

    /* v1 has no status: CUDA_ERROR_NOT_FOUND; v2 with a NULL status still
     * answers CUDA_SUCCESS and a NULL pfn (the recorded H200 driver) */
    void *fn = NULL;
    OK(cuGetProcAddress("cuMemFree", &fn, 13000, 0));
    CHECK(strcmp(sym_name(fn), "cuMemFree_v2") == 0);
    OK(cuGetProcAddress_v2("cuMemFree", &fn, 2000, 0, NULL));
    CHECK(strcmp(sym_name(fn), "cuMemFree") == 0);
    fn = (void *)0x1;
    CHECK_RC(cuGetProcAddress("cuNoSuchThing", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL);
    fn = (void *)0x1;
    CHECK_RC(cuGetProcAddress("cuMemAllocAsync", &fn, 11010, 0), CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL);
    fn = (void *)0x1;
    OK(cuGetProcAddress_v2("cuNoSuchThing", &fn, 13000, 0, NULL));
    CHECK(fn == NULL);
    fn = (void *)0x1;
    OK(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11010, 0, NULL));
    CHECK(fn == NULL);

    /* what cuGetProcAddress returns is callable and is the export */
    CUresult (*get_version)(int *) = NULL;
    OK(cuGetProcAddress_v2("cuDriverGetVersion", (void **)&get_version, 13000, 0, NULL));
    int v = 0;
    CHECK(get_version != NULL && get_version(&v) == CUDA_SUCCESS && v == 13000);
    CHECK((void *)get_version == dlsym(RTLD_DEFAULT, "cuDriverGetVersion"));
}

/* ---- modules and libraries ----------------------------------------------- */

static const char *k_image =
    "MEMHOOK-SIM-MODULE 1\n"
    "# a comment, then a blank line\n"
    "\n"
    "global counter 4\n"
    "global  table\t0x2000\r\n"
    "managed flags 24\n";

static void check_global(CUdeviceptr p, size_t size, CUcontext ctx, int managed)
{
    unsigned int memtype = 0;
    int is_managed = -1;
    CUcontext owner = NULL;
    CUdeviceptr start = 0;
    size_t range = 0;
    OK(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    CHECK(memtype == CU_MEMORYTYPE_DEVICE);
    OK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
    CHECK(is_managed == managed);
    OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    /* the H200's driver reports no context for a managed global */
    CHECK(owner == (managed ? NULL : ctx));
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p));
    CHECK(start == p);
    OK(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p));
    CHECK(range == size);
    /* zero-filled, and only unload frees it */
    unsigned char *bytes = calloc(1, size);
    memset(bytes, 0x5a, size);
    OK(cuMemcpyDtoH_v2(bytes, p, size));
    size_t nonzero = 0;
    for (size_t i = 0; i < size; i++)
        nonzero += bytes[i] != 0;
    CHECK(nonzero == 0);
    free(bytes);
    CHECK_RC(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    CHECK(alloc_alive(p));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_modules(void)
{
    CUcontext c = NULL;
    OK(cuCtxCreate_v2(&c, 0, 0));
    CUmodule m = NULL, m2 = NULL;
    static const char *bad[] = {
        "",
        "MEMHOOK-SIM-MODULE 2\n",
        "MEMHOOK-SIM-MODULE 1 extra\n",
        "\x7f" "ELF",
        "MEMHOOK-SIM-MODULE 1\nconstant x 4\n",
        "MEMHOOK-SIM-MODULE 1\nglobal x\n",
        "MEMHOOK-SIM-MODULE 1\nglobal x 0\n",
        "MEMHOOK-SIM-MODULE 1\nglobal x -4\n",
        "MEMHOOK-SIM-MODULE 1\nglobal x 4k\n",
        "MEMHOOK-SIM-MODULE 1\nglobal x 4 5\n",
        "MEMHOOK-SIM-MODULE 1\nglobal x 4\nmanaged x 8\n",
        "MEMHOOK-SIM-MODULE 1\nglobal x 99999999999999999999\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        checks++;
        CUresult rc = cuModuleLoadData(&m, bad[i]);
        if (rc != CUDA_ERROR_INVALID_IMAGE) {
            fprintf(stderr, "%s:%d: bad image %zu loaded with %d\n", __FILE__, __LINE__, i,
                    (int)rc);
            failures++;
        }
    }
    CHECK_RC(cuModuleLoadData(NULL, k_image), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuModuleLoadData(&m, NULL), CUDA_ERROR_INVALID_VALUE);

    char path[4096];
    snprintf(path, sizeof path, "%s/no-such-module.sim", g_tmp);
    CHECK_RC(cuModuleLoad(&m, path), CUDA_ERROR_FILE_NOT_FOUND);
    CHECK_RC(cuModuleLoad(&m, NULL), CUDA_ERROR_INVALID_VALUE);
    snprintf(path, sizeof path, "%s/module.sim", g_tmp);
    write_file(path, k_image);
    OK(cuModuleLoad(&m, path));
    OK(cuModuleLoadData(&m2, "MEMHOOK-SIM-MODULE 1\nglobal counter 16"));

    CUdeviceptr counter = 0, table = 0, flags = 0, other = 0;
    size_t size = 0;
    OK(cuModuleGetGlobal_v2(&counter, &size, m, "counter"));
    CHECK(counter != 0 && size == 4);
    OK(cuModuleGetGlobal_v2(&table, NULL, m, "table"));
    OK(cuModuleGetGlobal_v2(NULL, &size, m, "table"));
    CHECK(size == 0x2000);
    OK(cuModuleGetGlobal_v2(NULL, NULL, m, "table"));
    OK(cuModuleGetGlobal_v2(&flags, &size, m, "flags"));
    CHECK(size == 24);
    OK(cuModuleGetGlobal_v2(&other, &size, m2, "counter"));
    CHECK(other != counter && size == 16);
    CHECK_RC(cuModuleGetGlobal_v2(&other, &size, m, "nope"), CUDA_ERROR_NOT_FOUND);
    CHECK_RC(cuModuleGetGlobal_v2(&other, &size, m, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuModuleGetGlobal_v2(&other, &size, NULL, "counter"), CUDA_ERROR_INVALID_HANDLE);
    check_global(counter, 4, c, 0);
    check_global(table, 0x2000, c, 0);
    check_global(flags, 24, c, 1);

    /* the 32-bit spelling needs a legacy context (made by the v1
     * cuCtxCreate): in this one (cuCtxCreate_v2) it is INVALID_CONTEXT
     * before anything else is looked at, as on the H200's driver */
    unsigned int size32 = 0;
    CUdeviceptr_v1 p32 = 0;
    CHECK_RC(cuModuleGetGlobal(NULL, &size32, m, "table"), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuModuleGetGlobal(&p32, NULL, m, "table"), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuModuleGetGlobal(NULL, &size32, m, "nope"), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuModuleGetGlobal(NULL, NULL, NULL, NULL), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(size32 == 0 && p32 == 0);
    /* in a legacy context: sizes always, addresses only below 4 GiB (module
     * globals live above it) */
    CUcontext legacy = NULL;
    unsigned int ver = 0;
    OK(cuCtxCreate(&legacy, 0, 0));
    OK(cuCtxGetApiVersion(legacy, &ver));
    CHECK(ver == 3010);
    OK(cuModuleGetGlobal(NULL, &size32, m, "table"));
    CHECK(size32 == 0x2000);
    CHECK(table > 0xffffffffull);
    CHECK_RC(cuModuleGetGlobal(&p32, NULL, m, "table"), CUDA_ERROR_INVALID_VALUE);
    CHECK(p32 == 0);
    CHECK_RC(cuModuleGetGlobal(NULL, &size32, m, "nope"), CUDA_ERROR_NOT_FOUND);
    CHECK_RC(cuModuleGetGlobal(NULL, &size32, m, NULL), CUDA_ERROR_INVALID_VALUE);
    OK(cuCtxDestroy(legacy)); /* c is current again */
    CHECK_RC(cuModuleGetGlobal(NULL, &size32, m, "table"), CUDA_ERROR_INVALID_CONTEXT);

    OK(cuModuleUnload(m));
    CHECK(!alloc_alive(counter) && !alloc_alive(table) && !alloc_alive(flags));
    CHECK(alloc_alive(other));
    CHECK_RC(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuModuleGetGlobal_v2(&counter, &size, m, "counter"), CUDA_ERROR_INVALID_HANDLE);

    /* destroying the context unloads its modules */
    OK(cuCtxDestroy_v2(c));
    CHECK(!alloc_alive(other));
    OK(cuCtxCreate_v2(&c, 0, 0));
    CHECK_RC(cuModuleGetGlobal_v2(&other, &size, m2, "counter"), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuModuleUnload(m2), CUDA_ERROR_INVALID_HANDLE);
    OK(cuCtxDestroy_v2(c));
}

static void test_libraries(void)
{
    CUlibrary lib = NULL, lib2 = NULL;
    CUcontext a = NULL, b = NULL, cur = NULL;
    CUdeviceptr pa = 0, pa2 = 0, pb = 0, ma = 0;
    size_t size = 0;

    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    /* context-independent load */
    OK(cuLibraryLoadData(&lib, k_image, NULL, NULL, 0, NULL, NULL, 0));
    CHECK_RC(cuLibraryLoadData(&lib2, "MEMHOOK-SIM-MODULE 1\nbogus\n", NULL, NULL, 0, NULL,
                               NULL, 0), CUDA_ERROR_INVALID_IMAGE);
    CHECK_RC(cuLibraryLoadData(NULL, k_image, NULL, NULL, 0, NULL, NULL, 0),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuLibraryLoadData(&lib2, k_image, NULL, NULL, 2, NULL, NULL, 0),
             CUDA_ERROR_INVALID_VALUE);
    char path[4096];
    snprintf(path, sizeof path, "%s/missing.sim", g_tmp);
    CHECK_RC(cuLibraryLoadFromFile(&lib2, path, NULL, NULL, 0, NULL, NULL, 0),
             CUDA_ERROR_FILE_NOT_FOUND);
    snprintf(path, sizeof path, "%s/library.sim", g_tmp);
    write_file(path, "MEMHOOK-SIM-MODULE 1\nglobal only 8\n");
    sim_jit_option jo[1] = { 0 };
    void *jv[1] = { NULL };
    OK(cuLibraryLoadFromFile(&lib2, path, jo, jv, 1, NULL, NULL, 0));

    CHECK_RC(cuLibraryGetGlobal(&pa, &size, lib, "counter"), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuLibraryGetManaged(&pa, &size, lib, "flags"), CUDA_ERROR_INVALID_CONTEXT);
    CUmodule mod = NULL;
    CHECK_RC(cuLibraryGetModule(&mod, lib), CUDA_ERROR_INVALID_CONTEXT);

    OK(cuCtxCreate_v2(&a, 0, 0));
    OK(cuLibraryGetGlobal(&pa, &size, lib, "counter"));
    CHECK(size == 4);
    OK(cuLibraryGetGlobal(&pa2, NULL, lib, "counter"));
    CHECK(pa2 == pa);                         /* instantiated once per context */
    CHECK_RC(cuLibraryGetGlobal(&pa2, &size, lib, "nope"), CUDA_ERROR_NOT_FOUND);
    CHECK_RC(cuLibraryGetGlobal(&pa2, &size, NULL, "counter"), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuLibraryGetGlobal(&pa2, &size, lib, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuLibraryGetManaged(&ma, &size, lib, "counter"), CUDA_ERROR_NOT_FOUND);
    OK(cuLibraryGetManaged(&ma, &size, lib, "flags"));
    CHECK(size == 24);
    check_global(pa, 4, a, 0);
    check_global(ma, 24, a, 1);
    OK(cuLibraryGetModule(&mod, lib));
    CUdeviceptr via_mod = 0;
    OK(cuModuleGetGlobal_v2(&via_mod, &size, mod, "counter"));
    CHECK(via_mod == pa);
    CHECK_RC(cuModuleUnload(mod), CUDA_ERROR_NOT_PERMITTED);
    CHECK_RC(cuLibraryGetModule(NULL, lib), CUDA_ERROR_INVALID_VALUE);

    OK(cuCtxCreate_v2(&b, 0, g_devices >= 2 ? 1 : 0));
    OK(cuLibraryGetGlobal(&pb, &size, lib, "counter"));
    CHECK(pb != pa);
    check_global(pb, 4, b, 0);
    CUdeviceptr only = 0;
    OK(cuLibraryGetGlobal(&only, &size, lib2, "only"));
    CHECK(size == 8);

    /* destroying b drops b's instance only */
    OK(cuCtxDestroy_v2(b));
    CHECK(!alloc_alive(pb) && !alloc_alive(only));
    CHECK(alloc_alive(pa));
    OK(cuLibraryGetGlobal(&pa2, &size, lib, "counter"));
    CHECK(pa2 == pa);

    OK(cuLibraryUnload(lib));
    CHECK(!alloc_alive(pa) && !alloc_alive(ma));
    CHECK_RC(cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuLibraryGetGlobal(&pa, &size, lib, "counter"), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuModuleGetGlobal_v2(&pa, &size, mod, "counter"), CUDA_ERROR_INVALID_HANDLE);
    OK(cuLibraryUnload(lib2));
    OK(cuCtxDestroy_v2(a));
}

/* ---- fork ---------------------------------------------------------------- */

static atomic_int g_stop;

static void *busy_thread(void *p)
{
    CUstream s = p;
    while (!atomic_load(&g_stop))
        (void)cuStreamQuery(s);       /* takes and releases the driver lock */
    return NULL;
}

static void test_fork_poisoning(void)
{
    CUcontext c = NULL;
    OK(cuCtxCreate_v2(&c, 0, 0));
    CUstream s = NULL;
    OK(cuStreamCreate(&s, 0));
    pthread_t t;
    atomic_store(&g_stop, 0);
    pthread_create(&t, NULL, busy_thread, s);
    for (int round = 0; round < 20; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20);                    /* a deadlock shows as SIGALRM */
            int bad = 0;
            int n = 0;
            CUcontext cur;
            CUdeviceptr p;
            void *fn = NULL;
            bad |= cuInit(0) != CUDA_ERROR_NOT_INITIALIZED;
            bad |= cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED;
            bad |= cuCtxGetCurrent(&cur) != CUDA_ERROR_NOT_INITIALIZED;
            bad |= cuCtxCreate_v2(&cur, 0, 0) != CUDA_ERROR_NOT_INITIALIZED;
            bad |= cuStreamQuery(s) != CUDA_ERROR_NOT_INITIALIZED;
            bad |= cuMemAlloc_v2(&p, 16) != CUDA_ERROR_NOT_INITIALIZED;
            bad |= cuDevicePrimaryCtxRetain(&cur, 0) != CUDA_ERROR_NOT_INITIALIZED;
            /* stateless calls still answer */
            bad |= cuDriverGetVersion(&n) != CUDA_SUCCESS;
            bad |= cuGetProcAddress_v2("cuInit", &fn, 13000, 0, NULL) != CUDA_SUCCESS;
            _exit(bad ? 1 : 0);
        }
        int status = 0;
        checks++;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "%s:%d: forked child %d: status 0x%x\n", __FILE__, __LINE__,
                    round, status);
            failures++;
            break;
        }
    }
    atomic_store(&g_stop, 1);
    pthread_join(t, NULL);
    /* the parent is unaffected */
    int n = 0;
    OK(cuDeviceGetCount(&n));
    OK(cuStreamQuery(s));
    OK(cuCtxDestroy_v2(c));
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s EXPECTED_DEVICES EXPECTED_BYTES TMPDIR\n", argv[0]);
        return 2;
    }
    g_devices = atoi(argv[1]);
    g_memory = strtoull(argv[2], NULL, 10);
    g_tmp = argv[3];
    setvbuf(stdout, NULL, _IONBF, 0);

    test_before_init();
    test_devices();
    test_no_context();
    test_primary();
    test_created();
    test_threads();
    test_streams();
    test_errors();
    test_proc_address();
    test_modules();
    test_libraries();
    test_fork_poisoning();

    printf("test_sim_control: %d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
