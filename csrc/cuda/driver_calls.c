/*
 * driver_calls.c - the few driver queries the wrappers make themselves:
 * the current device (for an ALLOC), an allocation's range (for a FREE the
 * live table does not know, and for an IPC mapping's size), whether memory
 * is managed (a __managed__ variable's cudaGetSymbolAddress), the size
 * of a runtime symbol, and for context teardowns a context's device and
 * whether a primary context is still active.
 *
 * The entry points are looked up in the loaded libcuda.so.1 at install
 * (mh_driver_calls_prepare), so that a hook does not dlopen - the loader's
 * lock - on its first call; a driver loaded after install is looked up on
 * first use instead.  Cached either way.  These functions are not hooked, and they run with the
 * caller's mh_hook_depth already raised, so anything the driver calls in
 * turn passes through unrecorded.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "cuda_hooks.h"
#include "mh_sonames.h"

typedef CUresult (*ctx_get_device_fn)(CUdevice *);
typedef CUresult (*get_address_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef int (*get_symbol_size_fn)(size_t *, const void *);
typedef CUresult (*handle_properties_fn)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
typedef CUresult (*pointer_get_attribute_fn)(void *, int, CUdeviceptr);
typedef CUresult (*ctx_get_device_v2_fn)(CUdevice *, CUcontext);
typedef CUresult (*primary_ctx_state_fn)(CUdevice, unsigned int *, int *);

/* Cached entry points of the one driver in the process (NULL: not looked
 * up yet, or the driver is not loaded yet - looked up again next time). */
MH_HOT static _Atomic(void *) g_ctx_get_device;
static _Atomic(void *) g_get_address_range;
static _Atomic(void *) g_handle_properties;
static _Atomic(void *) g_pointer_get_attribute;
static _Atomic(void *) g_ctx_get_device_v2;
static _Atomic(void *) g_primary_ctx_state;
/* cudaGetSymbolSize of the runtime whose cudaGetSymbolAddress was hooked
 * last, keyed by that function (a process normally has one runtime). */
static _Atomic(void *) g_symbol_size_key;
static _Atomic(void *) g_symbol_size;

static void *driver_symbol(_Atomic(void *) *cache, const char *name)
{
    void *fn = atomic_load_explicit(cache, memory_order_acquire);
    if (fn != NULL)
        return fn;
    void *h = dlopen(MH_LIBCUDA_SONAME, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) {
        (void)dlerror();  /* memhook's miss is not the caller's to see */
        return NULL;
    }
    fn = dlsym(h, name);
    dlclose(h);  /* NOLOAD took a reference; the library stays loaded */
    if (fn != NULL)
        atomic_store_explicit(cache, fn, memory_order_release);
    return fn;
}

void mh_driver_calls_prepare(void)
{
    driver_symbol(&g_ctx_get_device, "cuCtxGetDevice");
    driver_symbol(&g_get_address_range, "cuMemGetAddressRange_v2");
    driver_symbol(&g_handle_properties, "cuMemGetAllocationPropertiesFromHandle");
    driver_symbol(&g_pointer_get_attribute, "cuPointerGetAttribute");
    driver_symbol(&g_ctx_get_device_v2, "cuCtxGetDevice_v2");
    driver_symbol(&g_primary_ctx_state, "cuDevicePrimaryCtxGetState");
}

void mh_driver_calls_reset(void)
{
    atomic_store(&g_ctx_get_device, NULL);
    atomic_store(&g_get_address_range, NULL);
    atomic_store(&g_handle_properties, NULL);
    atomic_store(&g_pointer_get_attribute, NULL);
    atomic_store(&g_ctx_get_device_v2, NULL);
    atomic_store(&g_primary_ctx_state, NULL);
    atomic_store(&g_symbol_size_key, NULL);
    atomic_store(&g_symbol_size, NULL);
}

int mh_current_device(void)
{
    ctx_get_device_fn fn = (ctx_get_device_fn)driver_symbol(&g_ctx_get_device, "cuCtxGetDevice");
    CUdevice dev = -1;
    if (fn == NULL || fn(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

int mh_context_device(CUcontext ctx)
{
    ctx_get_device_v2_fn fn =
        (ctx_get_device_v2_fn)driver_symbol(&g_ctx_get_device_v2, "cuCtxGetDevice_v2");
    CUdevice dev = -1;
    if (fn == NULL || ctx == NULL || fn(&dev, ctx) != CUDA_SUCCESS)
        return -1;
    return dev;
}

bool mh_primary_ctx_active(CUdevice dev)
{
    primary_ctx_state_fn fn = (primary_ctx_state_fn)driver_symbol(
        &g_primary_ctx_state, "cuDevicePrimaryCtxGetState");
    unsigned int flags = 0;
    int active = 1;
    if (fn == NULL || fn(dev, &flags, &active) != CUDA_SUCCESS)
        return true;
    return active != 0;
}

bool mh_driver_range(uint64_t addr, uint64_t *base, uint64_t *size)
{
    get_address_range_fn fn =
        (get_address_range_fn)driver_symbol(&g_get_address_range, "cuMemGetAddressRange_v2");
    CUdeviceptr b = 0;
    size_t s = 0;
    if (fn == NULL || fn(&b, &s, (CUdeviceptr)addr) != CUDA_SUCCESS)
        return false;
    *base = b;
    *size = s;
    return true;
}

bool mh_driver_is_managed(uint64_t addr)
{
    pointer_get_attribute_fn fn = (pointer_get_attribute_fn)driver_symbol(
        &g_pointer_get_attribute, "cuPointerGetAttribute");
    unsigned int managed = 0;
    if (fn == NULL || fn(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (CUdeviceptr)addr) !=
                          CUDA_SUCCESS)
        return false;
    return managed != 0;
}

bool mh_runtime_symbol_size(void *get_symbol_address_fn, const void *symbol, uint64_t *size)
{
    void *fn = NULL;
    if (atomic_load_explicit(&g_symbol_size_key, memory_order_acquire) == get_symbol_address_fn)
        fn = atomic_load_explicit(&g_symbol_size, memory_order_acquire);
    if (fn == NULL) {
        Dl_info info;
        if (get_symbol_address_fn == NULL || dladdr(get_symbol_address_fn, &info) == 0 ||
            info.dli_fname == NULL)
            return false;
        void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
        if (h == NULL)
            return false;
        fn = dlsym(h, "cudaGetSymbolSize");
        dlclose(h);
        if (fn == NULL)
            return false;
        atomic_store_explicit(&g_symbol_size, fn, memory_order_release);
        atomic_store_explicit(&g_symbol_size_key, get_symbol_address_fn, memory_order_release);
    }
    size_t s = 0;
    if (((get_symbol_size_fn)fn)(&s, symbol) != 0)
        return false;
    *size = s;
    return true;
}

bool mh_handle_kind(uint64_t handle, int *mem_type, int *device)
{
    handle_properties_fn fn = (handle_properties_fn)driver_symbol(
        &g_handle_properties, "cuMemGetAllocationPropertiesFromHandle");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    if (fn == NULL || fn(&prop, (CUmemGenericAllocationHandle)handle) != CUDA_SUCCESS)
        return false;
    switch (prop.location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        *mem_type = (int)prop.type == 2 /* CU_MEM_ALLOCATION_TYPE_MANAGED */
                        ? MEMHOOK_MEM_CUDA_MANAGED
                        : MEMHOOK_MEM_CUDA;
        *device = prop.location.id;
        return true;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        *mem_type = MEMHOOK_MEM_CUDA_HOST;
        *device = -1;
        return true;
    default:
        return false;
    }
}
