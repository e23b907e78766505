/*
 * procaddress.c - cuGetProcAddress / cuGetProcAddress_v2 and the table of
 * every function libcuda.so.1 exports.
 *
 * One row per exported variant: {base name, exported symbol, CUDA version
 * that introduced it, per-thread-default-stream variant?, address}.  The
 * versions are those of cudaTypedefs.h's PFN_<base>_v<version>[_ptds|_ptsz]
 * typedefs; tests/sim/test_proc_table.py checks them against that header
 * and checks that the rows and the library's exported cu* symbols are the
 * same set.  Keep the ROW(...) lines one per line: the test parses them.
 *
 * Lookup (by base name only, never by a _v2/_ptsz spelling):
 *   - the newest legacy row whose version <= cudaVersion is chosen;
 *   - with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (alone or together
 *     with _LEGACY_STREAM, which the real driver also accepts), its
 *     _ptds/_ptsz twin is returned instead when one exists with version <=
 *     cudaVersion (otherwise the legacy one: there is no per-thread spelling);
 *   - CU_GET_PROC_ADDRESS_DEFAULT and _LEGACY_STREAM return the legacy row.
 * Failures follow what libcuda 580 does on an H200 (recorded in
 * tests/data/h200-driver-facts.json, "proc_address"):
 *   - NULL symbol or pfn, a flag bit other than the two stream bits, or a
 *     cudaVersion newer than the driver (SIM_DRIVER_VERSION):
 *     CUDA_ERROR_INVALID_VALUE, symbolStatus left untouched;
 *   - an unknown base name (SYMBOL_NOT_FOUND) or a known one asked for with
 *     a version older than its first row (VERSION_NOT_SUFFICIENT):
 *     cuGetProcAddress_v2 returns CUDA_SUCCESS with *pfn NULL and, when the
 *     caller passed a symbolStatus, the reason in it (with NULL too: the
 *     recorded driver returns success either way); the older
 *     cuGetProcAddress, which has no status, returns CUDA_ERROR_NOT_FOUND.
 * On every failure *pfn is NULL.  Lookups work before cuInit and in a forked
 * child (they touch no driver state).
 */
#include <string.h>

#include "sim_api.h"

typedef struct sim_proc_row {
    const char *base;
    const char *symbol;
    int version;
    int per_thread;
    void *fn;
} sim_proc_row;

#define ROW(base, sym, version, pt) { base, #sym, version, pt, (void *)sym }

static const sim_proc_row k_rows[] = {
    /* ---- control half ---- */
    ROW("cuInit", cuInit, 2000, 0),
    ROW("cuDriverGetVersion", cuDriverGetVersion, 2020, 0),
    ROW("cuDeviceGet", cuDeviceGet, 2000, 0),
    ROW("cuDeviceGetCount", cuDeviceGetCount, 2000, 0),
    ROW("cuDeviceGetName", cuDeviceGetName, 2000, 0),
    ROW("cuDeviceGetUuid", cuDeviceGetUuid, 9020, 0),
    ROW("cuDeviceGetUuid", cuDeviceGetUuid_v2, 11040, 0),
    ROW("cuDeviceTotalMem", cuDeviceTotalMem, 2000, 0),
    ROW("cuDeviceTotalMem", cuDeviceTotalMem_v2, 3020, 0),
    ROW("cuDeviceGetAttribute", cuDeviceGetAttribute, 2000, 0),
    ROW("cuDeviceGetPCIBusId", cuDeviceGetPCIBusId, 4010, 0),
    ROW("cuDeviceComputeCapability", cuDeviceComputeCapability, 2000, 0),
    ROW("cuDeviceCanAccessPeer", cuDeviceCanAccessPeer, 4000, 0),
    ROW("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000, 0),
    ROW("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease, 7000, 0),
    ROW("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000, 0),
    ROW("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset, 7000, 0),
    ROW("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2, 11000, 0),
    ROW("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState, 7000, 0),
    ROW("cuDevicePrimaryCtxSetFlags", cuDevicePrimaryCtxSetFlags, 7000, 0),
    ROW("cuDevicePrimaryCtxSetFlags", cuDevicePrimaryCtxSetFlags_v2, 11000, 0),
    ROW("cuCtxCreate", cuCtxCreate, 2000, 0),
    ROW("cuCtxCreate", cuCtxCreate_v2, 3020, 0),
    ROW("cuCtxCreate", cuCtxCreate_v3, 11040, 0),
    ROW("cuCtxCreate", cuCtxCreate_v4, 12050, 0),
    ROW("cuCtxDestroy", cuCtxDestroy, 2000, 0),
    ROW("cuCtxDestroy", cuCtxDestroy_v2, 4000, 0),
    ROW("cuCtxGetCurrent", cuCtxGetCurrent, 4000, 0),
    ROW("cuCtxSetCurrent", cuCtxSetCurrent, 4000, 0),
    ROW("cuCtxPushCurrent", cuCtxPushCurrent, 2000, 0),
    ROW("cuCtxPushCurrent", cuCtxPushCurrent_v2, 4000, 0),
    ROW("cuCtxPopCurrent", cuCtxPopCurrent, 2000, 0),
    ROW("cuCtxPopCurrent", cuCtxPopCurrent_v2, 4000, 0),
    ROW("cuCtxGetDevice", cuCtxGetDevice, 2000, 0),
    ROW("cuCtxGetDevice", cuCtxGetDevice_v2, 13000, 0),
    ROW("cuCtxSynchronize", cuCtxSynchronize, 2000, 0),
    ROW("cuCtxSynchronize", cuCtxSynchronize_v2, 13000, 0),
    ROW("cuCtxGetFlags", cuCtxGetFlags, 7000, 0),
    ROW("cuCtxGetId", cuCtxGetId, 12000, 0),
    ROW("cuCtxGetApiVersion", cuCtxGetApiVersion, 3020, 0),
    ROW("cuStreamCreate", cuStreamCreate, 2000, 0),
    ROW("cuStreamCreateWithPriority", cuStreamCreateWithPriority, 5050, 0),
    ROW("cuStreamDestroy", cuStreamDestroy, 2000, 0),
    ROW("cuStreamDestroy", cuStreamDestroy_v2, 4000, 0),
    ROW("cuStreamSynchronize", cuStreamSynchronize, 2000, 0),
    ROW("cuStreamSynchronize", cuStreamSynchronize_ptsz, 7000, 1),
    ROW("cuStreamQuery", cuStreamQuery, 2000, 0),
    ROW("cuStreamQuery", cuStreamQuery_ptsz, 7000, 1),
    ROW("cuStreamGetCtx", cuStreamGetCtx, 9020, 0),
    ROW("cuStreamGetCtx", cuStreamGetCtx_v2, 12050, 0),
    ROW("cuStreamGetCtx", cuStreamGetCtx_ptsz, 9020, 1),
    ROW("cuStreamGetCtx", cuStreamGetCtx_v2_ptsz, 12050, 1),
    ROW("cuStreamGetFlags", cuStreamGetFlags, 5050, 0),
    ROW("cuStreamGetFlags", cuStreamGetFlags_ptsz, 7000, 1),
    ROW("cuGetErrorName", cuGetErrorName, 6000, 0),
    ROW("cuGetErrorString", cuGetErrorString, 6000, 0),
    ROW("cuModuleLoad", cuModuleLoad, 2000, 0),
    ROW("cuModuleLoadData", cuModuleLoadData, 2000, 0),
    ROW("cuModuleUnload", cuModuleUnload, 2000, 0),
    ROW("cuModuleGetGlobal", cuModuleGetGlobal, 2000, 0),
    ROW("cuModuleGetGlobal", cuModuleGetGlobal_v2, 3020, 0),
    ROW("cuLibraryLoadData", cuLibraryLoadData, 12000, 0),
    ROW("cuLibraryLoadFromFile", cuLibraryLoadFromFile, 12000, 0),
    ROW("cuLibraryUnload", cuLibraryUnload, 12000, 0),
    ROW("cuLibraryGetGlobal", cuLibraryGetGlobal, 12000, 0),
    ROW("cuLibraryGetManaged", cuLibraryGetManaged, 12000, 0),
    ROW("cuLibraryGetModule", cuLibraryGetModule, 12000, 0),
    ROW("cuGetProcAddress", cuGetProcAddress, 11030, 0),
    ROW("cuGetProcAddress", cuGetProcAddress_v2, 12000, 0),
    /* ---- memory half ---- */
    ROW("cuMemAlloc", cuMemAlloc, 2000, 0),
    ROW("cuMemAlloc", cuMemAlloc_v2, 3020, 0),
    ROW("cuMemAllocPitch", cuMemAllocPitch, 2000, 0),
    ROW("cuMemAllocPitch", cuMemAllocPitch_v2, 3020, 0),
    ROW("cuMemAllocManaged", cuMemAllocManaged, 6000, 0),
    ROW("cuMemFree", cuMemFree, 2000, 0),
    ROW("cuMemFree", cuMemFree_v2, 3020, 0),
    ROW("cuMemAllocHost", cuMemAllocHost, 2000, 0),
    ROW("cuMemAllocHost", cuMemAllocHost_v2, 3020, 0),
    ROW("cuMemHostAlloc", cuMemHostAlloc, 2020, 0),
    ROW("cuMemFreeHost", cuMemFreeHost, 2000, 0),
    ROW("cuMemHostRegister", cuMemHostRegister, 4000, 0),
    ROW("cuMemHostRegister", cuMemHostRegister_v2, 6050, 0),
    ROW("cuMemHostUnregister", cuMemHostUnregister, 4000, 0),
    ROW("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer, 2020, 0),
    ROW("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2, 3020, 0),
    ROW("cuMemHostGetFlags", cuMemHostGetFlags, 2030, 0),
    ROW("cuMemGetAddressRange", cuMemGetAddressRange, 2000, 0),
    ROW("cuMemGetAddressRange", cuMemGetAddressRange_v2, 3020, 0),
    ROW("cuMemGetInfo", cuMemGetInfo, 2000, 0),
    ROW("cuMemGetInfo", cuMemGetInfo_v2, 3020, 0),
    ROW("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity, 10020, 0),
    ROW("cuMemCreate", cuMemCreate, 10020, 0),
    ROW("cuMemRelease", cuMemRelease, 10020, 0),
    ROW("cuMemAddressReserve", cuMemAddressReserve, 10020, 0),
    ROW("cuMemAddressFree", cuMemAddressFree, 10020, 0),
    ROW("cuMemMap", cuMemMap, 10020, 0),
    ROW("cuMemUnmap", cuMemUnmap, 10020, 0),
    ROW("cuMemSetAccess", cuMemSetAccess, 10020, 0),
    ROW("cuMemGetAccess", cuMemGetAccess, 10020, 0),
    ROW("cuMemGetAllocationPropertiesFromHandle", cuMemGetAllocationPropertiesFromHandle, 10020, 0),
    ROW("cuMemRetainAllocationHandle", cuMemRetainAllocationHandle, 11000, 0),
    ROW("cuMemPoolCreate", cuMemPoolCreate, 11020, 0),
    ROW("cuMemPoolDestroy", cuMemPoolDestroy, 11020, 0),
    ROW("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool, 11020, 0),
    ROW("cuDeviceGetMemPool", cuDeviceGetMemPool, 11020, 0),
    ROW("cuDeviceSetMemPool", cuDeviceSetMemPool, 11020, 0),
    ROW("cuMemPoolSetAttribute", cuMemPoolSetAttribute, 11020, 0),
    ROW("cuMemPoolGetAttribute", cuMemPoolGetAttribute, 11020, 0),
    ROW("cuMemPoolTrimTo", cuMemPoolTrimTo, 11020, 0),
    ROW("cuMemAllocAsync", cuMemAllocAsync, 11020, 0),
    ROW("cuMemAllocAsync", cuMemAllocAsync_ptsz, 11020, 1),
    ROW("cuMemFreeAsync", cuMemFreeAsync, 11020, 0),
    ROW("cuMemFreeAsync", cuMemFreeAsync_ptsz, 11020, 1),
    ROW("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, 11020, 0),
    ROW("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync_ptsz, 11020, 1),
    ROW("cuIpcGetMemHandle", cuIpcGetMemHandle, 4010, 0),
    ROW("cuIpcOpenMemHandle", cuIpcOpenMemHandle, 4010, 0),
    ROW("cuIpcOpenMemHandle", cuIpcOpenMemHandle_v2, 11000, 0),
    ROW("cuIpcCloseMemHandle", cuIpcCloseMemHandle, 4010, 0),
    ROW("cuPointerGetAttribute", cuPointerGetAttribute, 4000, 0),
    ROW("cuPointerGetAttributes", cuPointerGetAttributes, 7000, 0),
    ROW("cuPointerSetAttribute", cuPointerSetAttribute, 6000, 0),
    ROW("cuMemcpy", cuMemcpy, 4000, 0),
    ROW("cuMemcpy", cuMemcpy_ptds, 7000, 1),
    ROW("cuMemcpyAsync", cuMemcpyAsync, 4000, 0),
    ROW("cuMemcpyAsync", cuMemcpyAsync_ptsz, 7000, 1),
    ROW("cuMemcpyHtoD", cuMemcpyHtoD, 2000, 0),
    ROW("cuMemcpyHtoD", cuMemcpyHtoD_v2, 3020, 0),
    ROW("cuMemcpyHtoD", cuMemcpyHtoD_v2_ptds, 7000, 1),
    ROW("cuMemcpyDtoH", cuMemcpyDtoH, 2000, 0),
    ROW("cuMemcpyDtoH", cuMemcpyDtoH_v2, 3020, 0),
    ROW("cuMemcpyDtoH", cuMemcpyDtoH_v2_ptds, 7000, 1),
    ROW("cuMemcpyDtoD", cuMemcpyDtoD, 2000, 0),
    ROW("cuMemcpyDtoD", cuMemcpyDtoD_v2, 3020, 0),
    ROW("cuMemcpyDtoD", cuMemcpyDtoD_v2_ptds, 7000, 1),
    ROW("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync, 2000, 0),
    ROW("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, 3020, 0),
    ROW("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2_ptsz, 7000, 1),
    ROW("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync, 2000, 0),
    ROW("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, 3020, 0),
    ROW("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2_ptsz, 7000, 1),
    ROW("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync, 3000, 0),
    ROW("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2, 3020, 0),
    ROW("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2_ptsz, 7000, 1),
    ROW("cuMemsetD8", cuMemsetD8, 2000, 0),
    ROW("cuMemsetD8", cuMemsetD8_v2, 3020, 0),
    ROW("cuMemsetD8", cuMemsetD8_v2_ptds, 7000, 1),
    ROW("cuMemsetD16", cuMemsetD16, 2000, 0),
    ROW("cuMemsetD16", cuMemsetD16_v2, 3020, 0),
    ROW("cuMemsetD16", cuMemsetD16_v2_ptds, 7000, 1),
    ROW("cuMemsetD32", cuMemsetD32, 2000, 0),
    ROW("cuMemsetD32", cuMemsetD32_v2, 3020, 0),
    ROW("cuMemsetD32", cuMemsetD32_v2_ptds, 7000, 1),
    ROW("cuMemsetD8Async", cuMemsetD8Async, 3020, 0),
    ROW("cuMemsetD8Async", cuMemsetD8Async_ptsz, 7000, 1),
    ROW("cuMemsetD16Async", cuMemsetD16Async, 3020, 0),
    ROW("cuMemsetD16Async", cuMemsetD16Async_ptsz, 7000, 1),
    ROW("cuMemsetD32Async", cuMemsetD32Async, 3020, 0),
    ROW("cuMemsetD32Async", cuMemsetD32Async_ptsz, 7000, 1),
};

#undef ROW

#define N_ROWS (sizeof k_rows / sizeof k_rows[0])

static bool is_pt_twin(const sim_proc_row *pt, const sim_proc_row *legacy)
{
    size_t n = strlen(legacy->symbol);
    return strncmp(pt->symbol, legacy->symbol, n) == 0 &&
           (strcmp(pt->symbol + n, "_ptds") == 0 || strcmp(pt->symbol + n, "_ptsz") == 0);
}

typedef enum proc_api { PROC_API_V1, PROC_API_V2 } proc_api;

static CUresult not_found(proc_api api, CUdriverProcAddressQueryResult *status,
                          CUdriverProcAddressQueryResult why)
{
    if (api == PROC_API_V1)
        return CUDA_ERROR_NOT_FOUND;
    if (status != NULL)
        *status = why;
    return CUDA_SUCCESS;
}

static CUresult lookup(proc_api api, const char *symbol, void **pfn, int cudaVersion,
                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    if (pfn != NULL)
        *pfn = NULL;
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    const cuuint64_t known = CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if ((flags & ~known) != 0 || cudaVersion > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;

    bool found = false;
    const sim_proc_row *best = NULL;
    for (size_t i = 0; i < N_ROWS; i++) {
        const sim_proc_row *r = &k_rows[i];
        if (r->per_thread || strcmp(r->base, symbol) != 0)
            continue;
        found = true;
        if (r->version <= cudaVersion && (best == NULL || r->version > best->version))
            best = r;
    }
    if (!found)
        return not_found(api, status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    if (best == NULL)
        return not_found(api, status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    if (per_thread) {
        for (size_t i = 0; i < N_ROWS; i++) {
            const sim_proc_row *r = &k_rows[i];
            if (r->per_thread && r->version <= cudaVersion && is_pt_twin(r, best)) {
                best = r;
                break;
            }
        }
    }
    *pfn = best->fn;
    if (status != NULL)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int driverVersion,
                                  cuuint64_t flags)
{
    return lookup(PROC_API_V1, symbol, pfn, driverVersion, flags, NULL);
}

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int driverVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolFound)
{
    return lookup(PROC_API_V2, symbol, pfn, driverVersion, flags, symbolFound);
}
