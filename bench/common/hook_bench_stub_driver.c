/*
 * hook_bench_stub_driver.c - a "driver" (built as libcuda.so.1) whose
 * allocations cost a few ns, for hook_bench.c.
 *
 * The simulator maps and unmaps real pages for every allocation, so its
 * alloc+free pair is several microseconds of system calls, whose jitter on a
 * shared machine is larger than the hook's whole cost.  With this stub the
 * pair is a few loads and stores, and what hook_bench measures hooked minus
 * unhooked is the hook itself: wrapper, event, queue, live table, and the
 * driver queries the wrapper makes (cuCtxGetDevice here is as cheap as it
 * can be, so the real figure is at least this).
 *
 * It exports the entry points hook_bench and the hooks call, with real call
 * frames long enough for bistro (built with -fno-optimize-sibling-calls like
 * the simulator).  Addresses come from a per-thread free stack over a
 * per-thread window of a reserved range, so threads never share a line.
 */
#include <stddef.h>
#include <stdint.h>

#include "memhook/cuda_abi.h"

#define API __attribute__((visibility("default"), noinline))

#define THREAD_WINDOW (1ull << 32)
#define STACK 64

static uint64_t g_next_window = 0x7e0000000000ull;
#define TLS __thread __attribute__((tls_model("initial-exec")))
static TLS uint64_t t_base, t_bump;
static TLS uint64_t t_free[STACK];
static TLS int t_nfree;
static TLS int t_has_ctx;
static int g_ctx_token;

static uint64_t take(size_t n)
{
    if (t_nfree > 0)
        return t_free[--t_nfree];
    if (t_base == 0) {
        t_base = __atomic_fetch_add(&g_next_window, THREAD_WINDOW, __ATOMIC_RELAXED);
        t_bump = t_base;
    }
    uint64_t p = t_bump;
    t_bump += (n + 255) & ~255ull;
    return p;
}

static CUresult give(uint64_t p)
{
    if (p == 0)
        return CUDA_SUCCESS;
    if (t_nfree < STACK)
        t_free[t_nfree++] = p;
    return CUDA_SUCCESS;
}

API CUresult cuInit(unsigned int flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
API CUresult cuDriverGetVersion(int *v)
{
    if (v == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (d == NULL || ordinal != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *d = 0;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (c == NULL || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *c = (CUcontext)&g_ctx_token;
    return CUDA_SUCCESS;
}
API CUresult cuCtxSetCurrent(CUcontext c)
{
    t_has_ctx = c != NULL;
    return CUDA_SUCCESS;
}
/* One device, as a single-GPU machine's driver says: the hooks then know
 * an ALLOC's device without asking cuCtxGetDevice (cuda_hooks.h). */
API CUresult cuDeviceGetCount(int *n)
{
    if (n == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *n = 1;
    return CUDA_SUCCESS;
}
API CUresult cuCtxGetDevice(CUdevice *d)
{
    if (!t_has_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *d = 0;
    return CUDA_SUCCESS;
}
API CUresult cuStreamCreate(CUstream *s, unsigned int flags)
{
    if (s == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *s = (CUstream)(uintptr_t)(0x1000 + flags);
    return CUDA_SUCCESS;
}
API CUresult cuStreamDestroy_v2(CUstream s) { return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuStreamSynchronize(CUstream s) { return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    if (p == NULL || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!t_has_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *p = take(n);
    return CUDA_SUCCESS;
}
API CUresult cuMemFree_v2(CUdeviceptr p)
{
    if (!t_has_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return give(p);
}
API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s)
{
    if (p == NULL || n == 0 || s == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!t_has_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *p = take(n);
    return CUDA_SUCCESS;
}
API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    if (s == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!t_has_ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return give(p);
}
/* Only reached for a FREE the hooks did not see allocated: not here. */
API CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    (void)base;
    (void)size;
    (void)p;
    return CUDA_ERROR_NOT_FOUND;
}
