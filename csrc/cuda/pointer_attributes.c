/*
 * pointer_attributes.c - the driver's pointer-attribute calls answered
 * from the process cache: cuPointerGetAttribute, cuPointerGetAttributes and
 * cudaPointerGetAttributes (rows of hook_table.def whose kind is
 * MEMHOOK_EVENT_NONE: they record nothing).  Opt-in
 * (memhook_hooks_set_pointer_attributes, MEMHOOK_POINTER_ATTRIBUTES=1);
 * while it is off install.c does not route them here, and a wrapper a
 * caller still holds passes every call through.
 *
 * A call is answered only when every attribute it asks for is one the
 * cache knows exactly for that pointer; otherwise the whole call goes to
 * the real function, so an answer is never half memhook's, and an output
 * the driver would leave untouched is untouched.  What the cache vouches
 * for (docs/design/pointer-attributes.md has the evidence, per attribute):
 *
 *  - a pointer inside a region the hooks recorded in this install period
 *    (origin HOOKS, type CUDA, CUDA_MANAGED or CUDA_HOST, device known):
 *    the region is one allocation call's range as the driver reports it
 *    (the requested size; pitch x height; a pool allocation's own size), so
 *      MEMORY_TYPE       DEVICE (managed memory too, as the driver says) or HOST
 *      IS_MANAGED        whether a managed-memory call made it
 *      DEVICE_ORDINAL    the device current at the call (the context's)
 *      RANGE_START_ADDR, RANGE_SIZE   the region
 *      MAPPED            1: the range is mapped while the allocation lives
 *      HOST_POINTER      the pointer itself, for managed and page-locked
 *                        host memory (their host address is the region's)
 *      DEVICE_POINTER    the pointer itself, for device and managed memory
 *                        of the current context's device (unified
 *                        addressing; device_pointer_is_ptr says when)
 *  - a pointer in no region while the hooks cover every allocation entry
 *    point of the loaded driver (the cache's host_vouched): no CUDA
 *    allocation holds it, which is how the driver sees host memory, freed
 *    memory and NULL alike:
 *      cuPointerGetAttribute   MEMORY_TYPE, IS_MANAGED, CONTEXT ->
 *                              CUDA_ERROR_INVALID_VALUE, nothing written
 *      cuPointerGetAttributes  CUDA_SUCCESS with MEMORY_TYPE 0, IS_MANAGED
 *                              0, DEVICE_ORDINAL CU_DEVICE_INVALID (-2),
 *                              CONTEXT NULL; RANGE_START_ADDR and RANGE_SIZE
 *                              left untouched (RANGE_OF_NO_ALLOCATION)
 *      cudaPointerGetAttributes  cudaMemoryTypeUnregistered, device -2,
 *                              devicePointer NULL, hostPointer the pointer,
 *                              the reserved words zero (as cuda.h asks;
 *                              libcudart leaves stack contents there)
 *
 * Passed through always: attributes whose value only the driver holds
 * (CONTEXT and BUFFER_ID of CUDA memory, P2P_TOKENS and its side effect,
 * SYNC_MEMOPS, which cuPointerSetAttribute changes, ACCESS_FLAGS,
 * MEMPOOL_HANDLE, MAPPING_*, MEMORY_BLOCK_ID, the capability flags);
 * recording them at allocation would cost every allocation a driver call.  Passed
 * through also: every call before the driver is initialised in this process
 * image (it answers NOT_INITIALIZED then, and in a fork child for ever),
 * a cache that may lack a pending event (the drain was busy elsewhere), a
 * region remembered from a driver answer, and memory whose driver
 * attributes are not its region's: VMM maps (RANGE_* name the whole
 * cuMemAddressReserve range), module and library globals (a __managed__
 * variable comes back typed CUDA) and IPC mappings (of another device's
 * memory).  Their wrappers mark the 2 MiB granules they touch in a bitmap
 * (mh_pointer_attributes_note_irregular; a VMM map its whole reservation)
 * before their ALLOC is published; a pointer, or a region starting, in a
 * marked granule is passed through (an irregular range is marked whole).
 * Marks stay: a stale one only sends a call to the driver.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "cache.h"
#include "cuda_signatures.h"
#include "mh_options.h"
#include "mh_sonames.h"
#include "queue.h"

/* Process-wide, as the calls it changes are: read by every wrapper call. */
MH_HOT static _Atomic int g_enabled;
/* The driver answered cuDeviceGetCount in this process image: it is
 * initialised (cleared in a fork child, where it never is). */
static _Atomic int g_driver_ready;
/* One bit per 2 MiB granule of the 47-bit user address space (8 MiB of
 * address space, mapped MAP_NORESERVE when the first mark is made: only
 * the pages marks touch are ever backed).  Process-wide, as addresses are. */
#define GRANULE_SHIFT 21
#define VA_BITS 47
static _Atomic(_Atomic uint64_t *) g_irregular;
/* Per thread: calls answered by memhook (for the differential tests). */
static __thread unsigned long long t_answered __attribute__((tls_model("initial-exec")));

unsigned long long memhook_testing_pointer_attributes_answered(void) { return t_answered; }

void mh_pointer_attributes_at_load(void)
{
    atomic_store_explicit(&g_enabled, mh_opts.pointer_attributes, memory_order_release);
}

int memhook_hooks_set_pointer_attributes(int on)
{
    if (on != 0 && on != 1)
        return EINVAL;
    atomic_store_explicit(&g_enabled, on, memory_order_release);
    return 0;
}

int memhook_hooks_pointer_attributes(void)
{
    return atomic_load_explicit(&g_enabled, memory_order_acquire);
}

void mh_pointer_attributes_fork_child(void) { atomic_store(&g_driver_ready, 0); }

void mh_pointer_attributes_note_irregular(uint64_t addr, uint64_t size)
{
    _Atomic uint64_t *bits = atomic_load_explicit(&g_irregular, memory_order_acquire);
    if (bits == NULL) {
        size_t bytes = (size_t)1 << (VA_BITS - GRANULE_SHIFT - 3);
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED)
            return;  /* (then irregular() says every address is) */
        _Atomic uint64_t *none = NULL;
        if (atomic_compare_exchange_strong(&g_irregular, &none, (_Atomic uint64_t *)m))
            bits = m;
        else {
            munmap(m, bytes);
            bits = none;
        }
    }
    uint64_t top = (uint64_t)1 << VA_BITS;
    if (size == 0 || addr >= top)
        return;
    uint64_t last = (size > top - addr ? top - 1 : addr + size - 1) >> GRANULE_SHIFT;
    for (uint64_t g = addr >> GRANULE_SHIFT; g <= last; g++)
        atomic_fetch_or_explicit(&bits[g >> 6], 1ull << (g & 63), memory_order_release);
}

static void *driver_fn(_Atomic(void *) *slot, const char *name);
static _Atomic(void *) g_pointer_get_attribute;

void mh_pointer_attributes_note_vmm(uint64_t addr, uint64_t size)
{
    mh_pointer_attributes_note_irregular(addr, size);
    /* The whole reservation the map lies in (its RANGE_*, documented as the
     * cuMemAddressReserve range): an address of it with nothing mapped is
     * not "no CUDA allocation" either.  The caller is a recording wrapper
     * (mh_hook_depth raised): this query passes straight through. */
    cuPointerGetAttribute_fn get = (cuPointerGetAttribute_fn)mh_next(MH_FN_cuPointerGetAttribute);
    if (get == NULL)
        get = (cuPointerGetAttribute_fn)driver_fn(&g_pointer_get_attribute,
                                                  "cuPointerGetAttribute");
    CUdeviceptr start = 0;
    size_t length = 0;
    if (get != NULL && get(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, addr) == CUDA_SUCCESS &&
        get(&length, CU_POINTER_ATTRIBUTE_RANGE_SIZE, addr) == CUDA_SUCCESS)
        mh_pointer_attributes_note_irregular(start, length);
}

/* Whether addr's granule may hold memory whose attributes are not its
 * region's.  (An address above the 47-bit space always may; a bitmap that
 * could not be mapped was never written, so marks were lost: every one.) */
static inline bool irregular(uint64_t addr)
{
    if (addr >> VA_BITS)
        return true;
    _Atomic uint64_t *bits = atomic_load_explicit(&g_irregular, memory_order_acquire);
    if (bits == NULL)
        return false;
    uint64_t g = addr >> GRANULE_SHIFT;
    return (atomic_load_explicit(&bits[g >> 6], memory_order_acquire) >> (g & 63)) & 1u;
}

typedef CUresult (*device_count_fn)(int *);
typedef CUresult (*ctx_get_device_fn)(CUdevice *);
static _Atomic(void *) g_device_count;
static _Atomic(void *) g_ctx_get_device;

static void *driver_fn(_Atomic(void *) *slot, const char *name)
{
    void *fn = atomic_load_explicit(slot, memory_order_acquire);
    if (fn != NULL)
        return fn;
    void *h = dlopen(MH_LIBCUDA_SONAME, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) {
        (void)dlerror();  /* memhook's miss is not the caller's to see */
        return NULL;
    }
    fn = dlsym(h, name);
    dlclose(h);
    if (fn != NULL)
        atomic_store_explicit(slot, fn, memory_order_release);
    return fn;
}

void mh_pointer_attributes_prepare(void)
{
    driver_fn(&g_device_count, "cuDeviceGetCount");
    driver_fn(&g_ctx_get_device, "cuCtxGetDevice");
}

void mh_pointer_attributes_driver_unloaded(void)
{
    atomic_store(&g_device_count, NULL);
    atomic_store(&g_ctx_get_device, NULL);
    atomic_store(&g_pointer_get_attribute, NULL);
    atomic_store(&g_driver_ready, 0);
}

/* (mh_hook_depth raised by the caller: nothing the driver calls records.) */
static __attribute__((noinline)) bool driver_ready_slow(void)
{
    device_count_fn fn = (device_count_fn)driver_fn(&g_device_count, "cuDeviceGetCount");
    int n = 0;
    if (fn == NULL || fn(&n) != CUDA_SUCCESS)
        return false;
    atomic_store_explicit(&g_driver_ready, 1, memory_order_release);
    return true;
}

static inline bool driver_ready(void)
{
    return __builtin_expect(atomic_load_explicit(&g_driver_ready, memory_order_acquire), 1) ||
           driver_ready_slow();
}

/* What the cache vouches for about one pointer. */
typedef enum { PA_PASS = 0, PA_NOT_CUDA, PA_REGION } pa_kind;

typedef struct pa_view {
    pa_kind kind;
    int type;    /* PA_REGION: MEMHOOK_MEMORY_CUDA, _CUDA_MANAGED or _CUDA_HOST */
    int device;
    uint64_t start, size;
} pa_view;

static inline __attribute__((always_inline)) pa_view view_of(uint64_t p)
{
    pa_view v = {PA_PASS, 0, 0, 0, 0};
    if (p == UINT64_MAX || !driver_ready())
        return v;
    mh_cache *c = mh_cache_process();
    /* Bring the cache up to date (a drain busy in another thread: give up,
     * since an ALLOC published before this call may not be in it yet). */
    if (!mh_queue_feed_run(false) || !mh_cache_publish_deferred(c, false))
        return v;
    mh_found_region f;
    int k = mh_cache_classify(c, p, p + 1, &f);
    if (k == MH_FOUND_ABSENT) {
        if (f.host_vouched && !irregular(p))
            v.kind = PA_NOT_CUDA;
        return v;
    }
    /* (p's granule, not the region's first: an irregular range is marked
     * whole, so a pointer into one always finds its mark) */
    if (k != MH_FOUND_IN || !f.vouched || f.r.origin != MEMHOOK_ORIGIN_HOOKS ||
        f.r.device < 0 || irregular(p))
        return v;
    if (f.r.type != MEMHOOK_MEMORY_CUDA && f.r.type != MEMHOOK_MEMORY_CUDA_MANAGED &&
        f.r.type != MEMHOOK_MEMORY_CUDA_HOST)
        return v;
    v = (pa_view){PA_REGION, f.r.type, f.r.device, f.r.start, f.r.end - f.r.start};
    return v;
}

#define BIT(a) (1u << (a))
/* The attributes answered for a pointer in no CUDA allocation: by
 * cuPointerGetAttribute (with CUDA_ERROR_INVALID_VALUE, documented for
 * these three) and by cuPointerGetAttributes (their defaults). */
#define NOT_CUDA_GET                                                                  \
    (BIT(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) | BIT(CU_POINTER_ATTRIBUTE_IS_MANAGED) |   \
     BIT(CU_POINTER_ATTRIBUTE_CONTEXT))
#define NOT_CUDA_GETS                                                                 \
    (NOT_CUDA_GET | BIT(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) |                        \
     BIT(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) | BIT(CU_POINTER_ATTRIBUTE_RANGE_SIZE))
/* ... and for a pointer in a region (HOST_POINTER: not device memory's). */
#define REGION_ATTRS                                                                  \
    (BIT(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) | BIT(CU_POINTER_ATTRIBUTE_IS_MANAGED) |   \
     BIT(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) | BIT(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) | \
     BIT(CU_POINTER_ATTRIBUTE_RANGE_SIZE) | BIT(CU_POINTER_ATTRIBUTE_MAPPED))

/* The attributes answered for a pointer seen as *v, as a bit mask (bit a:
 * attribute a; none above 31 is answered). */
static inline uint32_t answerable(const pa_view *v, bool many)
{
    if (v->kind == PA_NOT_CUDA)
        return many ? NOT_CUDA_GETS : NOT_CUDA_GET;
    if (v->kind != PA_REGION)
        return 0;
    return REGION_ATTRS |
           (v->type != MEMHOOK_MEMORY_CUDA ? BIT(CU_POINTER_ATTRIBUTE_HOST_POINTER) : 0u);
}

static inline bool in(uint32_t mask, CUpointer_attribute a)
{
    return (unsigned)a < 32 && (mask >> (unsigned)a) & 1u;
}

/* The answerable attributes' values, indexed by attribute, and the width
 * of each in the C type cuda.h gives it (the booleans: 4 bytes, as the
 * driver writes them).  A table, not a switch: a call asking for several
 * attributes takes no indirect branch per attribute. */
#define MAX_ANSWERED CU_POINTER_ATTRIBUTE_MAPPED
static const uint8_t WIDTH[MAX_ANSWERED + 1] = {
    [CU_POINTER_ATTRIBUTE_CONTEXT] = sizeof(CUcontext),
    [CU_POINTER_ATTRIBUTE_MEMORY_TYPE] = sizeof(unsigned int),
    [CU_POINTER_ATTRIBUTE_DEVICE_POINTER] = sizeof(CUdeviceptr),
    [CU_POINTER_ATTRIBUTE_HOST_POINTER] = sizeof(void *),
    [CU_POINTER_ATTRIBUTE_IS_MANAGED] = sizeof(unsigned int),
    [CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL] = sizeof(int),
    [CU_POINTER_ATTRIBUTE_RANGE_START_ADDR] = sizeof(CUdeviceptr),
    [CU_POINTER_ATTRIBUTE_RANGE_SIZE] = sizeof(size_t),
    [CU_POINTER_ATTRIBUTE_MAPPED] = sizeof(unsigned int),
};
_Static_assert((REGION_ATTRS | NOT_CUDA_GETS | BIT(CU_POINTER_ATTRIBUTE_HOST_POINTER)) >>
                       (MAX_ANSWERED + 1) == 0,
               "every answered attribute has a value and a width");

static inline void values_of(const pa_view *v, uint64_t p, uint64_t out[MAX_ANSWERED + 1])
{
    bool region = v->kind == PA_REGION;
    out[CU_POINTER_ATTRIBUTE_CONTEXT] = 0;
    out[CU_POINTER_ATTRIBUTE_MEMORY_TYPE] = !region ? 0u
                                            : v->type == MEMHOOK_MEMORY_CUDA_HOST
                                                ? CU_MEMORYTYPE_HOST
                                                : CU_MEMORYTYPE_DEVICE;
    out[CU_POINTER_ATTRIBUTE_DEVICE_POINTER] = p;
    out[CU_POINTER_ATTRIBUTE_HOST_POINTER] = p;
    out[CU_POINTER_ATTRIBUTE_IS_MANAGED] = region && v->type == MEMHOOK_MEMORY_CUDA_MANAGED;
    out[CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL] = (uint32_t)(region ? v->device : CU_DEVICE_INVALID);
    out[CU_POINTER_ATTRIBUTE_RANGE_START_ADDR] = region ? v->start : 0;
    out[CU_POINTER_ATTRIBUTE_RANGE_SIZE] = region ? v->size : 0;
    out[CU_POINTER_ATTRIBUTE_MAPPED] = 1;
}

/* Write attribute a (answerable, so at most MAX_ANSWERED) to data. */
static inline void write_value(const uint64_t *values, CUpointer_attribute a, void *data)
{
    if (WIDTH[a] == 4)
        *(uint32_t *)data = (uint32_t)values[a];
    else
        *(uint64_t *)data = values[a];
}

/* DEVICE_POINTER is the address kernels of the calling thread's current
 * context use: the pointer itself for device and managed memory of that
 * context's device (unified addressing).  With no current context the
 * driver answers INVALID_CONTEXT, for another device's memory it depends on
 * peer access, and page-locked memory may have a device alias of its own:
 * those go to the driver.  One driver call (cuCtxGetDevice), made only
 * when DEVICE_POINTER is asked for. */
static bool device_pointer_is_ptr(const pa_view *v)
{
    if (v->kind != PA_REGION || v->type == MEMHOOK_MEMORY_CUDA_HOST)
        return false;
    ctx_get_device_fn cur = (ctx_get_device_fn)driver_fn(&g_ctx_get_device, "cuCtxGetDevice");
    CUdevice dev = -1;
    mh_hook_depth++;
    bool same = cur != NULL && cur(&dev) == CUDA_SUCCESS && dev == v->device;
    mh_hook_depth--;
    return same;
}

/* For a pointer in no allocation the driver leaves RANGE_START_ADDR and
 * RANGE_SIZE as the caller left them and still succeeds, with a current
 * context and without one (NVIDIA's driver 580 on an H100, the GPU
 * differential tests/gpu/test_pointer_attributes_gpu.py): they are never
 * written for such memory. */
#define RANGE_OF_NO_ALLOCATION \
    (BIT(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) | BIT(CU_POINTER_ATTRIBUTE_RANGE_SIZE))

static inline bool answering(void)
{
    return atomic_load_explicit(&g_enabled, memory_order_relaxed) && mh_hook_depth == 0;
}

CUresult mh_w_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    cuPointerGetAttribute_fn real_ = (cuPointerGetAttribute_fn)mh_next(MH_FN_cuPointerGetAttribute);
    if (real_ == NULL)
        return (CUresult)mh_unresolved(MH_FN_cuPointerGetAttribute);
    if (!answering() || data == NULL)
        return real_(data, attribute, ptr);
    mh_hook_depth++;
    pa_view v = view_of(ptr);
    mh_hook_depth--;
    uint32_t mask = answerable(&v, false);
    if (attribute == CU_POINTER_ATTRIBUTE_DEVICE_POINTER && device_pointer_is_ptr(&v))
        mask |= BIT(CU_POINTER_ATTRIBUTE_DEVICE_POINTER);
    if (!in(mask, attribute))
        return real_(data, attribute, ptr);
    t_answered++;
    if (v.kind == PA_NOT_CUDA)
        return CUDA_ERROR_INVALID_VALUE;  /* nothing written, as the driver */
    uint64_t values[MAX_ANSWERED + 1];
    values_of(&v, ptr, values);
    write_value(values, attribute, data);
    return CUDA_SUCCESS;
}

CUresult mh_w_cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                     void **data, CUdeviceptr ptr)
{
    cuPointerGetAttributes_fn real_ =
        (cuPointerGetAttributes_fn)mh_next(MH_FN_cuPointerGetAttributes);
    if (real_ == NULL)
        return (CUresult)mh_unresolved(MH_FN_cuPointerGetAttributes);
    if (!answering() || numAttributes == 0 || attributes == NULL || data == NULL)
        return real_(numAttributes, attributes, data, ptr);
    mh_hook_depth++;
    pa_view v = view_of(ptr);
    mh_hook_depth--;
    uint32_t mask = answerable(&v, true);
    /* Every attribute first, writing nothing: a call passed through finds
     * its outputs as the caller left them. */
    bool answered = mask != 0, asked_device_pointer = false;
    for (unsigned int i = 0; answered && i < numAttributes; i++) {
        CUpointer_attribute a = attributes[i];
        asked_device_pointer |= a == CU_POINTER_ATTRIBUTE_DEVICE_POINTER;
        answered = data[i] != NULL &&
                   (in(mask, a) || a == CU_POINTER_ATTRIBUTE_DEVICE_POINTER);
    }
    if (answered && asked_device_pointer)
        answered = device_pointer_is_ptr(&v);
    uint32_t untouched = v.kind == PA_NOT_CUDA ? RANGE_OF_NO_ALLOCATION : 0;
    if (!answered)
        return real_(numAttributes, attributes, data, ptr);
    uint64_t values[MAX_ANSWERED + 1];
    values_of(&v, ptr, values);
    for (unsigned int i = 0; i < numAttributes; i++)
        if (!in(untouched, attributes[i]))
            write_value(values, attributes[i], data[i]);
    t_answered++;
    return CUDA_SUCCESS;
}

/* cudaPointerGetAttributes needs the runtime's context: the real call makes
 * the device's primary context current where none is (and fails where it
 * cannot), so it is answered only in a thread with a current context.
 * The runtime reports a device pointer for the current device's memory;
 * another device's (peer access or not) and page-locked host memory
 * (whose device alias the driver alone knows) pass through. */
cudaError_t mh_w_cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                          const void *ptr)
{
    cudaPointerGetAttributes_fn real_ =
        (cudaPointerGetAttributes_fn)mh_next(MH_FN_cudaPointerGetAttributes);
    if (real_ == NULL)
        return (cudaError_t)mh_unresolved(MH_FN_cudaPointerGetAttributes);
    if (!answering() || attributes == NULL)
        return real_(attributes, ptr);
    mh_hook_depth++;
    uint64_t p = (uint64_t)(uintptr_t)ptr;
    pa_view v = view_of(p);
    bool answered = false;
    if (v.kind != PA_PASS) {
        ctx_get_device_fn cur = (ctx_get_device_fn)driver_fn(&g_ctx_get_device, "cuCtxGetDevice");
        CUdevice dev = -1;
        if (cur != NULL && cur(&dev) == CUDA_SUCCESS) {
            /* (reserved zeroed, as cuda.h asks of the caller: libcudart
             * leaves its stack contents there, which no caller can use) */
            struct cudaPointerAttributes out;
            memset(&out, 0, sizeof out);
            if (v.kind == PA_NOT_CUDA) {
                out.type = 0;  /* cudaMemoryTypeUnregistered */
                out.device = CU_DEVICE_INVALID;
                out.hostPointer = (void *)ptr;
                answered = true;
            } else if (v.type == MEMHOOK_MEMORY_CUDA_MANAGED) {
                out.type = 3;  /* cudaMemoryTypeManaged */
                out.device = v.device;
                out.devicePointer = out.hostPointer = (void *)ptr;
                answered = true;
            } else if (v.type == MEMHOOK_MEMORY_CUDA && v.device == dev) {
                out.type = 2;  /* cudaMemoryTypeDevice */
                out.device = v.device;
                out.devicePointer = (void *)ptr;
                answered = true;
            }
            if (answered)
                *attributes = out;
        }
    }
    mh_hook_depth--;
    if (!answered)
        return real_(attributes, ptr);
    t_answered++;
    return 0;
}
