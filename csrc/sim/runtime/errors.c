/*
 * errors.c - CUresult -> cudaError_t, the per-thread last error, and the
 * names and descriptions behind cudaGetErrorName / cudaGetErrorString.
 *
 * The descriptions are the simulator's own short wording.
 */
#include <stddef.h>

#include "cudart_internal.h"

#define ERROR_TABLE(X) \
    X(cudaSuccess, "no error") \
    X(cudaErrorInvalidValue, "invalid argument") \
    X(cudaErrorMemoryAllocation, "out of memory") \
    X(cudaErrorInitializationError, "initialization error") \
    X(cudaErrorCudartUnloading, "the CUDA runtime is shutting down") \
    X(cudaErrorProfilerDisabled, "profiler disabled") \
    X(cudaErrorProfilerNotInitialized, "profiler not initialized") \
    X(cudaErrorProfilerAlreadyStarted, "profiler already started") \
    X(cudaErrorProfilerAlreadyStopped, "profiler already stopped") \
    X(cudaErrorInvalidConfiguration, "invalid launch configuration") \
    X(cudaErrorInvalidPitchValue, "invalid pitch") \
    X(cudaErrorInvalidSymbol, "invalid device symbol") \
    X(cudaErrorInvalidHostPointer, "invalid host pointer") \
    X(cudaErrorInvalidDevicePointer, "invalid device pointer") \
    X(cudaErrorInvalidTexture, "invalid texture") \
    X(cudaErrorInvalidTextureBinding, "invalid texture binding") \
    X(cudaErrorInvalidChannelDescriptor, "invalid channel descriptor") \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy") \
    X(cudaErrorAddressOfConstant, "address of constant") \
    X(cudaErrorTextureFetchFailed, "texture fetch failed") \
    X(cudaErrorTextureNotBound, "texture not bound") \
    X(cudaErrorSynchronizationError, "synchronization error") \
    X(cudaErrorInvalidFilterSetting, "invalid filter setting") \
    X(cudaErrorInvalidNormSetting, "invalid norm setting") \
    X(cudaErrorMixedDeviceExecution, "mixed device execution") \
    X(cudaErrorNotYetImplemented, "not yet implemented") \
    X(cudaErrorMemoryValueTooLarge, "memory value too large") \
    X(cudaErrorStubLibrary, "the loaded CUDA driver is a stub library") \
    X(cudaErrorInsufficientDriver, "CUDA driver is missing or older than the CUDA runtime") \
    X(cudaErrorCallRequiresNewerDriver, "the loaded CUDA driver does not provide this call") \
    X(cudaErrorInvalidSurface, "invalid surface") \
    X(cudaErrorDuplicateVariableName, "duplicate variable name") \
    X(cudaErrorDuplicateTextureName, "duplicate texture name") \
    X(cudaErrorDuplicateSurfaceName, "duplicate surface name") \
    X(cudaErrorDevicesUnavailable, "all CUDA devices are busy or unavailable") \
    X(cudaErrorIncompatibleDriverContext, "incompatible driver context") \
    X(cudaErrorMissingConfiguration, "missing configuration") \
    X(cudaErrorPriorLaunchFailure, "prior launch failure") \
    X(cudaErrorLaunchMaxDepthExceeded, "launch max depth exceeded") \
    X(cudaErrorLaunchFileScopedTex, "launch file scoped tex") \
    X(cudaErrorLaunchFileScopedSurf, "launch file scoped surf") \
    X(cudaErrorSyncDepthExceeded, "sync depth exceeded") \
    X(cudaErrorLaunchPendingCountExceeded, "launch pending count exceeded") \
    X(cudaErrorInvalidDeviceFunction, "invalid device function") \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected") \
    X(cudaErrorInvalidDevice, "invalid device ordinal") \
    X(cudaErrorDeviceNotLicensed, "device not licensed") \
    X(cudaErrorSoftwareValidityNotEstablished, "software validity not established") \
    X(cudaErrorStartupFailure, "CUDA runtime startup failure") \
    X(cudaErrorInvalidKernelImage, "invalid device image") \
    X(cudaErrorDeviceUninitialized, "invalid device context") \
    X(cudaErrorMapBufferObjectFailed, "map buffer object failed") \
    X(cudaErrorUnmapBufferObjectFailed, "unmap buffer object failed") \
    X(cudaErrorArrayIsMapped, "array is mapped") \
    X(cudaErrorAlreadyMapped, "already mapped") \
    X(cudaErrorNoKernelImageForDevice, "no device image is available for this device") \
    X(cudaErrorAlreadyAcquired, "already acquired") \
    X(cudaErrorNotMapped, "not mapped") \
    X(cudaErrorNotMappedAsArray, "not mapped as array") \
    X(cudaErrorNotMappedAsPointer, "not mapped as pointer") \
    X(cudaErrorECCUncorrectable, "uncorrectable ECC error") \
    X(cudaErrorUnsupportedLimit, "unsupported limit") \
    X(cudaErrorDeviceAlreadyInUse, "device already in use") \
    X(cudaErrorPeerAccessUnsupported, "peer access unsupported") \
    X(cudaErrorInvalidPtx, "invalid PTX") \
    X(cudaErrorInvalidGraphicsContext, "invalid graphics context") \
    X(cudaErrorNvlinkUncorrectable, "uncorrectable NVLink error") \
    X(cudaErrorJitCompilerNotFound, "PTX JIT compiler not found") \
    X(cudaErrorUnsupportedPtxVersion, "unsupported PTX version") \
    X(cudaErrorJitCompilationDisabled, "PTX JIT compilation is disabled") \
    X(cudaErrorUnsupportedExecAffinity, "unsupported exec affinity") \
    X(cudaErrorUnsupportedDevSideSync, "unsupported dev side sync") \
    X(cudaErrorContained, "a contained error occurred on the device") \
    X(cudaErrorInvalidSource, "invalid source") \
    X(cudaErrorFileNotFound, "file not found") \
    X(cudaErrorSharedObjectSymbolNotFound, "shared object symbol not found") \
    X(cudaErrorSharedObjectInitFailed, "shared object init failed") \
    X(cudaErrorOperatingSystem, "an operating system call failed") \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle") \
    X(cudaErrorIllegalState, "illegal state") \
    X(cudaErrorLossyQuery, "lossy query") \
    X(cudaErrorSymbolNotFound, "named symbol not found") \
    X(cudaErrorNotReady, "device not ready") \
    X(cudaErrorIllegalAddress, "illegal memory access") \
    X(cudaErrorLaunchOutOfResources, "launch out of resources") \
    X(cudaErrorLaunchTimeout, "launch timeout") \
    X(cudaErrorLaunchIncompatibleTexturing, "launch incompatible texturing") \
    X(cudaErrorPeerAccessAlreadyEnabled, "peer access already enabled") \
    X(cudaErrorPeerAccessNotEnabled, "peer access not enabled") \
    X(cudaErrorSetOnActiveProcess, "cannot set while the device is active in this process") \
    X(cudaErrorContextIsDestroyed, "context is destroyed") \
    X(cudaErrorAssert, "device-side assert triggered") \
    X(cudaErrorTooManyPeers, "too many peers") \
    X(cudaErrorHostMemoryAlreadyRegistered, "host memory is already registered") \
    X(cudaErrorHostMemoryNotRegistered, "host memory is not registered") \
    X(cudaErrorHardwareStackError, "hardware stack error") \
    X(cudaErrorIllegalInstruction, "illegal instruction") \
    X(cudaErrorMisalignedAddress, "misaligned address") \
    X(cudaErrorInvalidAddressSpace, "invalid address space") \
    X(cudaErrorInvalidPc, "invalid program counter") \
    X(cudaErrorLaunchFailure, "launch failure") \
    X(cudaErrorCooperativeLaunchTooLarge, "cooperative launch too large") \
    X(cudaErrorTensorMemoryLeak, "tensor memory leak") \
    X(cudaErrorNotPermitted, "operation not permitted") \
    X(cudaErrorNotSupported, "operation not supported") \
    X(cudaErrorSystemNotReady, "system not ready") \
    X(cudaErrorSystemDriverMismatch, "system driver mismatch") \
    X(cudaErrorCompatNotSupportedOnDevice, "compat not supported on device") \
    X(cudaErrorMpsConnectionFailed, "MPS client failed to connect to the MPS server") \
    X(cudaErrorMpsRpcFailure, "MPS remote procedure call failed") \
    X(cudaErrorMpsServerNotReady, "MPS server is not ready") \
    X(cudaErrorMpsMaxClientsReached, "MPS server reached its client limit") \
    X(cudaErrorMpsMaxConnectionsReached, "MPS server reached its connection limit") \
    X(cudaErrorMpsClientTerminated, "MPS client was terminated") \
    X(cudaErrorCdpNotSupported, "CUDA dynamic parallelism is not supported") \
    X(cudaErrorCdpVersionMismatch, "CUDA dynamic parallelism version mismatch") \
    X(cudaErrorStreamCaptureUnsupported, "stream capture unsupported") \
    X(cudaErrorStreamCaptureInvalidated, "stream capture invalidated") \
    X(cudaErrorStreamCaptureMerge, "stream capture merge") \
    X(cudaErrorStreamCaptureUnmatched, "stream capture unmatched") \
    X(cudaErrorStreamCaptureUnjoined, "stream capture unjoined") \
    X(cudaErrorStreamCaptureIsolation, "stream capture isolation") \
    X(cudaErrorStreamCaptureImplicit, "stream capture implicit") \
    X(cudaErrorCapturedEvent, "captured event") \
    X(cudaErrorStreamCaptureWrongThread, "stream capture wrong thread") \
    X(cudaErrorTimeout, "wait operation timed out") \
    X(cudaErrorGraphExecUpdateFailure, "graph exec update failure") \
    X(cudaErrorExternalDevice, "external device") \
    X(cudaErrorInvalidClusterSize, "invalid cluster size") \
    X(cudaErrorFunctionNotLoaded, "function not loaded") \
    X(cudaErrorInvalidResourceType, "invalid resource type") \
    X(cudaErrorInvalidResourceConfiguration, "invalid resource configuration") \
    X(cudaErrorUnknown, "unknown error") \
    X(cudaErrorApiFailureBase, "API failure base")

/* ---- names and descriptions ------------------------------------------------ */

struct error_info {
    cudaError_t code;
    const char *name;
    const char *text;
};

static const struct error_info error_table[] = {
#define X(code, text) { code, #code, text },
    ERROR_TABLE(X)
#undef X
};

static const struct error_info *lookup(int code)
{
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
        if ((int)error_table[i].code == code)
            return &error_table[i];
    return NULL;
}

CUDART_API const char *cudaGetErrorName(cudaError_t error)
{
    const struct error_info *e = lookup((int)error);
    return e ? e->name : "unrecognized error code";
}

CUDART_API const char *cudaGetErrorString(cudaError_t error)
{
    const struct error_info *e = lookup((int)error);
    return e ? e->text : "unrecognized error code";
}

/* ---- CUresult -> cudaError_t ------------------------------------------------- */

cudaError_t memhook_cudart_from_cu(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return cudaSuccess;
    /* Where the two enums name the same condition differently. */
    case CUDA_ERROR_NOT_INITIALIZED:
        return cudaErrorInitializationError;
    case CUDA_ERROR_DEINITIALIZED:
        return cudaErrorCudartUnloading;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return cudaErrorMemoryAllocation;
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT:
        return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_IMAGE:
        return cudaErrorInvalidKernelImage;
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
        return cudaErrorNoKernelImageForDevice;
    case CUDA_ERROR_INVALID_HANDLE:
        return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_FOUND:
        return cudaErrorSymbolNotFound;
    case CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE:
        return cudaErrorSetOnActiveProcess;
    case CUDA_ERROR_CONTEXT_ALREADY_IN_USE:
        return cudaErrorDeviceAlreadyInUse;
    case CUDA_ERROR_LAUNCH_FAILED:
        return cudaErrorLaunchFailure;
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
        return cudaErrorDevicesUnavailable;
    default:
        break;
    }
    /* Every other driver code has the runtime code of the same value (the
     * two enums were laid out to agree); a code the runtime does not know
     * is cudaErrorUnknown. */
    const struct error_info *e = lookup((int)r);
    return e ? e->code : cudaErrorUnknown;
}

/* ---- the per-thread last error ------------------------------------------------ */

/* Per thread, as in NVIDIA's runtime: the last error a runtime call of this
 * thread returned, until cudaGetLastError reads it. */
static _Thread_local cudaError_t last_error = cudaSuccess;

cudaError_t memhook_cudart_ret(cudaError_t err)
{
    if (err != cudaSuccess)
        last_error = err;
    return err;
}

CUDART_API cudaError_t cudaGetLastError(void)
{
    cudaError_t err = last_error;
    last_error = cudaSuccess;
    return err;
}

CUDART_API cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}
