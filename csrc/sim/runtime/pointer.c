/*
 * pointer.c - cudaPointerGetAttributes, built on cuPointerGetAttributes.
 *
 * Since CUDA 11 the runtime answers for any pointer: memory the driver does
 * not know is cudaMemoryTypeUnregistered with cudaSuccess, device
 * cudaInvalidDeviceId, devicePointer NULL and hostPointer the pointer itself
 * (what libcudart 13 reports, tests/data/h200-runtime-facts.json).  Known memory:
 *   managed             -> Managed, device and host alias both the pointer
 *   device (incl pools) -> Device, hostPointer NULL
 *   pinned / registered -> Host, with the device alias the driver reports
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "cudart_internal.h"

_Static_assert(sizeof(struct cudaPointerAttributes) == 4 + 4 + 8 + 8 + 8 * sizeof(long),
               "cudaPointerAttributes must keep CUDA 13's layout");
_Static_assert(offsetof(struct cudaPointerAttributes, devicePointer) == 8, "layout");
_Static_assert(offsetof(struct cudaPointerAttributes, hostPointer) == 16, "layout");

static void set_unregistered(struct cudaPointerAttributes *a, const void *ptr)
{
    a->type = cudaMemoryTypeUnregistered;
    a->device = cudaInvalidDeviceId;
    a->devicePointer = NULL;
    a->hostPointer = (void *)ptr;
}

/* One attribute on its own, so that an attribute the driver cannot answer
 * for this pointer does not fail the others. */
static bool query_one(CUpointer_attribute attr, void *data, CUdeviceptr ptr)
{
    CUpointer_attribute attrs[1] = {attr};
    void *datas[1] = {data};
    return memhook_cudart_drv.cuPointerGetAttributes(1, attrs, datas, ptr) == CUDA_SUCCESS;
}

/* libcudart 13 hands the caller a copy of a struct of its own whose
 * reserved words it never sets: the caller finds stack contents there,
 * different from call to call (NVIDIA's runtime on an H100, driver 580).
 * The simulator writes words that differ from call to call too, so that no
 * caller or test comes to rely on the zeros cuda.h asks for. */
static void stain_reserved(struct cudaPointerAttributes *out)
{
    /* Process-wide: only the values' change from call to call matters. */
    static _Atomic unsigned long calls;
    unsigned long n = atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    out->reserved[2] = (long)((uintptr_t)&n ^ (n << 4));
}

CUDART_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                                const void *ptr)
{
    if (attributes == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    cudaError_t err = memhook_cudart_ctx_ensure();
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    if (memhook_cudart_drv.cuPointerGetAttributes == NULL)
        return memhook_cudart_ret(cudaErrorCallRequiresNewerDriver);

    struct cudaPointerAttributes out;
    memset(&out, 0, sizeof(out));
    set_unregistered(&out, ptr);
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;

    unsigned int memtype = 0;
    int ordinal = -2;
    unsigned int managed = 0;
    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *data[3] = {&memtype, &ordinal, &managed};
    CUresult r = memhook_cudart_drv.cuPointerGetAttributes(3, attrs, data, p);
    if (r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && memtype == 0)) {
        /* Not CUDA memory. */
        stain_reserved(&out);
        *attributes = out;
        return cudaSuccess;
    }
    if (r != CUDA_SUCCESS)
        return memhook_cudart_ret(memhook_cudart_from_cu(r));

    void *dev_alias = NULL;
    void *host_alias = NULL;
    if (!query_one(CU_POINTER_ATTRIBUTE_DEVICE_POINTER, &dev_alias, p))
        dev_alias = NULL;
    if (!query_one(CU_POINTER_ATTRIBUTE_HOST_POINTER, &host_alias, p))
        host_alias = NULL;

    out.device = ordinal;
    if (managed) {
        out.type = cudaMemoryTypeManaged;
        out.devicePointer = dev_alias ? dev_alias : (void *)ptr;
        out.hostPointer = host_alias ? host_alias : (void *)ptr;
    } else if (memtype == CU_MEMORYTYPE_DEVICE) {
        out.type = cudaMemoryTypeDevice;
        out.devicePointer = dev_alias ? dev_alias : (void *)ptr;
        out.hostPointer = NULL;
    } else if (memtype == CU_MEMORYTYPE_HOST) {
        out.type = cudaMemoryTypeHost;
        out.devicePointer = dev_alias;
        out.hostPointer = host_alias ? host_alias : (void *)ptr;
        /* Host memory reports the device that was current when it was
         * allocated; the driver may report the CPU for host-located memory. */
        if (out.device < 0) {
            int dev = 0;
            if (memhook_cudart_current_device(&dev) == cudaSuccess)
                out.device = dev;
        }
    } else {
        /* Arrays and other kinds have no runtime pointer type. */
        return memhook_cudart_ret(cudaErrorInvalidValue);
    }
    stain_reserved(&out);
    *attributes = out;
    return cudaSuccess;
}
