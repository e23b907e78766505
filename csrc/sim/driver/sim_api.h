/*
 * sim_api.h - every function the simulated driver (libcuda.so.1) exports,
 * both halves, with the exact CUDA 13 driver ABI.
 *
 * Every driver .c includes this header so the compiler checks each
 * definition against the ABI, and procaddress.c takes the addresses of all
 * of them for the cuGetProcAddress table.  Adding an export means: add its
 * prototype here AND its row in procaddress.c (tests/sim/test_proc_table.py
 * fails when the exported symbols and the table disagree).
 *
 * Naming follows the real driver: the first ABI of an entry point keeps the
 * base name, later ABIs are _v2, _v3, ...; _ptds / _ptsz are the
 * per-thread-default-stream variants of the spelling they share an ABI with.
 * The version-1 spellings use the 32-bit pre-3.2 ABI (CUdeviceptr_v1,
 * unsigned int sizes).  Each spelling is its own function with its own
 * address (memhook maps pointers back to names with dladdr).
 */
#ifndef MEMHOOK_SIM_API_H
#define MEMHOOK_SIM_API_H

#include "sim_internal.h"

/* Types of the ABI that cuda_abi.h does not carry.  CUjit_option and
 * CUlibraryOption are int-sized enums in cuda.h; the simulator never reads
 * their values, so an int of the same size keeps the ABI. */
typedef struct CUgreenCtx_st *CUgreenCtx;
typedef int sim_jit_option;      /* cuda.h: CUjit_option */
typedef int sim_library_option;  /* cuda.h: CUlibraryOption */

/* ==== control half ===================================================== */

/* state.c */
SIM_API CUresult cuInit(unsigned int Flags);

/* device.c */
SIM_API CUresult cuDriverGetVersion(int *driverVersion);
SIM_API CUresult cuDeviceGet(CUdevice_v1 *device, int ordinal);
SIM_API CUresult cuDeviceGetCount(int *count);
SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice_v1 dev);
SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice_v1 dev);
SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice_v1 dev);
SIM_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice_v1 dev);
SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice_v1 dev);
SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice_v1 dev);
SIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice_v1 dev);
SIM_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice_v1 dev);
SIM_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice_v1 dev, CUdevice_v1 peerDev);

/* context.c */
SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice_v1 dev);
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice_v1 dev);
SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice_v1 dev);
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice_v1 dev);
SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice_v1 dev);
SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice_v1 dev, unsigned int *flags, int *active);
SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice_v1 dev, unsigned int flags);
SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice_v1 dev, unsigned int flags);
SIM_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice_v1 dev);
SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice_v1 dev);
SIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice_v1 dev);
SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev);
SIM_API CUresult cuCtxDestroy(CUcontext ctx);
SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx);
SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx);
SIM_API CUresult cuCtxSetCurrent(CUcontext ctx);
SIM_API CUresult cuCtxPushCurrent(CUcontext ctx);
SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx);
SIM_API CUresult cuCtxPopCurrent(CUcontext *pctx);
SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx);
SIM_API CUresult cuCtxGetDevice(CUdevice_v1 *device);
SIM_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx);
SIM_API CUresult cuCtxSynchronize(void);
SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx);
SIM_API CUresult cuCtxGetFlags(unsigned int *flags);
SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId);
SIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version);

/* stream.c */
SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
SIM_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority);
SIM_API CUresult cuStreamDestroy(CUstream hStream);
SIM_API CUresult cuStreamDestroy_v2(CUstream hStream);
SIM_API CUresult cuStreamSynchronize(CUstream hStream);
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream);
SIM_API CUresult cuStreamQuery(CUstream hStream);
SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream);
SIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx);
SIM_API CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pctx, CUgreenCtx *pGreenCtx);
SIM_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx);
SIM_API CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pctx, CUgreenCtx *pGreenCtx);
SIM_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags);
SIM_API CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags);

/* errors.c */
SIM_API CUresult cuGetErrorName(CUresult error, const char **pStr);
SIM_API CUresult cuGetErrorString(CUresult error, const char **pStr);

/* module.c */
SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname);
SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image);
SIM_API CUresult cuModuleUnload(CUmodule hmod);
SIM_API CUresult cuModuleGetGlobal(CUdeviceptr_v1 *dptr, unsigned int *bytes, CUmodule hmod, const char *name);
SIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr_v2 *dptr, size_t *bytes, CUmodule hmod, const char *name);
SIM_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, sim_jit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, sim_library_option *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions);
SIM_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, sim_jit_option *jitOptions, void **jitOptionsValues, unsigned int numJitOptions, sim_library_option *libraryOptions, void **libraryOptionValues, unsigned int numLibraryOptions);
SIM_API CUresult cuLibraryUnload(CUlibrary library);
SIM_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name);
SIM_API CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name);
SIM_API CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library);

/* procaddress.c */
SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int driverVersion, cuuint64_t flags);
SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int driverVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolFound);

/* ==== memory half ====================================================== */

/* memory.c */
SIM_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
SIM_API CUresult cuMemAlloc_v2(CUdeviceptr_v2 *dptr, size_t bytesize);
SIM_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes, unsigned int Height, unsigned int ElementSizeBytes);
SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr_v2 *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes);
SIM_API CUresult cuMemAllocManaged(CUdeviceptr_v2 *dptr, size_t bytesize, unsigned int flags);
SIM_API CUresult cuMemFree(CUdeviceptr_v1 dptr);
SIM_API CUresult cuMemFree_v2(CUdeviceptr_v2 dptr);
SIM_API CUresult cuMemAllocHost(void **pp, unsigned int bytesize);
SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize);
SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
SIM_API CUresult cuMemFreeHost(void *p);
SIM_API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags);
SIM_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
SIM_API CUresult cuMemHostUnregister(void *p);
SIM_API CUresult cuMemHostGetDevicePointer(CUdeviceptr_v1 *pdptr, void *p, unsigned int Flags);
SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr_v2 *pdptr, void *p, unsigned int Flags);
SIM_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p);
SIM_API CUresult cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize, CUdeviceptr_v1 dptr);
SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr_v2 *pbase, size_t *psize, CUdeviceptr_v2 dptr);
SIM_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total);
SIM_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total);

/* vmm.c */
SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp_v1 *prop, CUmemAllocationGranularity_flags option);
SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle_v1 *handle, size_t size, const CUmemAllocationProp_v1 *prop, unsigned long long flags);
SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle_v1 handle);
SIM_API CUresult cuMemAddressReserve(CUdeviceptr_v2 *ptr, size_t size, size_t alignment, CUdeviceptr_v2 addr, unsigned long long flags);
SIM_API CUresult cuMemAddressFree(CUdeviceptr_v2 ptr, size_t size);
SIM_API CUresult cuMemMap(CUdeviceptr_v2 ptr, size_t size, size_t offset, CUmemGenericAllocationHandle_v1 handle, unsigned long long flags);
SIM_API CUresult cuMemUnmap(CUdeviceptr_v2 ptr, size_t size);
SIM_API CUresult cuMemSetAccess(CUdeviceptr_v2 ptr, size_t size, const CUmemAccessDesc_v1 *desc, size_t count);
SIM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation_v1 *location, CUdeviceptr_v2 ptr);
SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp_v1 *prop, CUmemGenericAllocationHandle_v1 handle);
SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle_v1 *handle, void *addr);

/* pool.c */
SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps_v1 *poolProps);
SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool);
SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice_v1 dev);
SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice_v1 dev);
SIM_API CUresult cuDeviceSetMemPool(CUdevice_v1 dev, CUmemoryPool pool);
SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
SIM_API CUresult cuMemAllocAsync(CUdeviceptr_v2 *dptr, size_t bytesize, CUstream hStream);
SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr_v2 *dptr, size_t bytesize, CUstream hStream);
SIM_API CUresult cuMemFreeAsync(CUdeviceptr_v2 dptr, CUstream hStream);
SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr_v2 dptr, CUstream hStream);
SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr_v2 *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr_v2 *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);

/* ipc.c */
SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle_v1 *pHandle, CUdeviceptr_v2 dptr);
SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr_v2 *pdptr, CUipcMemHandle_v1 handle, unsigned int Flags);
SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr_v2 *pdptr, CUipcMemHandle_v1 handle, unsigned int Flags);
SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr_v2 dptr);

/* pointer.c */
SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr_v2 ptr);
SIM_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data, CUdeviceptr_v2 ptr);
SIM_API CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr_v2 ptr);

/* copy.c */
SIM_API CUresult cuMemcpy(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount);
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount);
SIM_API CUresult cuMemcpyAsync(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount);
SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr_v2 dstDevice, const void *srcHost, size_t ByteCount);
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr_v2 dstDevice, const void *srcHost, size_t ByteCount);
SIM_API CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount);
SIM_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount);
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount);
SIM_API CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount);
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount);
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount);
SIM_API CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr_v2 dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr_v2 dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount, CUstream hStream);
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount, CUstream hStream);
SIM_API CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N);
SIM_API CUresult cuMemsetD8_v2(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N);
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N);
SIM_API CUresult cuMemsetD16(CUdeviceptr_v1 dstDevice, unsigned short us, unsigned int N);
SIM_API CUresult cuMemsetD16_v2(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N);
SIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N);
SIM_API CUresult cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N);
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N);
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N);
SIM_API CUresult cuMemsetD8Async(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N, CUstream hStream);
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N, CUstream hStream);
SIM_API CUresult cuMemsetD16Async(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N, CUstream hStream);
SIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N, CUstream hStream);
SIM_API CUresult cuMemsetD32Async(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N, CUstream hStream);
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N, CUstream hStream);

#endif /* MEMHOOK_SIM_API_H */
