/*
 * init.c - how the runtime finds the driver: dlopen("libcuda.so.1"), dlsym
 * of cuGetProcAddress_v2 (the only cu* name ever looked up with dlsym), and
 * cuGetProcAddress(name, &pfn, 13000, flags) for every entry the runtime
 * uses, exactly the way NVIDIA's libcudart does it.  Then cuInit(0).
 *
 * Names are asked for by their base spelling ("cuMemAlloc", not
 * "cuMemAlloc_v2"): cuGetProcAddress picks the version that matches the
 * requested CUDA version.  The function types in memhook_cudart_driver are
 * those of the version CUDA 13000 gets (cuCtxGetDevice and cuCtxSynchronize
 * changed signature in CUDA 13).  The _ptsz/_ptds variants are the same base names
 * asked for with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "cudart_internal.h"

typedef CUresult (*get_proc_address_fn)(const char *symbol, void **pfn, int cuda_version,
                                        cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *status);

/* Process-wide: the driver's entry points are the same for every thread and
 * are written once, under pthread_once, before any reader can see them. */
memhook_cudart_driver memhook_cudart_drv;

#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
#define DEF CU_GET_PROC_ADDRESS_DEFAULT

struct entry {
    const char *name;   /* base name passed to cuGetProcAddress */
    cuuint64_t flags;
    size_t offset;      /* into memhook_cudart_driver */
    bool required;      /* missing -> cudaErrorInsufficientDriver at init */
};

#define E(field, name, flags, req) \
    { name, flags, offsetof(memhook_cudart_driver, field), req }

static const struct entry entries[] = {
    E(cuInit, "cuInit", DEF, true),
    E(cuDriverGetVersion, "cuDriverGetVersion", DEF, true),
    E(cuDeviceGetCount, "cuDeviceGetCount", DEF, true),
    E(cuDeviceGet, "cuDeviceGet", DEF, true),
    E(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", DEF, true),
    E(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", DEF, true),
    E(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", DEF, true),
    E(cuCtxGetCurrent, "cuCtxGetCurrent", DEF, true),
    E(cuCtxSetCurrent, "cuCtxSetCurrent", DEF, true),
    E(cuCtxGetDevice, "cuCtxGetDevice", DEF, true),
    E(cuCtxSynchronize, "cuCtxSynchronize", DEF, true),
    E(cuMemAlloc, "cuMemAlloc", DEF, true),
    E(cuMemAllocManaged, "cuMemAllocManaged", DEF, false),
    E(cuMemAllocPitch, "cuMemAllocPitch", DEF, false),
    E(cuMemFree, "cuMemFree", DEF, true),
    E(cuMemHostAlloc, "cuMemHostAlloc", DEF, false),
    E(cuMemFreeHost, "cuMemFreeHost", DEF, false),
    E(cuMemHostRegister, "cuMemHostRegister", DEF, false),
    E(cuMemHostUnregister, "cuMemHostUnregister", DEF, false),
    E(cuMemGetInfo, "cuMemGetInfo", DEF, false),
    E(cuMemAllocAsync, "cuMemAllocAsync", DEF, false),
    E(cuMemAllocAsync_ptsz, "cuMemAllocAsync", PTDS, false),
    E(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", DEF, false),
    E(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", PTDS, false),
    E(cuMemFreeAsync, "cuMemFreeAsync", DEF, false),
    E(cuMemFreeAsync_ptsz, "cuMemFreeAsync", PTDS, false),
    E(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", DEF, false),
    E(cuMemPoolCreate, "cuMemPoolCreate", DEF, false),
    E(cuMemPoolDestroy, "cuMemPoolDestroy", DEF, false),
    E(cuPointerGetAttributes, "cuPointerGetAttributes", DEF, false),
    E(cuStreamCreate, "cuStreamCreate", DEF, false),
    E(cuStreamDestroy, "cuStreamDestroy", DEF, false),
    E(cuStreamSynchronize, "cuStreamSynchronize", DEF, false),
    E(cuStreamSynchronize_ptsz, "cuStreamSynchronize", PTDS, false),
    E(cuMemcpy, "cuMemcpy", DEF, false),
    E(cuMemcpy_ptds, "cuMemcpy", PTDS, false),
    E(cuMemcpyAsync, "cuMemcpyAsync", DEF, false),
    E(cuMemcpyAsync_ptsz, "cuMemcpyAsync", PTDS, false),
    E(cuMemsetD8, "cuMemsetD8", DEF, false),
    E(cuMemsetD8_ptds, "cuMemsetD8", PTDS, false),
    E(cuMemsetD8Async, "cuMemsetD8Async", DEF, false),
    E(cuMemsetD8Async_ptsz, "cuMemsetD8Async", PTDS, false),
    E(cuLibraryLoadData, "cuLibraryLoadData", DEF, false),
    E(cuLibraryUnload, "cuLibraryUnload", DEF, false),
    E(cuLibraryGetGlobal, "cuLibraryGetGlobal", DEF, false),
    E(cuLibraryGetManaged, "cuLibraryGetManaged", DEF, false),
};

/* Process-wide results of the two one-time steps (written inside
 * pthread_once, read after it). */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cudaError_t load_result = cudaErrorInsufficientDriver;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static cudaError_t init_result = cudaErrorInitializationError;
static int device_count;

static void load_driver(void)
{
    /* By soname, like NVIDIA's runtime: the loader finds it through
     * LD_LIBRARY_PATH, the cache or an already-loaded copy.  The handle is
     * never closed (the table points into the library). */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        load_result = cudaErrorInsufficientDriver;
        return;
    }
    get_proc_address_fn gpa = (get_proc_address_fn)dlsym(lib, "cuGetProcAddress_v2");
    if (gpa == NULL) {
        load_result = cudaErrorInsufficientDriver;
        return;
    }
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
        const struct entry *e = &entries[i];
        void *pfn = NULL;
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = gpa(e->name, &pfn, MEMHOOK_CUDART_VERSION, e->flags, &status);
        if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS)
            pfn = NULL;
        if (pfn == NULL && e->required) {
            memhook_cudart_drv = (memhook_cudart_driver){0};
            load_result = cudaErrorInsufficientDriver;
            return;
        }
        *(void **)((char *)&memhook_cudart_drv + e->offset) = pfn;
    }
    load_result = cudaSuccess;
}

cudaError_t memhook_cudart_driver_load(void)
{
    pthread_once(&load_once, load_driver);
    return load_result;
}

static void init_driver(void)
{
    cudaError_t err = memhook_cudart_driver_load();
    if (err != cudaSuccess) {
        init_result = err;
        return;
    }
    CUresult r = memhook_cudart_drv.cuInit(0);
    if (r != CUDA_SUCCESS) {
        init_result = memhook_cudart_from_cu(r);
        return;
    }
    int count = 0;
    r = memhook_cudart_drv.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS) {
        init_result = memhook_cudart_from_cu(r);
        return;
    }
    if (count <= 0) {
        init_result = cudaErrorNoDevice;
        return;
    }
    device_count = count > MEMHOOK_CUDART_MAX_DEVICES ? MEMHOOK_CUDART_MAX_DEVICES : count;
    init_result = cudaSuccess;
}

cudaError_t memhook_cudart_init(void)
{
    pthread_once(&init_once, init_driver);
    return init_result;
}

int memhook_cudart_device_count(void)
{
    return memhook_cudart_init() == cudaSuccess ? device_count : 0;
}
