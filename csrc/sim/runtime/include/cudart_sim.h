/*
 * cudart_sim.h - the public interface of memhook's simulated CUDA runtime
 * (libcudart.so.13 / libcudart_static.a).
 *
 * Declares the runtime entry points the simulator implements and the types,
 * enums and flag macros they use.  Values and struct layouts are binary
 * compatible with CUDA 13's driver_types.h / cuda_runtime_api.h, so code
 * written against NVIDIA's headers links and runs against the simulator
 * unchanged; names keep NVIDIA's spelling.  Do not include this header and
 * NVIDIA's runtime headers in the same translation unit.
 *
 * Usable from C (C99 or later) and C++.  In C++ the trailing parameters that
 * NVIDIA's header defaults (streams, memcpy offsets and kinds...) have the
 * same defaults here, and the symbol functions also accept the symbol itself
 * (template overloads), as with NVIDIA's header.
 *
 * Define CUDA_API_PER_THREAD_DEFAULT_STREAM before including this header to
 * route the stream-ordered calls to their _ptds/_ptsz variants, as nvcc's
 * --default-stream per-thread does.
 */
#ifndef MEMHOOK_CUDART_SIM_H
#define MEMHOOK_CUDART_SIM_H

#include <stddef.h>

/* The runtime API version this header and the library implement. */
#define CUDART_VERSION 13000
#define MEMHOOK_CUDART_SIM_VERSION 13000

#ifdef __cplusplus
#define MEMHOOK_CUDART_DV(v) = v
extern "C" {
#else
#define MEMHOOK_CUDART_DV(v)
#endif

/* ---- errors ------------------------------------------------------------ */

enum cudaError {
    cudaSuccess                             = 0,
    cudaErrorInvalidValue                   = 1,
    cudaErrorMemoryAllocation               = 2,
    cudaErrorInitializationError            = 3,
    cudaErrorCudartUnloading                = 4,
    cudaErrorProfilerDisabled               = 5,
    cudaErrorProfilerNotInitialized         = 6,
    cudaErrorProfilerAlreadyStarted         = 7,
    cudaErrorProfilerAlreadyStopped         = 8,
    cudaErrorInvalidConfiguration           = 9,
    cudaErrorInvalidPitchValue              = 12,
    cudaErrorInvalidSymbol                  = 13,
    cudaErrorInvalidHostPointer             = 16,
    cudaErrorInvalidDevicePointer           = 17,
    cudaErrorInvalidTexture                 = 18,
    cudaErrorInvalidTextureBinding          = 19,
    cudaErrorInvalidChannelDescriptor       = 20,
    cudaErrorInvalidMemcpyDirection         = 21,
    cudaErrorAddressOfConstant              = 22,
    cudaErrorTextureFetchFailed             = 23,
    cudaErrorTextureNotBound                = 24,
    cudaErrorSynchronizationError           = 25,
    cudaErrorInvalidFilterSetting           = 26,
    cudaErrorInvalidNormSetting             = 27,
    cudaErrorMixedDeviceExecution           = 28,
    cudaErrorNotYetImplemented              = 31,
    cudaErrorMemoryValueTooLarge            = 32,
    cudaErrorStubLibrary                    = 34,
    cudaErrorInsufficientDriver             = 35,
    cudaErrorCallRequiresNewerDriver        = 36,
    cudaErrorInvalidSurface                 = 37,
    cudaErrorDuplicateVariableName          = 43,
    cudaErrorDuplicateTextureName           = 44,
    cudaErrorDuplicateSurfaceName           = 45,
    cudaErrorDevicesUnavailable             = 46,
    cudaErrorIncompatibleDriverContext      = 49,
    cudaErrorMissingConfiguration           = 52,
    cudaErrorPriorLaunchFailure             = 53,
    cudaErrorLaunchMaxDepthExceeded         = 65,
    cudaErrorLaunchFileScopedTex            = 66,
    cudaErrorLaunchFileScopedSurf           = 67,
    cudaErrorSyncDepthExceeded              = 68,
    cudaErrorLaunchPendingCountExceeded     = 69,
    cudaErrorInvalidDeviceFunction          = 98,
    cudaErrorNoDevice                       = 100,
    cudaErrorInvalidDevice                  = 101,
    cudaErrorDeviceNotLicensed              = 102,
    cudaErrorSoftwareValidityNotEstablished = 103,
    cudaErrorStartupFailure                 = 127,
    cudaErrorInvalidKernelImage             = 200,
    cudaErrorDeviceUninitialized            = 201,
    cudaErrorMapBufferObjectFailed          = 205,
    cudaErrorUnmapBufferObjectFailed        = 206,
    cudaErrorArrayIsMapped                  = 207,
    cudaErrorAlreadyMapped                  = 208,
    cudaErrorNoKernelImageForDevice         = 209,
    cudaErrorAlreadyAcquired                = 210,
    cudaErrorNotMapped                      = 211,
    cudaErrorNotMappedAsArray               = 212,
    cudaErrorNotMappedAsPointer             = 213,
    cudaErrorECCUncorrectable               = 214,
    cudaErrorUnsupportedLimit               = 215,
    cudaErrorDeviceAlreadyInUse             = 216,
    cudaErrorPeerAccessUnsupported          = 217,
    cudaErrorInvalidPtx                     = 218,
    cudaErrorInvalidGraphicsContext         = 219,
    cudaErrorNvlinkUncorrectable            = 220,
    cudaErrorJitCompilerNotFound            = 221,
    cudaErrorUnsupportedPtxVersion          = 222,
    cudaErrorJitCompilationDisabled         = 223,
    cudaErrorUnsupportedExecAffinity        = 224,
    cudaErrorUnsupportedDevSideSync         = 225,
    cudaErrorContained                      = 226,
    cudaErrorInvalidSource                  = 300,
    cudaErrorFileNotFound                   = 301,
    cudaErrorSharedObjectSymbolNotFound     = 302,
    cudaErrorSharedObjectInitFailed         = 303,
    cudaErrorOperatingSystem                = 304,
    cudaErrorInvalidResourceHandle          = 400,
    cudaErrorIllegalState                   = 401,
    cudaErrorLossyQuery                     = 402,
    cudaErrorSymbolNotFound                 = 500,
    cudaErrorNotReady                       = 600,
    cudaErrorIllegalAddress                 = 700,
    cudaErrorLaunchOutOfResources           = 701,
    cudaErrorLaunchTimeout                  = 702,
    cudaErrorLaunchIncompatibleTexturing    = 703,
    cudaErrorPeerAccessAlreadyEnabled       = 704,
    cudaErrorPeerAccessNotEnabled           = 705,
    cudaErrorSetOnActiveProcess             = 708,
    cudaErrorContextIsDestroyed             = 709,
    cudaErrorAssert                         = 710,
    cudaErrorTooManyPeers                   = 711,
    cudaErrorHostMemoryAlreadyRegistered    = 712,
    cudaErrorHostMemoryNotRegistered        = 713,
    cudaErrorHardwareStackError             = 714,
    cudaErrorIllegalInstruction             = 715,
    cudaErrorMisalignedAddress              = 716,
    cudaErrorInvalidAddressSpace            = 717,
    cudaErrorInvalidPc                      = 718,
    cudaErrorLaunchFailure                  = 719,
    cudaErrorCooperativeLaunchTooLarge      = 720,
    cudaErrorTensorMemoryLeak               = 721,
    cudaErrorNotPermitted                   = 800,
    cudaErrorNotSupported                   = 801,
    cudaErrorSystemNotReady                 = 802,
    cudaErrorSystemDriverMismatch           = 803,
    cudaErrorCompatNotSupportedOnDevice     = 804,
    cudaErrorMpsConnectionFailed            = 805,
    cudaErrorMpsRpcFailure                  = 806,
    cudaErrorMpsServerNotReady              = 807,
    cudaErrorMpsMaxClientsReached           = 808,
    cudaErrorMpsMaxConnectionsReached       = 809,
    cudaErrorMpsClientTerminated            = 810,
    cudaErrorCdpNotSupported                = 811,
    cudaErrorCdpVersionMismatch             = 812,
    cudaErrorStreamCaptureUnsupported       = 900,
    cudaErrorStreamCaptureInvalidated       = 901,
    cudaErrorStreamCaptureMerge             = 902,
    cudaErrorStreamCaptureUnmatched         = 903,
    cudaErrorStreamCaptureUnjoined          = 904,
    cudaErrorStreamCaptureIsolation         = 905,
    cudaErrorStreamCaptureImplicit          = 906,
    cudaErrorCapturedEvent                  = 907,
    cudaErrorStreamCaptureWrongThread       = 908,
    cudaErrorTimeout                        = 909,
    cudaErrorGraphExecUpdateFailure         = 910,
    cudaErrorExternalDevice                 = 911,
    cudaErrorInvalidClusterSize             = 912,
    cudaErrorFunctionNotLoaded              = 913,
    cudaErrorInvalidResourceType            = 914,
    cudaErrorInvalidResourceConfiguration   = 915,
    cudaErrorUnknown                        = 999,
    cudaErrorApiFailureBase                 = 10000
};
typedef enum cudaError cudaError_t;

/* ---- handles ----------------------------------------------------------- */

/* The runtime's handles are the driver's handles (same struct tags). */
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;

#define cudaStreamLegacy    ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)

#define cudaCpuDeviceId     ((int)-1)
#define cudaInvalidDeviceId ((int)-2)

/* ---- flags --------------------------------------------------------------- */

#define cudaHostAllocDefault       0x00
#define cudaHostAllocPortable      0x01
#define cudaHostAllocMapped        0x02
#define cudaHostAllocWriteCombined 0x04

#define cudaHostRegisterDefault    0x00
#define cudaHostRegisterPortable   0x01
#define cudaHostRegisterMapped     0x02
#define cudaHostRegisterIoMemory   0x04
#define cudaHostRegisterReadOnly   0x08

#define cudaStreamDefault          0x00
#define cudaStreamNonBlocking      0x01

#define cudaMemAttachGlobal        0x01
#define cudaMemAttachHost          0x02
#define cudaMemAttachSingle        0x04

/* ---- memory types, copies ------------------------------------------------ */

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost         = 1,
    cudaMemoryTypeDevice       = 2,
    cudaMemoryTypeManaged      = 3
};

enum cudaMemcpyKind {
    cudaMemcpyHostToHost     = 0,
    cudaMemcpyHostToDevice   = 1,
    cudaMemcpyDeviceToHost   = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault        = 4
};

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8];
};

/* ---- memory pools ------------------------------------------------------ */

enum cudaMemAllocationType {
    cudaMemAllocationTypeInvalid = 0x0,
    cudaMemAllocationTypePinned  = 0x1,
    cudaMemAllocationTypeManaged = 0x2,
    cudaMemAllocationTypeMax     = 0x7FFFFFFF
};

enum cudaMemAllocationHandleType {
    cudaMemHandleTypeNone                = 0x0,
    cudaMemHandleTypePosixFileDescriptor = 0x1,
    cudaMemHandleTypeWin32               = 0x2,
    cudaMemHandleTypeWin32Kmt            = 0x4,
    cudaMemHandleTypeFabric              = 0x8
};

enum cudaMemLocationType {
    cudaMemLocationTypeInvalid         = 0,
    cudaMemLocationTypeNone            = 0,
    cudaMemLocationTypeDevice          = 1,
    cudaMemLocationTypeHost            = 2,
    cudaMemLocationTypeHostNuma        = 3,
    cudaMemLocationTypeHostNumaCurrent = 4
};

struct cudaMemLocation {
    enum cudaMemLocationType type;
    int id;
};

struct cudaMemPoolProps {
    enum cudaMemAllocationType allocType;
    enum cudaMemAllocationHandleType handleTypes;
    struct cudaMemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
};

/* ---- errors and versions ------------------------------------------------- */

const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaDriverGetVersion(int *driverVersion);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);

/* ---- devices ----------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);

/* ---- allocation ---------------------------------------------------------- */

cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaMallocManaged(void **devPtr, size_t size,
                              unsigned int flags MEMHOOK_CUDART_DV(cudaMemAttachGlobal));
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                    cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device);
cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool);

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);

/* ---- streams, copies, sets ------------------------------------------------- */

cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream MEMHOOK_CUDART_DV(0));
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind,
                                 cudaStream_t stream MEMHOOK_CUDART_DV(0));
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t stream MEMHOOK_CUDART_DV(0));
cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                 cudaStream_t stream MEMHOOK_CUDART_DV(0));

/* ---- symbols (variables registered by nvcc's host code) -------------------- */

cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol);
cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol);
cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                               size_t offset MEMHOOK_CUDART_DV(0),
                               enum cudaMemcpyKind kind MEMHOOK_CUDART_DV(cudaMemcpyHostToDevice));
cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count,
                                    size_t offset MEMHOOK_CUDART_DV(0),
                                    enum cudaMemcpyKind kind MEMHOOK_CUDART_DV(cudaMemcpyHostToDevice));
cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                 size_t offset MEMHOOK_CUDART_DV(0),
                                 enum cudaMemcpyKind kind MEMHOOK_CUDART_DV(cudaMemcpyDeviceToHost));
cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count,
                                      size_t offset MEMHOOK_CUDART_DV(0),
                                      enum cudaMemcpyKind kind MEMHOOK_CUDART_DV(cudaMemcpyDeviceToHost));

/*
 * The registration ABI that nvcc's generated host code calls from static
 * constructors (see crt/host_runtime.h).  The simulator ignores the fat
 * binary's contents and builds its module from the registered variables.
 * uint3/dim3 are only passed through; they stay incomplete here.
 */
struct uint3;
struct dim3;
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                       const char *deviceName, int ext, size_t size, int constant,
                       int global);
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                              char *deviceAddress, const char *deviceName, int ext,
                              size_t size, int constant, int global);
char __cudaInitModule(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, struct uint3 *tid,
                            struct uint3 *bid, struct dim3 *bDim, struct dim3 *gDim,
                            int *wSize);

#ifdef __cplusplus
} /* extern "C" */

/* NVIDIA's C++ overloads: pass the symbol itself rather than its address. */
template <class T>
static inline cudaError_t cudaGetSymbolAddress(void **devPtr, const T &symbol)
{
    return ::cudaGetSymbolAddress(devPtr, (const void *)&symbol);
}
template <class T>
static inline cudaError_t cudaGetSymbolSize(size_t *size, const T &symbol)
{
    return ::cudaGetSymbolSize(size, (const void *)&symbol);
}
template <class T>
static inline cudaError_t cudaMemcpyToSymbol(const T &symbol, const void *src, size_t count,
                                             size_t offset = 0,
                                             enum cudaMemcpyKind kind = cudaMemcpyHostToDevice)
{
    return ::cudaMemcpyToSymbol((const void *)&symbol, src, count, offset, kind);
}
template <class T>
static inline cudaError_t cudaMemcpyFromSymbol(void *dst, const T &symbol, size_t count,
                                               size_t offset = 0,
                                               enum cudaMemcpyKind kind = cudaMemcpyDeviceToHost)
{
    return ::cudaMemcpyFromSymbol(dst, (const void *)&symbol, count, offset, kind);
}
#endif

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#define cudaMemcpy              cudaMemcpy_ptds
#define cudaMemset              cudaMemset_ptds
#define cudaMemcpyToSymbol      cudaMemcpyToSymbol_ptds
#define cudaMemcpyFromSymbol    cudaMemcpyFromSymbol_ptds
#define cudaMemcpyAsync         cudaMemcpyAsync_ptsz
#define cudaMemsetAsync         cudaMemsetAsync_ptsz
#define cudaStreamSynchronize   cudaStreamSynchronize_ptsz
#define cudaMallocAsync         cudaMallocAsync_ptsz
#define cudaFreeAsync           cudaFreeAsync_ptsz
#define cudaMallocFromPoolAsync cudaMallocFromPoolAsync_ptsz
#endif

#endif /* MEMHOOK_CUDART_SIM_H */
