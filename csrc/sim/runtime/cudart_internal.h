/*
 * cudart_internal.h - the contract between the parts of the simulated CUDA
 * runtime (libcudart.so.13 and libcudart_static.a).
 *
 * One idea per file:
 *   init.c      dlopen("libcuda.so.1"), cuGetProcAddress_v2, the driver table,
 *               cuInit (once per process)
 *   errors.c    CUresult -> cudaError_t, per-thread last error, error names
 *   device.c    per-thread device and context (primary context binding),
 *               device/version queries, synchronize, reset
 *   memory.c    allocation and free, host registration, pools, cudaMemGetInfo
 *   stream.c    streams, memcpy, memset
 *   symbols.c   nvcc's registration ABI and the symbol functions
 *   pointer.c   cudaPointerGetAttributes
 *
 * Linkage rules: the same objects go into the shared library and into the
 * static archive (built with MEMHOOK_CUDART_STATIC=1).  Everything is compiled
 * with -fvisibility=hidden; only CUDART_API functions are exported.  In the
 * archive, hidden symbols still meet the user's program at static link time,
 * so every non-static internal symbol is named memhook_cudart_*.
 *
 * The runtime reaches the driver only through the table filled in init.c
 * (dlopen + dlsym("cuGetProcAddress_v2") + cuGetProcAddress for each entry);
 * it never links libcuda and never dlsyms any other cu* name.
 */
#ifndef MEMHOOK_CUDART_INTERNAL_H
#define MEMHOOK_CUDART_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/cuda_abi.h"
#include "include/cudart_sim.h"

#define CUDART_API __attribute__((visibility("default")))
#define CUDART_HIDDEN __attribute__((visibility("hidden")))

/* cudaRuntimeGetVersion and the version passed to cuGetProcAddress. */
#define MEMHOOK_CUDART_VERSION 13000

/* The most device ordinals the runtime keeps primary-context state for. */
#define MEMHOOK_CUDART_MAX_DEVICES 64

/* ---- init.c: the driver entry points the runtime uses ------------------- */

/* CUDA 12+ library-management option types; only passed as NULL here. */
typedef int memhook_cudart_jit_option;
typedef int memhook_cudart_library_option;

typedef struct memhook_cudart_driver {
    /* init, versions, devices */
    CUresult (*cuInit)(unsigned int flags);
    CUresult (*cuDriverGetVersion)(int *version);
    CUresult (*cuDeviceGetCount)(int *count);
    CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
    /* contexts */
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice dev);
    CUresult (*cuDevicePrimaryCtxReset)(CUdevice dev);
    CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
    CUresult (*cuCtxSetCurrent)(CUcontext ctx);
    /* CUDA 13 versions (cuCtxGetDevice_v2, cuCtxSynchronize_v2): they take
     * the context; NULL means the current one. */
    CUresult (*cuCtxGetDevice)(CUdevice *dev, CUcontext ctx);
    CUresult (*cuCtxSynchronize)(CUcontext ctx);
    /* memory */
    CUresult (*cuMemAlloc)(CUdeviceptr *dptr, size_t size);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *dptr, size_t size, unsigned int flags);
    CUresult (*cuMemAllocPitch)(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                size_t height, unsigned int element_size);
    CUresult (*cuMemFree)(CUdeviceptr dptr);
    CUresult (*cuMemHostAlloc)(void **pp, size_t size, unsigned int flags);
    CUresult (*cuMemFreeHost)(void *p);
    CUresult (*cuMemHostRegister)(void *p, size_t size, unsigned int flags);
    CUresult (*cuMemHostUnregister)(void *p);
    CUresult (*cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *dptr, size_t size, CUstream stream);
    CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *dptr, size_t size, CUstream stream);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                        CUstream stream);
    CUresult (*cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *dptr, size_t size,
                                             CUmemoryPool pool, CUstream stream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr dptr, CUstream stream);
    CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr dptr, CUstream stream);
    CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *pool, CUdevice dev);
    CUresult (*cuMemPoolCreate)(CUmemoryPool *pool, const CUmemPoolProps *props);
    CUresult (*cuMemPoolDestroy)(CUmemoryPool pool);
    CUresult (*cuPointerGetAttributes)(unsigned int count, CUpointer_attribute *attrs,
                                       void **data, CUdeviceptr ptr);
    /* streams, copies, sets */
    CUresult (*cuStreamCreate)(CUstream *stream, unsigned int flags);
    CUresult (*cuStreamDestroy)(CUstream stream);
    CUresult (*cuStreamSynchronize)(CUstream stream);
    CUresult (*cuStreamSynchronize_ptsz)(CUstream stream);
    CUresult (*cuMemcpy)(CUdeviceptr dst, CUdeviceptr src, size_t count);
    CUresult (*cuMemcpy_ptds)(CUdeviceptr dst, CUdeviceptr src, size_t count);
    CUresult (*cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t count, CUstream s);
    CUresult (*cuMemcpyAsync_ptsz)(CUdeviceptr dst, CUdeviceptr src, size_t count,
                                   CUstream s);
    CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t count);
    CUresult (*cuMemsetD8_ptds)(CUdeviceptr dst, unsigned char value, size_t count);
    CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t count,
                                CUstream s);
    CUresult (*cuMemsetD8Async_ptsz)(CUdeviceptr dst, unsigned char value, size_t count,
                                     CUstream s);
    /* libraries (module images built from registered variables) */
    CUresult (*cuLibraryLoadData)(CUlibrary *lib, const void *code,
                                  memhook_cudart_jit_option *jit_options,
                                  void **jit_values, unsigned int num_jit,
                                  memhook_cudart_library_option *lib_options,
                                  void **lib_values, unsigned int num_lib);
    CUresult (*cuLibraryUnload)(CUlibrary lib);
    CUresult (*cuLibraryGetGlobal)(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib,
                                   const char *name);
    CUresult (*cuLibraryGetManaged)(CUdeviceptr *dptr, size_t *bytes, CUlibrary lib,
                                    const char *name);
} memhook_cudart_driver;

/* The table; valid (entries possibly NULL when optional) once
 * memhook_cudart_driver_load() returned cudaSuccess. */
CUDART_HIDDEN extern memhook_cudart_driver memhook_cudart_drv;

/* dlopen + cuGetProcAddress for every entry, once per process.  Does not
 * call cuInit.  cudaErrorInsufficientDriver when libcuda.so.1, its
 * cuGetProcAddress_v2 or a required entry is missing. */
CUDART_HIDDEN cudaError_t memhook_cudart_driver_load(void);
/* driver_load, then cuInit(0) once per process (the result is kept). */
CUDART_HIDDEN cudaError_t memhook_cudart_init(void);
/* Number of devices found at init (0 before a successful init). */
CUDART_HIDDEN int memhook_cudart_device_count(void);

/* Call an optional entry: evaluates to cudaErrorCallRequiresNewerDriver when
 * the driver does not provide it. */
#define CUDART_CALL(fn, ...)                                                  \
    (memhook_cudart_drv.fn == NULL                                            \
         ? cudaErrorCallRequiresNewerDriver                                   \
         : memhook_cudart_from_cu(memhook_cudart_drv.fn(__VA_ARGS__)))

/* ---- errors.c ------------------------------------------------------------ */

/* Faithful CUresult -> cudaError_t translation. */
CUDART_HIDDEN cudaError_t memhook_cudart_from_cu(CUresult r);
/* Record err as the calling thread's last error when it is not cudaSuccess;
 * returns err.  Every exported function returns through this. */
CUDART_HIDDEN cudaError_t memhook_cudart_ret(cudaError_t err);

/* ---- device.c ------------------------------------------------------------ */

/* init, then make sure the calling thread has a current context: the one
 * already current (set by the runtime or through the driver API), or the
 * primary context of the thread's device, retained once per process. */
CUDART_HIDDEN cudaError_t memhook_cudart_ctx_ensure(void);
/* In an exported function: ctx_ensure, returning (and recording) its error. */
#define CUDART_ENSURE()                                                 \
    do {                                                                \
        cudaError_t ensure_err_ = memhook_cudart_ctx_ensure();          \
        if (ensure_err_ != cudaSuccess)                                 \
            return memhook_cudart_ret(ensure_err_);                     \
    } while (0)

/* The calling thread's device: the current context's device when a context
 * is current, else the one chosen by cudaSetDevice (default 0). */
CUDART_HIDDEN cudaError_t memhook_cudart_current_device(int *device);

/* ---- stream.c ------------------------------------------------------------ */

/* cudaMemcpy's body, shared with the symbol copies.  ptds selects the
 * per-thread default stream entry point. */
CUDART_HIDDEN cudaError_t memhook_cudart_memcpy(void *dst, const void *src, size_t count,
                                                enum cudaMemcpyKind kind, bool ptds);

#endif /* MEMHOOK_CUDART_INTERNAL_H */
