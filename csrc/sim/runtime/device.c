/*
 * device.c - the runtime's notion of "the current device" and how a thread
 * gets a context, plus the device and version queries.
 *
 * As in NVIDIA's runtime:
 *  - each thread has a device, chosen with cudaSetDevice (default 0);
 *  - a call that needs a context uses the thread's current driver context
 *    when there is one (so driver-API code and runtime code interoperate);
 *    otherwise it retains the primary context of the thread's device (once
 *    per process) and makes it current for the thread;
 *  - cudaDeviceReset destroys the device's primary context; the next call
 *    on any thread retains a fresh one.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "cudart_internal.h"

/* Process-wide, like the primary context itself: the runtime holds one
 * retain reference per device, taken on first use, dropped by
 * cudaDeviceReset.  `generation` counts resets so that a thread that bound
 * the old context notices it is stale (the driver may hand out the same
 * handle again, or keep reporting the destroyed one as current). */
struct primary_slot {
    CUcontext ctx;          /* guarded by primary_lock */
    bool retained;          /* guarded by primary_lock */
    atomic_uint generation;
};
static struct primary_slot primary[MEMHOOK_CUDART_MAX_DEVICES];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

/* Per thread: the device chosen by cudaSetDevice, and which primary context
 * (and generation) the runtime last made current on this thread. */
static _Thread_local int thread_device = 0;
static _Thread_local CUcontext bound_ctx = NULL;
static _Thread_local int bound_device = -1;
static _Thread_local unsigned bound_generation = 0;

static cudaError_t bind_primary(int dev)
{
    CUcontext ctx = NULL;
    unsigned gen;
    pthread_mutex_lock(&primary_lock);
    if (!primary[dev].retained) {
        CUresult r = memhook_cudart_drv.cuDevicePrimaryCtxRetain(&ctx, (CUdevice)dev);
        if (r != CUDA_SUCCESS) {
            pthread_mutex_unlock(&primary_lock);
            return memhook_cudart_from_cu(r);
        }
        primary[dev].ctx = ctx;
        primary[dev].retained = true;
    }
    ctx = primary[dev].ctx;
    gen = atomic_load(&primary[dev].generation);
    pthread_mutex_unlock(&primary_lock);

    CUresult r = memhook_cudart_drv.cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS)
        return memhook_cudart_from_cu(r);
    bound_ctx = ctx;
    bound_device = dev;
    bound_generation = gen;
    return cudaSuccess;
}

cudaError_t memhook_cudart_ctx_ensure(void)
{
    cudaError_t err = memhook_cudart_init();
    if (err != cudaSuccess)
        return err;
    CUcontext cur = NULL;
    CUresult r = memhook_cudart_drv.cuCtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS)
        return memhook_cudart_from_cu(r);
    if (cur != NULL) {
        bool stale = cur == bound_ctx && bound_device >= 0 &&
                     atomic_load(&primary[bound_device].generation) != bound_generation;
        if (!stale)
            return cudaSuccess;
    }
    return bind_primary(thread_device);
}

cudaError_t memhook_cudart_current_device(int *device)
{
    cudaError_t err = memhook_cudart_init();
    if (err != cudaSuccess)
        return err;
    CUcontext cur = NULL;
    CUresult r = memhook_cudart_drv.cuCtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS)
        return memhook_cudart_from_cu(r);
    bool stale = cur != NULL && cur == bound_ctx && bound_device >= 0 &&
                 atomic_load(&primary[bound_device].generation) != bound_generation;
    if (cur != NULL && !stale) {
        CUdevice dev = 0;
        r = memhook_cudart_drv.cuCtxGetDevice(&dev, cur);
        if (r != CUDA_SUCCESS)
            return memhook_cudart_from_cu(r);
        *device = (int)dev;
        return cudaSuccess;
    }
    *device = thread_device;
    return cudaSuccess;
}

/* ---- exported -------------------------------------------------------------- */

CUDART_API cudaError_t cudaGetDeviceCount(int *count)
{
    if (count == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    *count = 0;
    cudaError_t err = memhook_cudart_init();
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    *count = memhook_cudart_device_count();
    return cudaSuccess;
}

CUDART_API cudaError_t cudaSetDevice(int device)
{
    cudaError_t err = memhook_cudart_init();
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    if (device < 0 || device >= memhook_cudart_device_count())
        return memhook_cudart_ret(cudaErrorInvalidDevice);
    thread_device = device;
    /* Since CUDA 12 cudaSetDevice initialises the device's primary context
     * at once and makes it current. */
    return memhook_cudart_ret(bind_primary(device));
}

CUDART_API cudaError_t cudaGetDevice(int *device)
{
    if (device == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    return memhook_cudart_ret(memhook_cudart_current_device(device));
}

CUDART_API cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t err = memhook_cudart_ctx_ensure();
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    return memhook_cudart_ret(memhook_cudart_from_cu(memhook_cudart_drv.cuCtxSynchronize(NULL)));
}

CUDART_API cudaError_t cudaDeviceReset(void)
{
    int dev = 0;
    cudaError_t err = memhook_cudart_current_device(&dev);
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    if (dev < 0 || dev >= memhook_cudart_device_count())
        return memhook_cudart_ret(cudaErrorInvalidDevice);

    pthread_mutex_lock(&primary_lock);
    CUcontext old = primary[dev].ctx;
    if (primary[dev].retained) {
        /* Drop the runtime's reference; Reset then destroys the context and
         * everything allocated in it even if others still hold it, which is
         * what cudaDeviceReset promises. */
        (void)memhook_cudart_drv.cuDevicePrimaryCtxRelease((CUdevice)dev);
        primary[dev].retained = false;
        primary[dev].ctx = NULL;
    }
    CUresult r = memhook_cudart_drv.cuDevicePrimaryCtxReset((CUdevice)dev);
    atomic_fetch_add(&primary[dev].generation, 1);
    pthread_mutex_unlock(&primary_lock);

    /* This thread no longer has the context current. */
    CUcontext cur = NULL;
    if (memhook_cudart_drv.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != NULL &&
        (cur == old || cur == bound_ctx))
        (void)memhook_cudart_drv.cuCtxSetCurrent(NULL);
    bound_ctx = NULL;
    bound_device = -1;
    /* Resetting a primary context that is not active is not an error. */
    if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED)
        r = CUDA_SUCCESS;
    return memhook_cudart_ret(memhook_cudart_from_cu(r));
}

CUDART_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    /* No driver: version 0 and success, as documented for NVIDIA's runtime.
     * Needs neither cuInit nor a context. */
    if (memhook_cudart_driver_load() != cudaSuccess) {
        *driverVersion = 0;
        return cudaSuccess;
    }
    return memhook_cudart_ret(
        memhook_cudart_from_cu(memhook_cudart_drv.cuDriverGetVersion(driverVersion)));
}

CUDART_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (runtimeVersion == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    *runtimeVersion = MEMHOOK_CUDART_VERSION;
    return cudaSuccess;
}
