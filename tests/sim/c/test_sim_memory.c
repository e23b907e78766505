/*
 * test_sim_memory.c - exercises every memory entry point of the simulated
 * libcuda.so.1 (memory, VMM, pools, IPC, pointer attributes, copies),
 * including their errors.  Linked against the simulator.
 *
 *   test_sim_memory                 run everything; exit 0 on success
 *   test_sim_memory legacy32        the 32-bit v1 entry points in a legacy
 *                                   context (made by the v1 cuCtxCreate)
 *   test_sim_memory ipc-child HEX   (internal) open an IPC handle
 *
 * Expects MEMHOOK_SIM_DEVICE_MEMORY=256M (the test sets it when unset).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_api.h"

static int failures;
#define CHECK(cond)                                                               \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);       \
            failures++;                                                           \
        }                                                                         \
    } while (0)
#define CHECK_RC(call, want)                                                      \
    do {                                                                          \
        CUresult rc_ = (call);                                                    \
        if (rc_ != (want)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s -> %d, want %d\n", __FILE__, __LINE__, \
                    #call, (int)rc_, (int)(want));                                \
            failures++;                                                           \
        }                                                                         \
    } while (0)
#define OK(call) CHECK_RC(call, CUDA_SUCCESS)

static CUcontext g_ctx;
#define MiB (1ull << 20)

/* ---- helpers ---------------------------------------------------------------- */

/* 1 when touching addr (read, or write when write) kills a forked child
 * with SIGSEGV.  The child does not call the driver. */
static int access_faults(uint64_t addr, int write)
{
    pid_t pid = fork();
    if (pid == 0) {
        volatile unsigned char *p = (volatile unsigned char *)(uintptr_t)addr;
        if (write)
            *p = 1;
        else
            (void)*p;
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS);
}

static unsigned int attr_u32(CUpointer_attribute a, CUdeviceptr p)
{
    unsigned int v = 0xdeadbeef;
    OK(cuPointerGetAttribute(&v, a, p));
    return v;
}

static unsigned long long attr_u64(CUpointer_attribute a, CUdeviceptr p)
{
    unsigned long long v = 0xdeadbeefdeadbeefull;
    OK(cuPointerGetAttribute(&v, a, p));
    return v;
}

static int attr_int(CUpointer_attribute a, CUdeviceptr p)
{
    int v = 12345;
    OK(cuPointerGetAttribute(&v, a, p));
    return v;
}

static void check_range(CUdeviceptr p, CUdeviceptr want_base, size_t want_size)
{
    CUdeviceptr b = 0;
    size_t s = 0;
    OK(cuMemGetAddressRange_v2(&b, &s, p));
    CHECK(b == want_base);
    CHECK(s == want_size);
}

/* Every 32-bit v1 entry point that needs a context answers want (NOT_INITIALIZED
 * before cuInit, else INVALID_CONTEXT unless the current context was made by
 * the v1 cuCtxCreate), before looking at its arguments, and writes nothing. */
static void check_v1_refused(CUresult want)
{
    CUdeviceptr_v1 p32 = 0, b32 = 0;
    unsigned int u = 0, u2 = 0;
    void *h = NULL;
    char buf[64] = "untouched", out[64] = {0};
    CHECK_RC(cuMemAlloc(&p32, 4096), want);
    CHECK_RC(cuMemAlloc(NULL, 0), want);
    CHECK_RC(cuMemAllocPitch(&p32, &u, 100, 2, 4), want);
    CHECK_RC(cuMemAllocPitch(NULL, NULL, 0, 0, 3), want);
    CHECK_RC(cuMemFree(0), want);
    CHECK_RC(cuMemFree(0x40001000u), want);
    CHECK_RC(cuMemAllocHost(&h, 4096), want);
    CHECK_RC(cuMemAllocHost(NULL, 0), want);
    CHECK_RC(cuMemHostGetDevicePointer(&p32, buf, 0), want);
    CHECK_RC(cuMemHostGetDevicePointer(NULL, NULL, 7), want);
    CHECK_RC(cuMemGetAddressRange(&b32, &u, 0x40001000u), want);
    CHECK_RC(cuMemGetAddressRange(NULL, NULL, 0), want);
    CHECK_RC(cuMemGetInfo(&u, &u2), want);
    CHECK_RC(cuMemGetInfo(NULL, NULL), want);
    CHECK_RC(cuMemcpyHtoD(0x40001000u, buf, 64), want);
    CHECK_RC(cuMemcpyDtoH(out, 0x40001000u, 64), want);
    CHECK_RC(cuMemcpyDtoD(0x40002000u, 0x40001000u, 64), want);
    CHECK_RC(cuMemcpyHtoDAsync(0x40001000u, buf, 64, NULL), want);
    CHECK_RC(cuMemcpyDtoHAsync(out, 0x40001000u, 64, NULL), want);
    CHECK_RC(cuMemcpyDtoDAsync(0x40002000u, 0x40001000u, 64, NULL), want);
    CHECK_RC(cuMemsetD8(0x40001000u, 1, 64), want);
    CHECK_RC(cuMemsetD16(0x40001000u, 1, 32), want);
    CHECK_RC(cuMemsetD32(0x40001000u, 1, 16), want);
    CHECK(p32 == 0 && b32 == 0 && u == 0 && u2 == 0 && h == NULL && out[0] == 0);
}

/* ---- sections ------------------------------------------------------------------ */

static void test_before_init(void)
{
    CUdeviceptr p;
    void *h;
    size_t f, t;
    CUmemGenericAllocationHandle vh;
    CUmemAllocationProp prop = {0};
    CUmemoryPool pool;
    CUmemPoolProps pp = {0};
    CUipcMemHandle ih;
    unsigned int mt;
    CHECK_RC(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemFree_v2(0), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemAllocHost_v2(&h, 16), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemGetInfo_v2(&f, &t), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemCreate(&vh, 2 * MiB, &prop, 0), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemPoolCreate(&pool, &pp), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuIpcGetMemHandle(&ih, 0x1000), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0x1000),
             CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemcpy(0x1000, 0x2000, 1), CUDA_ERROR_NOT_INITIALIZED);
    CHECK_RC(cuMemsetD8_v2(0x1000, 0, 1), CUDA_ERROR_NOT_INITIALIZED);
    check_v1_refused(CUDA_ERROR_NOT_INITIALIZED);
}

static void test_no_context(void)
{
    CUdeviceptr p;
    void *h;
    size_t f, t;
    char buf[8];
    CHECK_RC(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemAllocHost_v2(&h, 16), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemAllocManaged(&p, 16, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemGetInfo_v2(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemAllocAsync(&p, 16, NULL), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemHostRegister_v2(buf, sizeof(buf), 0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemcpyHtoD_v2(0x1000, buf, 1), CUDA_ERROR_INVALID_CONTEXT);
    check_v1_refused(CUDA_ERROR_INVALID_CONTEXT);
}

static void test_device_memory(void)
{
    CUdeviceptr d = 0, d2 = 0;
    CHECK_RC(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAlloc_v2(&d, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAlloc_v2(&d, 1ull << 50), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAlloc_v2(&d, 1000));
    CHECK(d != 0 && d % 512 == 0);
    check_range(d, d, 1000);
    check_range(d + 999, d, 1000);
    CUdeviceptr b = 0;
    size_t s = 0;
    OK(cuMemGetAddressRange_v2(NULL, &s, d + 8));
    CHECK(s == 1000);
    OK(cuMemGetAddressRange_v2(&b, NULL, d + 8));
    CHECK(b == d);
    OK(cuMemGetAddressRange_v2(NULL, NULL, d));
    CHECK_RC(cuMemGetAddressRange_v2(&b, &s, d + 1000), CUDA_ERROR_NOT_FOUND);

    /* the memory is usable from the CPU, and zero-filled */
    unsigned char *p = (unsigned char *)(uintptr_t)d;
    CHECK(p[0] == 0 && p[999] == 0);
    p[0] = 7;

    /* copies and memsets */
    unsigned char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++)
        src[i] = (unsigned char)i;
    OK(cuMemcpyHtoD_v2(d, src, 1000));
    memset(dst, 0, sizeof(dst));
    OK(cuMemcpyDtoH_v2(dst, d, 1000));
    CHECK(memcmp(src, dst, 1000) == 0);
    OK(cuMemcpyHtoD_v2_ptds(d, src + 1, 10));
    OK(cuMemcpyDtoH_v2_ptds(dst, d, 10));
    CHECK(dst[0] == 1 && dst[9] == 10);
    OK(cuMemAlloc_v2(&d2, 1000));
    OK(cuMemcpyDtoD_v2(d2, d, 1000));
    OK(cuMemcpyDtoD_v2_ptds(d2, d, 10));
    OK(cuMemcpy(d2 + 500, d, 100));
    OK(cuMemcpy_ptds(d2 + 600, d, 100));
    OK(cuMemcpyAsync(d2, d, 10, NULL));
    OK(cuMemcpyAsync_ptsz(d2, d, 10, CU_STREAM_PER_THREAD));
    OK(cuMemcpyHtoDAsync_v2(d, src, 10, NULL));
    OK(cuMemcpyHtoDAsync_v2_ptsz(d, src, 10, NULL));
    OK(cuMemcpyDtoHAsync_v2(dst, d, 10, NULL));
    OK(cuMemcpyDtoHAsync_v2_ptsz(dst, d, 10, NULL));
    OK(cuMemcpyDtoDAsync_v2(d2, d, 10, NULL));
    OK(cuMemcpyDtoDAsync_v2_ptsz(d2, d, 10, CU_STREAM_LEGACY));
    OK(cuMemcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, 10)); /* host-host */
    CHECK(((unsigned char *)(uintptr_t)d2)[505] == 6); /* d[5] after the _ptds copy */
    OK(cuMemsetD8_v2(d, 0xab, 1000));
    CHECK(p[0] == 0xab && p[999] == 0xab);
    OK(cuMemsetD8_v2_ptds(d, 0xcd, 1));
    OK(cuMemsetD16_v2(d, 0x1234, 500));
    CHECK(((uint16_t *)p)[499] == 0x1234);
    OK(cuMemsetD16_v2_ptds(d, 0x1234, 1));
    OK(cuMemsetD32_v2(d, 0xdeadbeef, 250));
    CHECK(((uint32_t *)p)[249] == 0xdeadbeef);
    OK(cuMemsetD32_v2_ptds(d, 1, 1));
    OK(cuMemsetD8Async(d, 1, 10, NULL));
    OK(cuMemsetD8Async_ptsz(d, 1, 10, NULL));
    OK(cuMemsetD16Async(d, 1, 10, NULL));
    OK(cuMemsetD16Async_ptsz(d, 1, 10, NULL));
    OK(cuMemsetD32Async(d, 1, 10, NULL));
    OK(cuMemsetD32Async_ptsz(d, 1, 10, NULL));
    CHECK(((uint32_t *)p)[0] == 1);
    /* copy errors: never a fault */
    CHECK_RC(cuMemcpyHtoD_v2(d, src, 1001), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemcpyDtoH_v2(dst, d + 1, 1000), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemcpyDtoD_v2(d2, d, 2000), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemsetD16_v2(d + 1, 0, 2), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemsetD32_v2(d + 2, 0, 2), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemsetD8_v2(d, 0, 1001), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)dst, 0, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemcpyAsync(d2, d, 10, (CUstream)(uintptr_t)0x12345), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RC(cuMemsetD8Async(d, 0, 10, (CUstream)(uintptr_t)0x12345), CUDA_ERROR_INVALID_HANDLE);

    /* frees */
    CHECK_RC(cuMemFree_v2(d + 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemFree_v2((CUdeviceptr)(uintptr_t)src), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemFreeHost((void *)(uintptr_t)d), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree_v2(0));
    OK(cuMemFree_v2(d));
    CHECK_RC(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemGetAddressRange_v2(&b, &s, d), CUDA_ERROR_NOT_FOUND);
    unsigned int mt;
    CHECK_RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemcpyDtoH_v2(dst, d, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemcpy((CUdeviceptr)(uintptr_t)dst, d, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK(access_faults(d, 0));
    CHECK(!access_faults(d2, 1));
    /* the v1 spelling needs a legacy context: not this primary one */
    CHECK_RC(cuMemFree(0), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuMemFree_v2(d2));
    CHECK(access_faults(d2, 1));
}

/* Under a context made by the modern API, every 32-bit v1 entry point that
 * needs a context is CUDA_ERROR_INVALID_CONTEXT, as on the H200's driver
 * (tests/data/h200-driver-facts.json, "legacy_v1").  g_ctx (primary) is
 * current. */
static void test_legacy_v1(void)
{
    CUdeviceptr d = 0;
    OK(cuMemAlloc_v2(&d, 4096));
    check_v1_refused(CUDA_ERROR_INVALID_CONTEXT);
    /* what the probe does: v1 calls on a (truncated) v2 pointer */
    CUdeviceptr_v1 d32 = (CUdeviceptr_v1)d;
    char buf[64] = {0};
    CUdeviceptr_v1 b32 = 0;
    unsigned int s32 = 0;
    CHECK_RC(cuMemGetAddressRange(&b32, &s32, d32), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemcpyHtoD(d32, buf, 64), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemsetD8(d32, 1, 64), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuMemFree(d32), CUDA_ERROR_INVALID_CONTEXT);
    check_range(d, d, 4096); /* untouched */
    OK(cuMemFree_v2(d));

    /* cuDeviceTotalMem (v1) needs no context and works */
    unsigned int total32 = 0;
    OK(cuDeviceTotalMem(&total32, 0));
    CHECK(total32 == 256u << 20);

    /* a context made by cuCtxCreate_v2 is not a legacy one either */
    CUcontext c2 = NULL, cur = NULL;
    unsigned int ver = 0;
    OK(cuCtxCreate_v2(&c2, 0, 0));
    OK(cuCtxGetApiVersion(c2, &ver));
    CHECK(ver == 3020);
    check_v1_refused(CUDA_ERROR_INVALID_CONTEXT);
    OK(cuCtxDestroy_v2(c2));
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == g_ctx);
}

/* The 32-bit v1 entry points in a legacy context (made by the v1
 * cuCtxCreate): device pointers really below 4 GiB, usable end to end. */
static void test_legacy32(void)
{
    CUcontext lc = NULL, cur = NULL;
    unsigned int ver = 0;
    CHECK(sizeof(CUdeviceptr_v1) == 4);
    OK(cuCtxCreate(&lc, 0, 0)); /* v1: legacy, and made current */
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == lc);
    OK(cuCtxGetApiVersion(lc, &ver));
    CHECK(ver == 3010);

    unsigned int f = 0, t = 0, f1 = 0;
    OK(cuMemGetInfo(&f, &t));
    CHECK(t == 256u << 20 && f == t);
    CHECK_RC(cuMemGetInfo(NULL, &t), CUDA_ERROR_INVALID_VALUE);

    /* cuMemAlloc: a pointer below 4 GiB that is the allocation itself (not
     * a truncated 64-bit one) */
    CUdeviceptr_v1 p32 = 0, q32 = 0, b32 = 0;
    unsigned int s32 = 0;
    CHECK_RC(cuMemAlloc(NULL, 4096), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAlloc(&p32, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAlloc(&p32, 4096));
    CHECK(p32 != 0 && p32 % 512 == 0);
    CHECK((uint64_t)p32 + 4096 <= (1ull << 32));
    check_range(p32, p32, 4096);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p32) == p32);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p32) == CU_MEMORYTYPE_DEVICE);
    OK(cuMemGetInfo(&f1, &t));
    CHECK(f1 == f - 4096);
    OK(cuMemGetAddressRange(&b32, &s32, p32 + 100));
    CHECK(b32 == p32 && s32 == 4096);
    b32 = 0;
    OK(cuMemGetAddressRange(&b32, NULL, p32 + 4095));
    CHECK(b32 == p32);
    OK(cuMemGetAddressRange(NULL, NULL, p32));
    CHECK_RC(cuMemGetAddressRange(&b32, &s32, p32 + 4096), CUDA_ERROR_NOT_FOUND);
    unsigned char *hp = (unsigned char *)(uintptr_t)p32;
    CHECK(hp[0] == 0 && hp[4095] == 0); /* zero-filled, CPU-visible */

    /* memsets */
    OK(cuMemsetD8(p32, 0xab, 4096));
    CHECK(hp[0] == 0xab && hp[4095] == 0xab);
    OK(cuMemsetD16(p32, 0x1234, 2048));
    CHECK(((uint16_t *)hp)[2047] == 0x1234);
    OK(cuMemsetD32(p32, 0x01020304, 1024));
    CHECK(((uint32_t *)hp)[0] == 0x01020304 && ((uint32_t *)hp)[1023] == 0x01020304);
    /* (p32 is alone in the window: nothing on either side) */
    CHECK_RC(cuMemsetD8(p32, 0, 4097), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemsetD32(p32 + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
    unsigned char tmp[256] = {0};
    CHECK_RC(cuMemcpyHtoD(p32 + 4000, tmp, 200), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemcpyDtoH(tmp, p32 - 16, 32), CUDA_ERROR_INVALID_VALUE);

    /* copies */
    unsigned char src[256], dst[256];
    for (int i = 0; i < 256; i++)
        src[i] = (unsigned char)(255 - i);
    OK(cuMemAlloc(&q32, 4096));
    CHECK(q32 != p32 && (uint64_t)q32 + 4096 <= (1ull << 32));
    OK(cuMemcpyHtoD(p32, src, 256));
    CHECK(memcmp(hp, src, 256) == 0);
    OK(cuMemcpyDtoD(q32, p32, 256));
    memset(dst, 0, sizeof dst);
    OK(cuMemcpyDtoH(dst, q32, 256));
    CHECK(memcmp(dst, src, 256) == 0);
    OK(cuMemsetD8(q32, 0, 4096));
    OK(cuMemcpyHtoDAsync(p32 + 1024, src, 256, NULL));
    OK(cuMemcpyDtoDAsync(q32 + 2048, p32 + 1024, 256, NULL));
    memset(dst, 0, sizeof dst);
    OK(cuMemcpyDtoHAsync(dst, q32 + 2048, 256, NULL));
    CHECK(memcmp(dst, src, 256) == 0);
    OK(cuMemcpyDtoH_v2(dst, p32, 16)); /* the modern spellings work here too */
    CHECK(memcmp(dst, src, 16) == 0);
    CHECK_RC(cuMemcpyDtoD(q32, 0x1000u, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemcpyHtoDAsync(p32, src, 16, (CUstream)(uintptr_t)0x12345),
             CUDA_ERROR_INVALID_HANDLE);

    /* cuMemFree (v1) frees the 32-bit pointers */
    CHECK_RC(cuMemFree(p32 + 16), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(0));
    OK(cuMemFree(p32));
    CHECK(access_faults(p32, 0));
    CHECK_RC(cuMemFree(p32), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemGetAddressRange(&b32, &s32, p32), CUDA_ERROR_NOT_FOUND);
    CHECK_RC(cuMemcpyHtoD(p32, src, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(q32));
    OK(cuMemGetInfo(&f1, &t));
    CHECK(f1 == f); /* every page came back */

    /* cuMemAllocPitch (v1) */
    unsigned int pitch = 0;
    CHECK_RC(cuMemAllocPitch(&p32, &pitch, 100, 2, 3), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAllocPitch(&p32, NULL, 100, 2, 4), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocPitch(&p32, &pitch, 100, 2, 4));
    CHECK(pitch == 512 && (uint64_t)p32 + 1024 <= (1ull << 32));
    OK(cuMemGetAddressRange(&b32, &s32, p32 + 600));
    CHECK(b32 == p32 && s32 == 1024);
    OK(cuMemsetD8(p32, 7, 1024));
    OK(cuMemFree(p32));
    CHECK(access_faults(p32, 1));

    /* more than the window (and the device) holds */
    CHECK_RC(cuMemAlloc(&p32, 512u << 20), CUDA_ERROR_OUT_OF_MEMORY);

    /* cuMemAllocHost (v1): pinned host memory, which lives above 4 GiB, so
     * the 32-bit cuMemHostGetDevicePointer cannot express it */
    void *h = NULL;
    CUdeviceptr_v1 hd = 0;
    OK(cuMemAllocHost(&h, 4096));
    CHECK(h != NULL && (uintptr_t)h > 0xffffffffu);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h) ==
          CU_MEMORYTYPE_HOST);
    CHECK_RC(cuMemHostGetDevicePointer(&hd, h, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemHostGetDevicePointer(&hd, h, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(h));

    /* a primary context pushed over the legacy one: refused again */
    CUcontext prim = NULL;
    OK(cuDevicePrimaryCtxRetain(&prim, 0));
    OK(cuCtxPushCurrent(prim));
    check_v1_refused(CUDA_ERROR_INVALID_CONTEXT);
    OK(cuCtxPopCurrent(NULL));
    OK(cuDevicePrimaryCtxRelease(0));
    OK(cuMemGetInfo(&f1, &t));

    /* registered host memory below 4 GiB has a 32-bit device pointer: the
     * v1 copies and memsets work on it */
    void *low = mmap((void *)(uintptr_t)0x30000000, 8192, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (low == MAP_FAILED || (uintptr_t)low != 0x30000000) {
        fprintf(stderr, "note: no low memory, v1 registered-memory checks skipped\n");
    } else {
        OK(cuMemHostRegister(low, 8192, 0));
        CUdeviceptr_v1 lowd = 0, base = 0;
        unsigned int size = 0;
        OK(cuMemHostGetDevicePointer(&lowd, low, 0));
        CHECK(lowd == 0x30000000u);
        OK(cuMemGetAddressRange(&base, &size, lowd + 10));
        CHECK(base == lowd && size == 8192);
        char buf[16] = "hello v1", out[16] = {0};
        OK(cuMemcpyHtoD(lowd, buf, 9));
        OK(cuMemcpyDtoD(lowd + 100, lowd, 9));
        OK(cuMemcpyDtoH(out, lowd + 100, 9));
        CHECK(strcmp(out, "hello v1") == 0);
        OK(cuMemsetD8(lowd, 1, 4));
        OK(cuMemsetD16(lowd, 0x0202, 2));
        OK(cuMemsetD32(lowd, 0x03030303, 1));
        CHECK(((unsigned char *)low)[0] == 3);
        CHECK_RC(cuMemsetD8(lowd, 1, 9000), CUDA_ERROR_INVALID_VALUE);
        CHECK_RC(cuMemFree(lowd), CUDA_ERROR_INVALID_VALUE); /* not device memory */
        OK(cuMemHostUnregister(low));
        munmap(low, 8192);
    }

    /* destroying the legacy context frees its 32-bit allocations */
    OK(cuMemAlloc(&p32, 8192));
    OK(cuCtxDestroy(lc));
    CHECK(access_faults(p32, 0));
    check_v1_refused(CUDA_ERROR_INVALID_CONTEXT); /* no current context */

    /* a second legacy context gets the window again */
    OK(cuCtxCreate(&lc, 0, 0));
    OK(cuMemAlloc(&q32, 8192));
    CHECK(q32 != 0 && (uint64_t)q32 + 8192 <= (1ull << 32));
    hp = (unsigned char *)(uintptr_t)q32;
    CHECK(hp[0] == 0 && hp[8191] == 0);
    OK(cuCtxDestroy(lc));
    CHECK(access_faults(q32, 0));
}

static void test_pitch_managed(void)
{
    CUdeviceptr d;
    size_t pitch = 0;
    CHECK_RC(cuMemAllocPitch_v2(&d, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAllocPitch_v2(&d, NULL, 1000, 10, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAllocPitch_v2(&d, &pitch, 0, 10, 4), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocPitch_v2(&d, &pitch, 1000, 10, 4));
    CHECK(pitch == 1024);
    check_range(d, d, 10240);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) == CU_MEMORYTYPE_DEVICE);
    OK(cuMemFree_v2(d));

    CHECK_RC(cuMemAllocManaged(&d, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAllocManaged(&d, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAllocManaged(NULL, 16, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocManaged(&d, 5000, CU_MEM_ATTACH_HOST));
    OK(cuMemFree_v2(d));
    OK(cuMemAllocManaged(&d, 5000, CU_MEM_ATTACH_GLOBAL));
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d) == CU_MEMORYTYPE_DEVICE);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_IS_MANAGED, d) == 1);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_HOST_POINTER, d) == d);
    check_range(d + 4999, d, 5000);
    ((char *)(uintptr_t)d)[4999] = 1;
    OK(cuMemFree_v2(d));
}

static void test_host_memory(void)
{
    void *h = NULL, *h1 = NULL, *h2 = NULL;
    CHECK_RC(cuMemAllocHost_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemHostAlloc(&h, 4096, 0x100), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocHost_v2(&h, 5000));
    OK(cuMemHostAlloc(&h1, 100, 0));
    /* the v1 spelling needs a legacy context: not this primary one */
    CHECK_RC(cuMemAllocHost(&h2, 100), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(h2 == NULL);
    OK(cuMemHostAlloc(&h2, 5000, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE |
                                     CU_MEMHOSTALLOC_WRITECOMBINED));
    memset(h, 1, 5000);
    CUdeviceptr hp = (CUdeviceptr)(uintptr_t)h;
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, hp) == CU_MEMORYTYPE_HOST);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_HOST_POINTER, hp + 4) == hp + 4);
    CHECK(attr_int(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, hp) == 0);
    check_range(hp + 10, hp, 5000);
    CUdeviceptr dp = 0;
    OK(cuMemHostGetDevicePointer_v2(&dp, (char *)h + 10, 0));
    CHECK(dp == hp + 10);
    CHECK_RC(cuMemHostGetDevicePointer_v2(&dp, h, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemHostGetDevicePointer_v2(NULL, h, 0), CUDA_ERROR_INVALID_VALUE);
    unsigned int fl = 0;
    OK(cuMemHostGetFlags(&fl, h2));
    CHECK(fl == (CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE |
                 CU_MEMHOSTALLOC_WRITECOMBINED));
    OK(cuMemHostGetFlags(&fl, h));
    CHECK(fl & CU_MEMHOSTALLOC_DEVICEMAP);
    CHECK_RC(cuMemHostGetFlags(NULL, h), CUDA_ERROR_INVALID_VALUE);
    char stackbuf[16];
    CHECK_RC(cuMemHostGetFlags(&fl, stackbuf), CUDA_ERROR_INVALID_VALUE);
    /* pinned memory is usable as a device pointer in copies */
    OK(cuMemsetD8_v2(hp, 9, 5000));
    CHECK(((unsigned char *)h)[4999] == 9);
    CHECK_RC(cuMemFree_v2(hp), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemFreeHost((char *)h + 8), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(h));
    CHECK_RC(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    CHECK(access_faults(hp, 0));
    OK(cuMemFreeHost(h1));
    OK(cuMemFreeHost(h2));
    OK(cuMemFreeHost(NULL));

    /* registered memory */
    size_t pg = 4096;
    char *buf = aligned_alloc(pg, 4 * pg);
    CHECK_RC(cuMemHostRegister_v2(NULL, 10, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemHostRegister_v2(buf, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemHostRegister_v2(buf, 10, 0x100), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    OK(cuMemHostRegister_v2(buf + 100, 2 * pg, CU_MEMHOSTREGISTER_DEVICEMAP));
    CHECK_RC(cuMemHostRegister_v2(buf + 100, 2 * pg, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CHECK_RC(cuMemHostRegister_v2(buf + 100 + pg, 2 * pg, 0),
             CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CHECK_RC(cuMemHostRegister(buf, 200, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CUdeviceptr rp = (CUdeviceptr)(uintptr_t)(buf + 100);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, rp + 1) == CU_MEMORYTYPE_HOST);
    check_range(rp + 8, rp, 2 * pg);
    OK(cuMemHostGetDevicePointer_v2(&dp, buf + 200, 0));
    CHECK(dp == (CUdeviceptr)(uintptr_t)(buf + 200));
    CHECK_RC(cuMemHostUnregister(buf + 101), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    OK(cuMemHostUnregister(buf + 100));
    CHECK_RC(cuMemHostUnregister(buf + 100), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    OK(cuMemHostRegister(buf, 10, 0)); /* v1 spelling */
    OK(cuMemHostUnregister(buf));
    free(buf);
    /* device memory cannot be registered */
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, 8192));
    CHECK_RC(cuMemHostRegister_v2((void *)(uintptr_t)d, 4096, 0),
             CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    OK(cuMemFree_v2(d));
    /* unmapped host memory cannot be registered */
    void *gone = mmap(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(gone, pg);
    CHECK_RC(cuMemHostRegister_v2(gone, pg, 0), CUDA_ERROR_INVALID_VALUE);
}

static const CUpointer_attribute ALL_ATTRS[] = {
    CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
    CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, CU_POINTER_ATTRIBUTE_BUFFER_ID,
    CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_MAPPED,
    CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
    CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
    CU_POINTER_ATTRIBUTE_MAPPING_SIZE, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
    CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE,
};
#define NATTR (sizeof(ALL_ATTRS) / sizeof(ALL_ATTRS[0]))

static void test_pointer_attributes(void)
{
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, 1000));
    /* widths: each attribute writes exactly its type's bytes */
    static const size_t width[] = {8, 4, 8, 0, 4, 8, 4, 4, 4, 8, 8, 4, 8, 4, 4, 8, 8, 8, 8, 4};
    for (size_t i = 0; i < NATTR; i++) {
        unsigned char buf[16];
        memset(buf, 0xAA, sizeof(buf));
        CUresult rc = cuPointerGetAttribute(buf, ALL_ATTRS[i], d);
        if (ALL_ATTRS[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
            CHECK(rc == CUDA_ERROR_INVALID_VALUE); /* device memory has no host pointer */
            continue;
        }
        CHECK(rc == CUDA_SUCCESS);
        size_t changed = 0;
        for (size_t j = 0; j < 16; j++)
            if (buf[j] != 0xAA)
                changed = j + 1;
        CHECK(changed <= width[i]);
        CHECK(buf[width[i]] == 0xAA);
    }
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_CONTEXT, d) == (uint64_t)(uintptr_t)g_ctx);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 5) == CU_MEMORYTYPE_DEVICE);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d + 5) == d + 5);
    {
        /* documented: no current context, no device pointer to give */
        CUdeviceptr dp = 0;
        OK(cuCtxSetCurrent(NULL));
        CHECK_RC(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d),
                 CUDA_ERROR_INVALID_CONTEXT);
        CHECK(dp == 0);
        unsigned int mt = 0; /* the other attributes need none */
        OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
        CHECK(mt == CU_MEMORYTYPE_DEVICE);
        OK(cuCtxSetCurrent(g_ctx));
    }
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_IS_MANAGED, d) == 0);
    CHECK(attr_int(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d) == 0);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d) == 1);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 5) == d);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 5) == 1000);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MAPPED, d) == 1);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, d) == 3);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, d) == 0);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, d + 5) == d);
    CUDA_POINTER_ATTRIBUTE_P2P_TOKENS tok;
    OK(cuPointerGetAttribute(&tok, CU_POINTER_ATTRIBUTE_P2P_TOKENS, d));
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d) == 1); /* side effect */
    int zero = 0;
    OK(cuPointerSetAttribute(&zero, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d));
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d) == 0);
    int one = 1;
    CHECK_RC(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuPointerSetAttribute(NULL, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, 0x1000),
             CUDA_ERROR_INVALID_VALUE);
    unsigned int v;
    CHECK_RC(cuPointerGetAttribute(&v, (CUpointer_attribute)99, d), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0),
             CUDA_ERROR_INVALID_VALUE);

    /* buffer ids: unique, never reused even at the same address */
    unsigned long long id1 = attr_u64(CU_POINTER_ATTRIBUTE_BUFFER_ID, d);
    OK(cuMemFree_v2(d));
    CUdeviceptr d2;
    OK(cuMemAlloc_v2(&d2, 1000));
    unsigned long long id2 = attr_u64(CU_POINTER_ATTRIBUTE_BUFFER_ID, d2);
    CHECK(id1 != id2);

    /* cuPointerGetAttributes: all at once, known and unknown pointers */
    unsigned char store[NATTR][16];
    void *data[NATTR];
    for (size_t i = 0; i < NATTR; i++)
        data[i] = store[i];
    OK(cuPointerGetAttributes(NATTR, (CUpointer_attribute *)ALL_ATTRS, data, d2));
    CHECK(*(unsigned int *)store[1] == CU_MEMORYTYPE_DEVICE);
    CHECK(*(unsigned long long *)store[5] == id2);
    CHECK(*(void **)store[3] == NULL); /* no host pointer: default value */
    memset(store, 0xAA, sizeof(store));
    char host[8];
    OK(cuPointerGetAttributes(NATTR, (CUpointer_attribute *)ALL_ATTRS, data,
                              (CUdeviceptr)(uintptr_t)host));
    CHECK(*(unsigned int *)store[1] == 0);
    CHECK(*(int *)store[7] == CU_DEVICE_INVALID);
    CHECK(*(unsigned long long *)store[0] == 0);
    CHECK(store[1][4] == 0xAA); /* 4-byte MEMORY_TYPE */
    /* the range attributes untouched, as NVIDIA's driver 580 leaves them for
     * memory in no allocation, with a current context ... */
    for (size_t i = 0; i < NATTR; i++)
        if (ALL_ATTRS[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
            ALL_ATTRS[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
            CHECK(store[i][0] == 0xAA);
    /* ... and with none, the other defaults still written */
    OK(cuCtxSetCurrent(NULL));
    memset(store, 0xAA, sizeof(store));
    OK(cuPointerGetAttributes(NATTR, (CUpointer_attribute *)ALL_ATTRS, data,
                              (CUdeviceptr)(uintptr_t)host));
    OK(cuCtxSetCurrent(g_ctx));
    for (size_t i = 0; i < NATTR; i++) {
        bool range = ALL_ATTRS[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                     ALL_ATTRS[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE;
        CHECK((store[i][0] == 0xAA) == range);
    }
    CHECK(*(int *)store[7] == CU_DEVICE_INVALID);
    CHECK_RC(cuPointerGetAttributes(NATTR, NULL, data, d2), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuPointerGetAttributes(NATTR, (CUpointer_attribute *)ALL_ATTRS, NULL, d2),
             CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree_v2(d2));
}

static void test_oom_and_info(void)
{
    size_t f0, t, f1;
    CHECK_RC(cuMemGetInfo_v2(NULL, &t), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemGetInfo_v2(&f0, &t));
    CHECK(t == 256ull << 20);
    CUdeviceptr a, b, c;
    CHECK_RC(cuMemAlloc_v2(&a, 300ull << 20), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAlloc_v2(&a, 100ull << 20));
    OK(cuMemGetInfo_v2(&f1, &t));
    CHECK(f0 - f1 == 100ull << 20);
    OK(cuMemAlloc_v2(&b, 100ull << 20));
    CHECK_RC(cuMemAlloc_v2(&c, 100ull << 20), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_RC(cuMemAllocManaged(&c, 100ull << 20, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK_RC(cuMemAllocAsync(&c, 100ull << 20, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    /* the memory is real: touch it all */
    memset((void *)(uintptr_t)a, 1, 100ull << 20);
    OK(cuMemFree_v2(a));
    OK(cuMemFree_v2(b));
    OK(cuMemGetInfo_v2(&f1, &t));
    CHECK(f1 == f0);
    OK(cuMemAlloc_v2(&c, 100ull << 20));
    CHECK(((unsigned char *)(uintptr_t)c)[12345] == 0); /* pages were given back */
    OK(cuMemFree_v2(c));
}

static void test_vmm(void)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t g = 0;
    OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(g == 2 * MiB);
    OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    CHECK(g == 2 * MiB);
    CHECK_RC(cuMemGetAllocationGranularity(NULL, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemGetAllocationGranularity(&g, &prop, 7), CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp bad = prop;
    bad.location.id = 5;
    CHECK_RC(cuMemGetAllocationGranularity(&g, &bad, 0), CUDA_ERROR_INVALID_DEVICE);
    bad = prop;
    bad.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
    CHECK_RC(cuMemGetAllocationGranularity(&g, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    bad = prop;
    bad.location.type = CU_MEM_LOCATION_TYPE_HOST;
    OK(cuMemGetAllocationGranularity(&g, &bad, 0));

    CUmemGenericAllocationHandle h = 0, h2 = 0;
    CHECK_RC(cuMemCreate(&h, g + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemCreate(&h, g, &prop, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemCreate(NULL, g, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemCreate(&h, 512 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemCreate(&h, 2 * g, &prop, 0));
    CHECK(h != 0);
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    CHECK(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.type == prop.type);
    CHECK_RC(cuMemGetAllocationPropertiesFromHandle(&got, 0x1234), CUDA_ERROR_INVALID_VALUE);

    CUdeviceptr va = 0;
    CHECK_RC(cuMemAddressReserve(&va, 4 * g, 3, 0, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAddressReserve(&va, 4 * g, 0, 0, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemAddressReserve(NULL, 4 * g, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
    CHECK(va % g == 0);
    CUdeviceptr b = 0;
    size_t s = 0;
    CHECK_RC(cuMemGetAddressRange_v2(&b, &s, va), CUDA_ERROR_NOT_FOUND);
    CHECK_RC(cuMemMap(va + g, 2 * g, g, h, 0), CUDA_ERROR_INVALID_VALUE);  /* offset */
    CHECK_RC(cuMemMap(va + g, 2 * g, 0, h, 1), CUDA_ERROR_INVALID_VALUE);  /* flags */
    CHECK_RC(cuMemMap(va + g, 3 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  /* too big */
    CHECK_RC(cuMemMap(va + 4 * g, 2 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* outside */
    CHECK_RC(cuMemMap(va + g, 2 * g, 0, 0x999, 0), CUDA_ERROR_INVALID_VALUE); /* handle */
    OK(cuMemMap(va + g, 2 * g, 0, h, 0));
    CHECK_RC(cuMemMap(va, 2 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* overlap */
    /* mapped but no access yet */
    CHECK(access_faults(va + g, 0));
    CHECK_RC(cuMemGetAddressRange_v2(&b, &s, va + g), CUDA_ERROR_NOT_FOUND);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va + g) == 0);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MAPPED, va + g) == 1);
    CHECK_RC(cuMemsetD8_v2(va + g, 1, 10), CUDA_ERROR_INVALID_VALUE);

    CUmemAccessDesc desc;
    memset(&desc, 0, sizeof(desc));
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = 0;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    CHECK_RC(cuMemSetAccess(va, 2 * g, &desc, 1), CUDA_ERROR_INVALID_VALUE); /* not mapped */
    CHECK_RC(cuMemSetAccess(va + g, 2 * g, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc bdesc = desc;
    bdesc.flags = (CUmemAccess_flags)2;
    CHECK_RC(cuMemSetAccess(va + g, 2 * g, &bdesc, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemSetAccess(va + g, 2 * g, &desc, 1));
    CHECK(!access_faults(va + g, 0));
    CHECK(access_faults(va + g, 1));
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    OK(cuMemSetAccess(va + g, 2 * g, &desc, 1));
    unsigned long long fl = 0;
    OK(cuMemGetAccess(&fl, &desc.location, va + g + 100));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemLocation hostloc = {CU_MEM_LOCATION_TYPE_HOST, 0};
    OK(cuMemGetAccess(&fl, &hostloc, va + g));
    CHECK(fl == 0);
    CHECK_RC(cuMemGetAccess(&fl, &desc.location, va), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemGetAccess(NULL, &desc.location, va + g), CUDA_ERROR_INVALID_VALUE);
    memset((void *)(uintptr_t)(va + g), 5, 2 * g);
    check_range(va + 2 * g + 8, va + g, 2 * g);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + g + 1) == va);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + g + 1) == 4 * g);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, va + 2 * g) == va + g);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + 2 * g) == 2 * g);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + g) == CU_MEMORYTYPE_DEVICE);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_CONTEXT, va + g) == 0);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va + g) == 3);
    /* retain gives the same handle; release twice; memory lives while mapped */
    OK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + 2 * g)));
    CHECK(h2 == h);
    CHECK_RC(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)va), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemRelease(h2));
    OK(cuMemRelease(h));
    CHECK_RC(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    CHECK(((unsigned char *)(uintptr_t)(va + g))[0] == 5);
    OK(cuMemcpyDtoD_v2(va + g, va + 2 * g, 100));
    CHECK_RC(cuMemAddressFree(va, 4 * g), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    CHECK_RC(cuMemUnmap(va + g, g), CUDA_ERROR_INVALID_VALUE);       /* partial */
    OK(cuMemUnmap(va + g, 2 * g));
    CHECK_RC(cuMemUnmap(va + g, 2 * g), CUDA_ERROR_INVALID_VALUE);
    CHECK(access_faults(va + g, 0));
    CHECK_RC(cuMemGetAddressRange_v2(&b, &s, va + g), CUDA_ERROR_NOT_FOUND);
    CHECK_RC(cuMemAddressFree(va, 2 * g), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAddressFree(va, 4 * g));
    CHECK_RC(cuMemAddressFree(va, 4 * g), CUDA_ERROR_INVALID_VALUE);
    /* the hint is honoured when free */
    CUdeviceptr va2 = 0;
    OK(cuMemAddressReserve(&va2, 2 * g, 0, va, 0));
    CHECK(va2 == va);

    /* host-located VMM: two pieces, one access call over both */
    CUmemAllocationProp hprop = prop;
    hprop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemGenericAllocationHandle ha, hb;
    OK(cuMemCreate(&ha, g, &hprop, 0));
    OK(cuMemCreate(&hb, g, &hprop, 0));
    OK(cuMemMap(va2, g, 0, ha, 0));
    OK(cuMemMap(va2 + g, g, 0, hb, 0));
    desc.location.type = CU_MEM_LOCATION_TYPE_HOST;
    OK(cuMemSetAccess(va2, 2 * g, &desc, 1));
    memset((void *)(uintptr_t)va2, 1, 2 * g);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va2 + g) == CU_MEMORYTYPE_HOST);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, va2) !=
          attr_u64(CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, va2 + g));
    OK(cuMemUnmap(va2, 2 * g));
    OK(cuMemRelease(ha));
    OK(cuMemRelease(hb));
    OK(cuMemAddressFree(va2, 2 * g));
}

static void test_pools(void)
{
    CUmemoryPool def = NULL, cur = NULL, pool = NULL, hpool = NULL;
    CHECK_RC(cuDeviceGetDefaultMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuDeviceGetDefaultMemPool(&def, 7), CUDA_ERROR_INVALID_DEVICE);
    OK(cuDeviceGetDefaultMemPool(&def, 0));
    OK(cuDeviceGetMemPool(&cur, 0));
    CHECK(def != NULL && cur == def);
    CHECK_RC(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);

    CUdeviceptr a = 0, b = 0;
    CHECK_RC(cuMemAllocAsync(NULL, 16, NULL), CUDA_ERROR_INVALID_VALUE);
    a = 1;
    OK(cuMemAllocAsync(&a, 0, NULL)); /* the H200 driver accepts 0 bytes */
    CHECK(a == 0);
    CHECK_RC(cuMemAllocAsync(&a, 16, (CUstream)(uintptr_t)0x4321), CUDA_ERROR_INVALID_HANDLE);
    CUstream st;
    OK(cuStreamCreate(&st, 0));
    OK(cuMemAllocAsync(&a, 5000, st));
    OK(cuMemAllocAsync_ptsz(&b, 100, CU_STREAM_PER_THREAD));
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) == CU_MEMORYTYPE_DEVICE);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a) == (uint64_t)(uintptr_t)def);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_CONTEXT, a) == 0);
    check_range(a + 10, a, 5000);
    cuuint64_t used = 0, res = 0, high = 0;
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res));
    CHECK(used == 8192 + 4096 && res >= used);
    OK(cuMemFreeAsync(a, st));
    OK(cuMemFreeAsync_ptsz(b, NULL));
    CHECK(access_faults(a, 0));
    CHECK_RC(cuMemFreeAsync(a, st), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    CHECK(used == 0 && high == 8192 + 4096);
    cuuint64_t zero = 0;
    OK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    CHECK(high == 0);
    OK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
    cuuint64_t thr = 1 << 20;
    OK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    thr = 0;
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    CHECK(thr == 1 << 20);
    int reuse = 0;
    OK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    reuse = 5;
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    CHECK(reuse == 0);
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, &reuse));
    OK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &reuse));
    CHECK_RC(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemPoolGetAttribute(def, (CUmemPool_attribute)99, &zero), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, NULL),
             CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolTrimTo(def, 0));
    CHECK_RC(cuMemPoolTrimTo((CUmemoryPool)(uintptr_t)0x999, 0), CUDA_ERROR_INVALID_VALUE);

    /* a device pool of our own */
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 0;
    CHECK_RC(cuMemPoolCreate(NULL, &pp), CUDA_ERROR_INVALID_VALUE);
    CUmemPoolProps bad = pp;
    bad.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
    CHECK_RC(cuMemPoolCreate(&pool, &bad), CUDA_ERROR_INVALID_VALUE);
    bad = pp;
    bad.location.id = 9;
    CHECK_RC(cuMemPoolCreate(&pool, &bad), CUDA_ERROR_INVALID_DEVICE);
    OK(cuMemPoolCreate(&pool, &pp));
    OK(cuDeviceSetMemPool(0, pool));
    OK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cur == pool);
    OK(cuMemAllocAsync(&a, 100, NULL));
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a) == (uint64_t)(uintptr_t)pool);
    OK(cuMemAllocFromPoolAsync(&b, 100, def, NULL));
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, b) == (uint64_t)(uintptr_t)def);
    OK(cuMemFree_v2(b)); /* cuMemFree of pool memory is allowed */
    OK(cuMemAllocFromPoolAsync_ptsz(&b, 100, pool, NULL));
    CHECK_RC(cuMemAllocFromPoolAsync(&b, 100, (CUmemoryPool)(uintptr_t)0x999, NULL),
             CUDA_ERROR_INVALID_VALUE);
    /* destroyed with live allocations: they stay valid until freed */
    OK(cuMemPoolDestroy(pool));
    CHECK_RC(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
    OK(cuDeviceGetMemPool(&cur, 0));
    CHECK(cur == def);
    ((char *)(uintptr_t)a)[0] = 1;
    OK(cuMemFreeAsync(a, NULL));
    OK(cuMemFreeAsync(b, NULL));
    OK(cuMemFreeAsync(0, NULL));

    /* a host-located pool */
    pp.location.type = CU_MEM_LOCATION_TYPE_HOST;
    OK(cuMemPoolCreate(&hpool, &pp));
    CHECK_RC(cuDeviceSetMemPool(0, hpool), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocFromPoolAsync(&a, 5000, hpool, st));
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) == CU_MEMORYTYPE_HOST);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_HOST_POINTER, a) == a);
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a) == (uint64_t)(uintptr_t)hpool);
    CUdeviceptr rb;
    size_t rs;
    CHECK_RC(cuMemGetAddressRange_v2(&rb, &rs, a), CUDA_ERROR_NOT_FOUND); /* as the driver */
    memset((void *)(uintptr_t)a, 3, 5000);
    OK(cuMemFreeAsync(a, st));
    OK(cuMemPoolDestroy(hpool));
    OK(cuStreamDestroy_v2(st));
}

/* ---- IPC ------------------------------------------------------------------------- */

static char g_self[4096];

static void hex_encode(const CUipcMemHandle *h, char *out)
{
    for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)h->reserved[i]);
}

static int ipc_child(const char *hex)
{
    CUipcMemHandle h;
    for (int i = 0; i < CU_IPC_HANDLE_SIZE; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return 2;
        h.reserved[i] = (char)v;
    }
    CUcontext ctx;
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    CUdeviceptr p = 0, p2 = 0;
    CHECK_RC(cuIpcOpenMemHandle_v2(NULL, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
             CUDA_ERROR_INVALID_VALUE);
    OK(cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    OK(cuIpcOpenMemHandle(&p2, h, 0)); /* 4010 spelling: same pointer, one more ref */
    CHECK(p == p2 && p != 0);
    check_range(p + 10, p, 1 << 20);
    CHECK(attr_u32(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CU_MEMORYTYPE_DEVICE);
    unsigned char *m = (unsigned char *)(uintptr_t)p;
    CHECK(m[0] == 0x5a && m[(1 << 20) - 1] == 0x5a);
    memset(m, 0xa5, 1 << 20); /* the parent sees this */
    CHECK_RC(cuIpcCloseMemHandle(p + 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuIpcCloseMemHandle(p));
    CHECK(m[0] == 0xa5); /* one reference left */
    OK(cuIpcCloseMemHandle(p));
    CHECK_RC(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE);
    CHECK(access_faults(p, 0));
    CUipcMemHandle junk;
    memset(&junk, 0x11, sizeof(junk));
    CHECK_RC(cuIpcOpenMemHandle_v2(&p, junk, 0), CUDA_ERROR_INVALID_VALUE);
    return failures ? 1 : 0;
}

static void test_ipc(void)
{
    CUdeviceptr d;
    OK(cuMemAlloc_v2(&d, 1 << 20));
    memset((void *)(uintptr_t)d, 0x5a, 1 << 20);
    CUipcMemHandle h;
    CHECK_RC(cuIpcGetMemHandle(NULL, d), CUDA_ERROR_INVALID_VALUE);
    OK(cuIpcGetMemHandle(&h, d));
    CUdeviceptr opened;
    CHECK_RC(cuIpcOpenMemHandle_v2(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
             CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RC(cuIpcCloseMemHandle(d), CUDA_ERROR_INVALID_VALUE);
    void *host;
    OK(cuMemAllocHost_v2(&host, 4096));
    CUipcMemHandle hh;
    CHECK_RC(cuIpcGetMemHandle(&hh, (CUdeviceptr)(uintptr_t)host), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(host));
    CHECK_RC(cuIpcGetMemHandle(&hh, 0x1000), CUDA_ERROR_INVALID_VALUE);

    char hex[2 * CU_IPC_HANDLE_SIZE + 1];
    hex_encode(&h, hex);
    pid_t pid = fork();
    if (pid == 0) {
        execl(g_self, g_self, "ipc-child", hex, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    unsigned char *m = (unsigned char *)(uintptr_t)d;
    CHECK(m[0] == 0xa5 && m[(1 << 20) - 1] == 0xa5);
    OK(cuMemFree_v2(d));
}

/* ---- contexts ------------------------------------------------------------------------ */

static void test_context_teardown(void)
{
    CUcontext c;
    OK(cuCtxCreate_v2(&c, 0, 0));
    CUdeviceptr d, m, pa;
    void *h;
    OK(cuMemAlloc_v2(&d, 4096));
    OK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAllocHost_v2(&h, 4096));
    OK(cuMemAllocAsync(&pa, 4096, NULL));
    CHECK(attr_u64(CU_POINTER_ATTRIBUTE_CONTEXT, d) == (uint64_t)(uintptr_t)c);
    OK(cuCtxDestroy_v2(c));
    OK(cuCtxSetCurrent(g_ctx));
    unsigned int mt;
    CHECK_RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m), CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h),
             CUDA_ERROR_INVALID_VALUE);
    CHECK_RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pa), CUDA_ERROR_INVALID_VALUE);
    CHECK(access_faults(d, 0));
}

/* ---- stress ---------------------------------------------------------------------------- */

#define THREADS 8
#define OPS 10000
#define SLOTS 32
#define MAXLIVE (THREADS * SLOTS)

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t base, size; } live[MAXLIVE];
static int stress_fail;

static void live_add(uint64_t base, uint64_t size)
{
    pthread_mutex_lock(&live_mu);
    int freeslot = -1;
    for (int i = 0; i < MAXLIVE; i++) {
        if (live[i].size == 0) {
            if (freeslot < 0)
                freeslot = i;
            continue;
        }
        if (base < live[i].base + live[i].size && live[i].base < base + size)
            stress_fail = 1; /* two live allocations overlap */
    }
    if (freeslot >= 0) {
        live[freeslot].base = base;
        live[freeslot].size = size;
    } else {
        stress_fail = 1;
    }
    pthread_mutex_unlock(&live_mu);
}

static void live_remove(uint64_t base)
{
    pthread_mutex_lock(&live_mu);
    for (int i = 0; i < MAXLIVE; i++)
        if (live[i].size && live[i].base == base) {
            live[i].size = 0;
            break;
        }
    pthread_mutex_unlock(&live_mu);
}

static void *stress_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
    unsigned tag = (unsigned)(uintptr_t)arg + 1;
    CUdeviceptr slot[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    int kind[SLOTS] = {0};
    if (cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS)
        stress_fail = 1;
    for (int op = 0; op < OPS; op++) {
        int i = (int)(rand_r(&seed) % SLOTS);
        if (slot[i]) {
            unsigned char *p = (unsigned char *)(uintptr_t)slot[i];
            if (p[0] != (unsigned char)tag || p[size[i] - 1] != (unsigned char)tag)
                stress_fail = 1; /* someone else wrote into our allocation */
            live_remove(slot[i]);
            CUresult rc = kind[i] == 0   ? cuMemFree_v2(slot[i])
                          : kind[i] == 1 ? cuMemFreeAsync(slot[i], NULL)
                                         : cuMemFreeHost((void *)(uintptr_t)slot[i]);
            if (rc != CUDA_SUCCESS)
                stress_fail = 1;
            slot[i] = 0;
        } else {
            size_t sz = 1 + rand_r(&seed) % 20000;
            int k = (int)(rand_r(&seed) % 3);
            CUresult rc;
            if (k == 0) {
                rc = cuMemAlloc_v2(&slot[i], sz);
            } else if (k == 1) {
                rc = cuMemAllocAsync(&slot[i], sz, CU_STREAM_PER_THREAD);
            } else {
                void *h = NULL;
                rc = cuMemAllocHost_v2(&h, sz);
                slot[i] = (CUdeviceptr)(uintptr_t)h;
            }
            if (rc != CUDA_SUCCESS || !slot[i]) {
                stress_fail = 1;
                slot[i] = 0;
                continue;
            }
            CUdeviceptr b = 0;
            size_t s = 0;
            if (cuMemGetAddressRange_v2(&b, &s, slot[i] + sz - 1) != CUDA_SUCCESS ||
                b != slot[i] || s != sz)
                stress_fail = 1;
            live_add(slot[i], sz);
            size[i] = sz;
            kind[i] = k;
            unsigned char *p = (unsigned char *)(uintptr_t)slot[i];
            p[0] = (unsigned char)tag;
            p[sz - 1] = (unsigned char)tag;
        }
    }
    for (int i = 0; i < SLOTS; i++)
        if (slot[i]) {
            live_remove(slot[i]);
            CUresult rc = kind[i] == 2 ? cuMemFreeHost((void *)(uintptr_t)slot[i])
                                       : cuMemFree_v2(slot[i]);
            if (rc != CUDA_SUCCESS)
                stress_fail = 1;
        }
    return NULL;
}

static void test_stress(void)
{
    size_t f0, f1, t;
    OK(cuMemGetInfo_v2(&f0, &t));
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, stress_thread, (void *)(uintptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    CHECK(!stress_fail);
    OK(cuMemGetInfo_v2(&f1, &t));
    CHECK(f0 == f1); /* every page came back */
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
    if (n <= 0)
        return 2;
    g_self[n] = '\0';
    /* The simulator reads its configuration when it is loaded: re-exec with
     * the memory size this test expects. */
    const char *mem = getenv("MEMHOOK_SIM_DEVICE_MEMORY");
    if (!mem || strcmp(mem, "256M") != 0) {
        setenv("MEMHOOK_SIM_DEVICE_MEMORY", "256M", 1);
        setenv("MEMHOOK_SIM_DEVICES", "1", 1);
        execv(g_self, argv);
        return 2;
    }
    if (argc >= 3 && strcmp(argv[1], "ipc-child") == 0)
        return ipc_child(argv[2]);
    bool legacy32 = argc >= 2 && strcmp(argv[1], "legacy32") == 0;

    test_before_init();
    OK(cuInit(0));
    test_no_context();
    if (legacy32) {
        test_legacy32();
        if (failures) {
            fprintf(stderr, "%d failure(s)\n", failures);
            return 1;
        }
        printf("test_sim_memory legacy32: all passed\n");
        return 0;
    }
    OK(cuDevicePrimaryCtxRetain(&g_ctx, 0));
    OK(cuCtxSetCurrent(g_ctx));
    test_device_memory();
    test_legacy_v1();
    test_pitch_managed();
    test_host_memory();
    test_pointer_attributes();
    test_oom_and_info();
    test_vmm();
    test_pools();
    test_ipc();
    test_context_teardown();
    test_stress();
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("test_sim_memory: all passed\n");
    return 0;
}
