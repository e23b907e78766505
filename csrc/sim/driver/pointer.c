/*
 * pointer.c - cuPointerGetAttribute(s) and cuPointerSetAttribute.
 *
 * Each attribute is written with the C type cuda.h documents for it (and
 * that cuda-python reads it with).  The boolean ones all go through
 * write_bool(), whose width is SIM_BOOL_ATTR_BYTES.
 */
#include <string.h>
#include <unistd.h>

#include "sim_mem.h"

typedef enum { A_OK, A_NA, A_BAD } attr_res;

static size_t attr_size(CUpointer_attribute attr)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        return sizeof(void *);
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
        return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        return SIM_BOOL_ATTR_BYTES;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        return sizeof(int);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        return sizeof(CUmemoryPool);
    }
    return 0;
}

static void write_bool(void *data, bool v)
{
#if SIM_BOOL_ATTR_BYTES == 1
    *(unsigned char *)data = v ? 1 : 0;
#elif SIM_BOOL_ATTR_BYTES == 4
    *(int *)data = v ? 1 : 0;
#elif SIM_BOOL_ATTR_BYTES == 8
    *(long long *)data = v ? 1 : 0;
#else
#error "SIM_BOOL_ATTR_BYTES must be 1, 4 or 8"
#endif
}

static bool read_bool(const void *value)
{
#if SIM_BOOL_ATTR_BYTES == 1
    return *(const unsigned char *)value != 0;
#elif SIM_BOOL_ATTR_BYTES == 4
    return *(const int *)value != 0;
#else
    return *(const long long *)value != 0;
#endif
}

static bool device_located(const sim_alloc *a)
{
    return a->memtype == CU_MEMORYTYPE_DEVICE && a->device >= 0;
}

/* Write attribute attr of the allocation r (containing ptr) to data.
 * A_NA: the attribute has no value for this kind of memory. */
static attr_res write_attr(void *data, CUpointer_attribute attr, sim_mrec *r, uint64_t ptr)
{
    sim_alloc *a = &r->a;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = r->no_ctx_attr ? NULL : (CUcontext)a->ctx;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = (unsigned int)a->memtype;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        /* No device address for host-pool memory, nor for a VMM piece
         * without access (as the H200's driver answers). */
        if ((a->kind == SIM_ALLOC_POOL && a->memtype == CU_MEMORYTYPE_HOST) ||
            (a->kind == SIM_ALLOC_VMM_MAP && r->prot == PROT_NONE))
            return A_NA;
        *(CUdeviceptr *)data = ptr; /* UVA: the same address */
        return A_OK;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (a->memtype != CU_MEMORYTYPE_HOST && a->kind != SIM_ALLOC_MANAGED)
            return A_NA;
        *(void **)data = (void *)(uintptr_t)ptr;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS: {
        if (a->kind != SIM_ALLOC_DEVICE)
            return A_NA;
        CUDA_POINTER_ATTRIBUTE_P2P_TOKENS t;
        memset(&t, 0, sizeof(t));
        t.p2pToken = a->buffer_id;
        t.vaSpaceToken = (unsigned int)getpid();
        memcpy(data, &t, sizeof(t));
        r->sync_memops = true; /* documented side effect */
        return A_OK;
    }
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        write_bool(data, r->sync_memops);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = a->buffer_id;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        write_bool(data, a->kind == SIM_ALLOC_MANAGED);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a->device;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        write_bool(data, r->legacy_ipc);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = r->range_base;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = r->range_size;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        write_bool(data, true);
        return A_OK;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = r->handle_types;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        write_bool(data, r->gdr && device_located(a));
        return A_OK;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {
        unsigned int f = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        if (a->kind == SIM_ALLOC_VMM_MAP) {
            sim_ctx *cur = sim_ctx_current();
            if (cur && cur->device >= 0 && cur->device < SIM_MAX_DEVICES)
                f = r->acc_dev[cur->device];
            else
                f = a->device >= 0 ? r->acc_dev[a->device] : r->acc_host;
        } else if (a->kind == SIM_ALLOC_REGISTERED &&
                   (a->flags & CU_MEMHOSTREGISTER_READ_ONLY)) {
            f = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ;
        }
        *(unsigned int *)data = f;
        return A_OK;
    }
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = a->kind == SIM_ALLOC_POOL ? (CUmemoryPool)a->owner : NULL;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = a->size;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = a->base;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = r->block_id;
        return A_OK;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        write_bool(data, r->hw_decompress);
        return A_OK;
    }
    return A_BAD;
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                       CUdeviceptr_v2 ptr)
{
    CUresult rc = sim_enter(data == NULL || attr_size(attribute) == 0, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    /* cuda.h: "If there is no current CUcontext then
     * CUDA_ERROR_INVALID_CONTEXT is returned" (the device pointer is the
     * one kernels of the current context use); whatever the pointer. */
    if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER && sim_ctx_current() == NULL) {
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    sim_alloc *a = sim_registry_find(ptr);
    if (!a || write_attr(data, attribute, sim_mrec_of(a), ptr) != A_OK)
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

SIM_API CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                        CUpointer_attribute *attributes, void **data,
                                        CUdeviceptr_v2 ptr)
{
    bool bad = numAttributes == 0 || attributes == NULL || data == NULL;
    for (unsigned int i = 0; !bad && i < numAttributes; i++)
        bad = data[i] == NULL || attr_size(attributes[i]) == 0;
    CUresult rc = sim_enter(bad, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc *a = sim_registry_find(ptr);
    /* NVIDIA's driver (580, H100) returns CUDA_SUCCESS for a pointer in no
     * allocation and leaves RANGE_START_ADDR and RANGE_SIZE as the caller
     * left them, with a current context or without, while it still writes
     * every other attribute's default. */
    bool range_untouched = a == NULL;
    for (unsigned int i = 0; i < numAttributes; i++) {
        if (range_untouched && (attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                                attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE))
            continue;
        /* Unknown pointer or inapplicable attribute: the default, zero. */
        if (!a || write_attr(data[i], attributes[i], sim_mrec_of(a), ptr) != A_OK) {
            memset(data[i], 0, attr_size(attributes[i]));
            /* the H200's driver writes CU_DEVICE_INVALID here */
            if (attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
                *(int *)data[i] = CU_DEVICE_INVALID;
        }
    }
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute,
                                       CUdeviceptr_v2 ptr)
{
    CUresult rc = sim_enter(value == NULL || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_alloc *a = sim_registry_find(ptr);
    if (a)
        sim_mrec_of(a)->sync_memops = read_bool(value);
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}
