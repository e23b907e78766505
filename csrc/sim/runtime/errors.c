/*
 * errors.c - CUresult -> cudaError_t, the per-thread last error, and the
 * names and descriptions behind cudaGetErrorName / cudaGetErrorString.
 *
 * The names and descriptions are the ones libcudart 13.0 returned on an
 * H200, as recorded in tests/data/h200-runtime-facts.json ("strings");
 * tests/sim/test_sim_fidelity.py compares them.
 */
#include <stddef.h>

#include "cudart_internal.h"

#define ERROR_TABLE(X) \
    X(cudaSuccess, "no error") \
    X(cudaErrorInvalidValue, "invalid argument") \
    X(cudaErrorMemoryAllocation, "out of memory") \
    X(cudaErrorInitializationError, "initialization error") \
    X(cudaErrorCudartUnloading, "driver shutting down") \
    X(cudaErrorProfilerDisabled, "profiler disabled while using external profiling tool") \
    X(cudaErrorProfilerNotInitialized, "profiler not initialized: call cudaProfilerInitialize()") \
    X(cudaErrorProfilerAlreadyStarted, "profiler already started") \
    X(cudaErrorProfilerAlreadyStopped, "profiler already stopped") \
    X(cudaErrorInvalidConfiguration, "invalid configuration argument") \
    X(cudaErrorInvalidPitchValue, "invalid pitch argument") \
    X(cudaErrorInvalidSymbol, "invalid device symbol") \
    X(cudaErrorInvalidHostPointer, "invalid host pointer") \
    X(cudaErrorInvalidDevicePointer, "invalid device pointer") \
    X(cudaErrorInvalidTexture, "invalid texture reference") \
    X(cudaErrorInvalidTextureBinding, "texture is not bound to a pointer") \
    X(cudaErrorInvalidChannelDescriptor, "invalid channel descriptor") \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy") \
    X(cudaErrorAddressOfConstant, "invalid address of constant") \
    X(cudaErrorTextureFetchFailed, "fetch from texture failed") \
    X(cudaErrorTextureNotBound, "cannot fetch from a texture that is not bound") \
    X(cudaErrorSynchronizationError, "incorrect use of __syncthreads()") \
    X(cudaErrorInvalidFilterSetting, "linear filtering not supported for non-float type") \
    X(cudaErrorInvalidNormSetting, "read as normalized float not supported for data type") \
    X(cudaErrorMixedDeviceExecution, "device emulation mode and device execution mode cannot be mixed") \
    X(cudaErrorNotYetImplemented, "feature not yet implemented") \
    X(cudaErrorMemoryValueTooLarge, "memory size or pointer value too large to fit in 32 bit") \
    X(cudaErrorStubLibrary, "CUDA driver is a stub library") \
    X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
    X(cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver") \
    X(cudaErrorInvalidSurface, "invalid surface reference") \
    X(cudaErrorDuplicateVariableName, "duplicate global variable looked up by string name") \
    X(cudaErrorDuplicateTextureName, "duplicate texture looked up by string name") \
    X(cudaErrorDuplicateSurfaceName, "duplicate surface looked up by string name") \
    X(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable") \
    X(cudaErrorIncompatibleDriverContext, "incompatible driver context") \
    X(cudaErrorMissingConfiguration, "__global__ function call is not configured") \
    X(cudaErrorPriorLaunchFailure, "unspecified launch failure in prior launch") \
    X(cudaErrorLaunchMaxDepthExceeded, "launch would exceed maximum depth of nested launches") \
    X(cudaErrorLaunchFileScopedTex, "launch failed because kernel uses unsupported, file-scoped textures (texture objects are supported)") \
    X(cudaErrorLaunchFileScopedSurf, "launch failed because kernel uses unsupported, file-scoped surfaces (surface objects are supported)") \
    X(cudaErrorSyncDepthExceeded, "cudaDeviceSynchronize failed because caller's grid depth exceeds cudaLimitDevRuntimeSyncDepth") \
    X(cudaErrorLaunchPendingCountExceeded, "launch failed because launch would exceed cudaLimitDevRuntimePendingLaunchCount") \
    X(cudaErrorInvalidDeviceFunction, "invalid device function") \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected") \
    X(cudaErrorInvalidDevice, "invalid device ordinal") \
    X(cudaErrorDeviceNotLicensed, "device doesn't have valid Grid license") \
    X(cudaErrorSoftwareValidityNotEstablished, "integrity checks failed") \
    X(cudaErrorStartupFailure, "startup failure in cuda runtime") \
    X(cudaErrorInvalidKernelImage, "device kernel image is invalid") \
    X(cudaErrorDeviceUninitialized, "invalid device context") \
    X(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed") \
    X(cudaErrorUnmapBufferObjectFailed, "unmapping of buffer object failed") \
    X(cudaErrorArrayIsMapped, "array is mapped") \
    X(cudaErrorAlreadyMapped, "resource already mapped") \
    X(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device") \
    X(cudaErrorAlreadyAcquired, "resource already acquired") \
    X(cudaErrorNotMapped, "resource not mapped") \
    X(cudaErrorNotMappedAsArray, "resource not mapped as array") \
    X(cudaErrorNotMappedAsPointer, "resource not mapped as pointer") \
    X(cudaErrorECCUncorrectable, "uncorrectable ECC error encountered") \
    X(cudaErrorUnsupportedLimit, "limit is not supported on this architecture") \
    X(cudaErrorDeviceAlreadyInUse, "exclusive-thread device already in use by a different thread") \
    X(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices") \
    X(cudaErrorInvalidPtx, "a PTX JIT compilation failed") \
    X(cudaErrorInvalidGraphicsContext, "invalid OpenGL or DirectX context") \
    X(cudaErrorNvlinkUncorrectable, "uncorrectable NVLink error detected during the execution") \
    X(cudaErrorJitCompilerNotFound, "PTX JIT compiler library not found") \
    X(cudaErrorUnsupportedPtxVersion, "the provided PTX was compiled with an unsupported toolchain.") \
    X(cudaErrorJitCompilationDisabled, "PTX JIT compilation was disabled") \
    X(cudaErrorUnsupportedExecAffinity, "the provided execution affinity is not supported") \
    X(cudaErrorUnsupportedDevSideSync, "the provided PTX contains unsupported call to cudaDeviceSynchronize") \
    X(cudaErrorContained, "Invalid access of peer GPU memory over nvlink or a hardware error") \
    X(cudaErrorInvalidSource, "device kernel image is invalid") \
    X(cudaErrorFileNotFound, "file not found") \
    X(cudaErrorSharedObjectSymbolNotFound, "shared object symbol not found") \
    X(cudaErrorSharedObjectInitFailed, "shared object initialization failed") \
    X(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS") \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle") \
    X(cudaErrorIllegalState, "the operation cannot be performed in the present state") \
    X(cudaErrorLossyQuery, "attempted introspection would be semantically lossy") \
    X(cudaErrorSymbolNotFound, "named symbol not found") \
    X(cudaErrorNotReady, "device not ready") \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered") \
    X(cudaErrorLaunchOutOfResources, "too many resources requested for launch") \
    X(cudaErrorLaunchTimeout, "the launch timed out and was terminated") \
    X(cudaErrorLaunchIncompatibleTexturing, "launch uses incompatible texturing mode") \
    X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled") \
    X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled") \
    X(cudaErrorSetOnActiveProcess, "cannot set while device is active in this process") \
    X(cudaErrorContextIsDestroyed, "context is destroyed") \
    X(cudaErrorAssert, "device-side assert triggered") \
    X(cudaErrorTooManyPeers, "peer mapping resources exhausted") \
    X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
    X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
    X(cudaErrorHardwareStackError, "hardware stack error") \
    X(cudaErrorIllegalInstruction, "an illegal instruction was encountered") \
    X(cudaErrorMisalignedAddress, "misaligned address") \
    X(cudaErrorInvalidAddressSpace, "operation not supported on global/shared address space") \
    X(cudaErrorInvalidPc, "invalid program counter") \
    X(cudaErrorLaunchFailure, "unspecified launch failure") \
    X(cudaErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch") \
    X(cudaErrorTensorMemoryLeak, "tensor memory not completely freed") \
    X(cudaErrorNotPermitted, "operation not permitted") \
    X(cudaErrorNotSupported, "operation not supported") \
    X(cudaErrorSystemNotReady, "system not yet initialized") \
    X(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver combination") \
    X(cudaErrorCompatNotSupportedOnDevice, "forward compatibility was attempted on non supported HW") \
    X(cudaErrorMpsConnectionFailed, "MPS client failed to connect to the MPS control daemon or the MPS server") \
    X(cudaErrorMpsRpcFailure, "the remote procedural call between the MPS server and the MPS client failed") \
    X(cudaErrorMpsServerNotReady, "MPS server is not ready to accept new MPS client requests") \
    X(cudaErrorMpsMaxClientsReached, "the hardware resources required to create MPS client have been exhausted") \
    X(cudaErrorMpsMaxConnectionsReached, "the hardware resources required to support device connections have been exhausted") \
    X(cudaErrorMpsClientTerminated, "the MPS client has been terminated by the server") \
    X(cudaErrorCdpNotSupported, "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it") \
    X(cudaErrorCdpVersionMismatch, "unsupported interaction between different versions of CUDA Dynamic Parallelism") \
    X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing") \
    X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
    X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences") \
    X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began") \
    X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work") \
    X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream") \
    X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
    X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream") \
    X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread") \
    X(cudaErrorTimeout, "wait operation timed out") \
    X(cudaErrorGraphExecUpdateFailure, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update") \
    X(cudaErrorExternalDevice, "an async error has occured in external entity outside of CUDA") \
    X(cudaErrorInvalidClusterSize, "a kernel launch error has occurred due to cluster misconfiguration") \
    X(cudaErrorFunctionNotLoaded, "the function handle is not loaded when calling an API that requires a loaded function") \
    X(cudaErrorInvalidResourceType, "one or more resources passed in are not valid resource types for the operation") \
    X(cudaErrorInvalidResourceConfiguration, "one or more resources are insufficient or non-applicable for the operation") \
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
