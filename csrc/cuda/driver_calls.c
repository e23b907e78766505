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

#include "cache.h"
#include "cuda_hooks.h"
#include "mh_sonames.h"
#include "reloc.h"

typedef CUresult (*ctx_get_device_fn)(CUdevice *);
typedef CUresult (*device_get_count_fn)(int *);
typedef CUresult (*get_address_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef int (*get_symbol_size_fn)(size_t *, const void *);
typedef CUresult (*handle_properties_fn)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
typedef CUresult (*pointer_get_attribute_fn)(void *, int, CUdeviceptr);
typedef CUresult (*ctx_get_device_v2_fn)(CUdevice *, CUcontext);
typedef CUresult (*primary_ctx_state_fn)(CUdevice, unsigned int *, int *);
typedef CUresult (*pointer_get_attributes_fn)(unsigned int, CUpointer_attribute *, void **,
                                              CUdeviceptr);

/* Cached entry points of the one driver in the process (NULL: not looked
 * up yet, or the driver is not loaded yet - looked up again next time).
 * cuCtxGetDevice's is off the hot line: where a process sees one device
 * an ALLOC does not call it (mh_devices, which is on it). */
static _Atomic(void *) g_ctx_get_device;
static _Atomic(void *) g_get_address_range;
static _Atomic(void *) g_device_get_count;
static _Atomic(void *) g_handle_properties;
static _Atomic(void *) g_pointer_get_attribute;
static _Atomic(void *) g_ctx_get_device_v2;
static _Atomic(void *) g_primary_ctx_state;
/* How many devices this process sees (cuda_hooks.h, mh_alloc_device):
 * MH_DEVICES_UNKNOWN until the driver said.  Process-wide, as the driver
 * is; read by every ALLOC. */
MH_HOT _Atomic int mh_devices;
/* Per thread: the current device asked of the driver (for the tests:
 * memhook_testing_device_queries). */
static __thread unsigned long long t_device_queries __attribute__((tls_model("initial-exec")));
/* For the cache's queries (mh_driver_pointer_answer). */
static _Atomic(void *) g_pointer_get_attributes;
/* The loader's object count (+1) when cuPointerGetAttributes was last not
 * found: looked up again only once an object was loaded since (a
 * dlopen(RTLD_NOLOAD) of a library that is not loaded searches the path). */
static _Atomic unsigned long long g_no_driver_at;
/* The driver refused the MAPPING_* attributes once: ask without them. */
static _Atomic bool g_no_mapping_attrs;
/* cudaGetSymbolSize of the runtime whose cudaGetSymbolAddress was hooked
 * last, keyed by that function (a process normally has one runtime). */
static _Atomic(void *) g_symbol_size_key;
static _Atomic(void *) g_symbol_size;

static void *driver_symbol(_Atomic(void *) *cache, const char *name)
{
    void *fn = atomic_load_explicit(cache, memory_order_acquire);
    if (fn != NULL)
        return fn;
    void *h = mh_real_dlopen(MH_LIBCUDA_SONAME, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) {
        (void)dlerror();  /* memhook's miss is not the caller's to see */
        return NULL;
    }
    fn = mh_real_dlsym(h, name);
    mh_real_dlclose(h);  /* NOLOAD took a reference; the library stays loaded */
    if (fn != NULL)
        atomic_store_explicit(cache, fn, memory_order_release);
    return fn;
}

void mh_driver_calls_prepare(void)
{
    driver_symbol(&g_ctx_get_device, "cuCtxGetDevice");
    driver_symbol(&g_device_get_count, "cuDeviceGetCount");
    driver_symbol(&g_get_address_range, "cuMemGetAddressRange_v2");
    driver_symbol(&g_handle_properties, "cuMemGetAllocationPropertiesFromHandle");
    driver_symbol(&g_pointer_get_attribute, "cuPointerGetAttribute");
    driver_symbol(&g_ctx_get_device_v2, "cuCtxGetDevice_v2");
    driver_symbol(&g_primary_ctx_state, "cuDevicePrimaryCtxGetState");
}

void mh_driver_calls_reset(void)
{
    atomic_store(&g_ctx_get_device, NULL);
    atomic_store(&mh_devices, MH_DEVICES_UNKNOWN);
    atomic_store(&g_device_get_count, NULL);
    atomic_store(&g_get_address_range, NULL);
    atomic_store(&g_handle_properties, NULL);
    atomic_store(&g_pointer_get_attribute, NULL);
    atomic_store(&g_ctx_get_device_v2, NULL);
    atomic_store(&g_primary_ctx_state, NULL);
    atomic_store(&g_pointer_get_attributes, NULL);
    atomic_store(&g_no_driver_at, 0);
    atomic_store(&g_symbol_size_key, NULL);
    atomic_store(&g_symbol_size, NULL);
}

int mh_current_device(void)
{
    ctx_get_device_fn fn = (ctx_get_device_fn)driver_symbol(&g_ctx_get_device, "cuCtxGetDevice");
    CUdevice dev = -1;
    t_device_queries++;
    if (fn == NULL || fn(&dev) != CUDA_SUCCESS)
        return -1;
    return dev;
}

/* Asked once, after an allocation succeeded: the driver is initialised
 * then (before cuInit it answers NOT_INITIALIZED), and the count it gives
 * holds for its life - the devices a process sees are fixed at cuInit
 * (CUDA_VISIBLE_DEVICES).  A driver whose call fails is asked again at the
 * next ALLOC; one without the entry point (a driver that is not
 * libcuda.so.1, a partial stand-in) is taken as several devices, so that
 * no ALLOC looks the name up again.  Meanwhile the current context's
 * device is asked, as it always was. */
int mh_alloc_device_slow(void)
{
    if (atomic_load_explicit(&mh_devices, memory_order_relaxed) == MH_DEVICES_UNKNOWN) {
        device_get_count_fn count =
            (device_get_count_fn)driver_symbol(&g_device_get_count, "cuDeviceGetCount");
        int n = 0;
        if (count == NULL)
            atomic_store_explicit(&mh_devices, MH_DEVICES_SEVERAL, memory_order_relaxed);
        else if (count(&n) == CUDA_SUCCESS && n > 0)
            atomic_store_explicit(&mh_devices, n == 1 ? MH_DEVICES_ONE : MH_DEVICES_SEVERAL,
                                  memory_order_relaxed);
        if (n == 1)
            return 0;
    }
    return mh_current_device();
}

void mh_driver_calls_fork_child(void)
{
    atomic_store(&mh_devices, MH_DEVICES_UNKNOWN);
}

unsigned long long memhook_testing_device_queries(void)
{
    return t_device_queries;
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
        void *h = mh_real_dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
        if (h == NULL)
            return false;
        fn = mh_real_dlsym(h, "cudaGetSymbolSize");
        mh_real_dlclose(h);
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

/* The cache's question to the driver (mh_cache_driver_fn): what ptr is, as
 * memhook/_binding/driver.py asks it - MEMORY_TYPE alone first (most pointers asked
 * about are not CUDA's), then type, managed, device, range and mapping.
 * Only a driver already loaded (RTLD_NOLOAD) and initialised (before cuInit
 * it answers NOT_INITIALIZED: no answer); with mh_hook_depth raised, so
 * that what the driver calls in turn records nothing. */
static int pointer_answer(uint64_t ptr, mh_driver_answer *out)
{
    pointer_get_attributes_fn fn = (pointer_get_attributes_fn)atomic_load_explicit(
        &g_pointer_get_attributes, memory_order_acquire);
    if (fn == NULL) {
        unsigned long long at = memhook_loader_generation() + 1;
        if (atomic_load_explicit(&g_no_driver_at, memory_order_relaxed) == at)
            return -1;
        fn = (pointer_get_attributes_fn)driver_symbol(&g_pointer_get_attributes,
                                                      "cuPointerGetAttributes");
        if (fn == NULL) {
            atomic_store_explicit(&g_no_driver_at, at, memory_order_relaxed);
            return -1;
        }
    }
    CUpointer_attribute attrs[7] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      CU_POINTER_ATTRIBUTE_IS_MANAGED,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,       CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
        CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
    };
    unsigned int cu_type = 0, managed = 0;
    int device = -1;
    CUdeviceptr start = 0, map_start = 0;
    size_t length = 0, map_len = 0;
    void *data[7] = {&cu_type, &managed, &device, &start, &length, &map_start, &map_len};
    int rc = -1;
    mh_hook_depth++;
    if (fn(1, attrs, data, (CUdeviceptr)ptr) != CUDA_SUCCESS)
        goto done;
    if (cu_type == 0) {
        *out = (mh_driver_answer){.known = 0, .type = MEMHOOK_MEMORY_HOST, .device = -1};
        rc = 0;
        goto done;
    }
    cu_type = 0;
    unsigned count = atomic_load_explicit(&g_no_mapping_attrs, memory_order_relaxed) ? 5 : 7;
    CUresult r = fn(count, attrs, data, (CUdeviceptr)ptr);
    if (r != CUDA_SUCCESS && count == 7) {
        /* A driver without the MAPPING_* attributes refuses the whole call. */
        r = fn(5, attrs, data, (CUdeviceptr)ptr);
        if (r == CUDA_SUCCESS)
            atomic_store_explicit(&g_no_mapping_attrs, true, memory_order_relaxed);
        map_len = 0;
    }
    if (r != CUDA_SUCCESS)
        goto done;
    if (cu_type == 0) {  /* (freed between the two calls) */
        *out = (mh_driver_answer){.known = 0, .type = MEMHOOK_MEMORY_HOST, .device = -1};
        rc = 0;
        goto done;
    }
    int type = managed || cu_type == CU_MEMORYTYPE_UNIFIED ? MEMHOOK_MEMORY_CUDA_MANAGED
               : cu_type == CU_MEMORYTYPE_HOST             ? MEMHOOK_MEMORY_CUDA_HOST
                                                           : MEMHOOK_MEMORY_CUDA;
    uint64_t base = start, size = length;
    if (!(size && base <= ptr && ptr - base < size) && !mh_driver_range(ptr, &base, &size))
        base = size = 0;
    if (!(size && base <= ptr && ptr - base < size)) {
        base = ptr;
        size = 1;
    }
    if (map_len && map_start <= ptr && ptr - map_start < map_len) {
        uint64_t lo = base > map_start ? base : map_start;
        uint64_t hi_a = base + size, hi_b = map_start + map_len;
        base = lo;
        size = (hi_a < hi_b ? hi_a : hi_b) - lo;
    }
    *out = (mh_driver_answer){.known = 1, .type = type, .device = device >= 0 ? device : -1,
                              .base = base, .size = size};
    rc = 0;
done:
    mh_hook_depth--;
    return rc;
}

void mh_driver_calls_at_load(void)
{
    mh_cache_set_driver(pointer_answer);
}
