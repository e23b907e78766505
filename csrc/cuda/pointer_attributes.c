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
 * the driver would leave untouched is untouched.  Answered: a pointer in a
 * region the hooks recorded in this install period (REGION_ATTRS below,
 * HOST_POINTER and DEVICE_POINTER where they are the pointer itself), and
 * a pointer in no region while the hooks cover every allocation entry
 * point (NOT_CUDA_GET/_GETS: the driver's answers for host memory, freed
 * memory and NULL alike).  Passed through: values only the driver holds,
 * every call before the driver is initialised in this process image, a
 * pointer an event not yet in the cache may touch, regions remembered
 * from a driver answer, and memory whose driver attributes are not its
 * region's (VMM maps, module globals, IPC mappings: their wrappers mark
 * the 2 MiB granules they touch, mh_pointer_attributes_note_irregular).
 * docs/design/pointer-attributes.md says why each answer is exact, with
 * the evidence per attribute, and what always goes to the driver.
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
static inline __attribute__((always_inline)) bool irregular(uint64_t addr)
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
    int type;    /* PA_REGION: MEMHOOK_MEMORY_CUDA, _CUDA_MANAGED or _CUDA_HOST */
    int device;
    uint64_t start, size;
} pa_view;

/* What the published map says of p.  Fills *v for PA_REGION. */
static inline __attribute__((always_inline)) pa_kind map_view(mh_cache *c, uint64_t p,
                                                              pa_view *v)
{
    mh_found_region f;
    int k = mh_cache_classify(c, p, p + 1, &f);
    if (k == MH_FOUND_ABSENT)
        return f.host_vouched && !irregular(p) ? PA_NOT_CUDA : PA_PASS;
    /* (p's granule, not the region's first: an irregular range is marked
     * whole, so a pointer into one always finds its mark) */
    if (k != MH_FOUND_IN || !f.vouched || f.r.origin != MEMHOOK_ORIGIN_HOOKS ||
        f.r.device < 0 || irregular(p))
        return PA_PASS;
    if (f.r.type != MEMHOOK_MEMORY_CUDA && f.r.type != MEMHOOK_MEMORY_CUDA_MANAGED &&
        f.r.type != MEMHOOK_MEMORY_CUDA_HOST)
        return PA_PASS;
    v->type = f.r.type;
    v->device = f.r.device;
    v->start = f.r.start;
    v->size = f.r.end - f.r.start;
    return PA_REGION;
}

/* view_of where the map may lack events: read it, then ask whether any
 * of those touches the answer's extent; once more if one may, then the
 * driver. */
static __attribute__((noinline)) pa_kind view_behind(mh_cache *c, uint64_t p, pa_view *v,
                                                     mh_cache_look *look)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt > 0 && mh_cache_look_begin(c, look))
            return map_view(c, p, v);
        pa_kind k = map_view(c, p, v);
        uint64_t lo = k == PA_REGION ? v->start : p;
        uint64_t hi = k == PA_REGION ? v->start + v->size : p + 1;
        if (k == PA_PASS || mh_cache_look_holds(c, look, lo, hi, true))
            return k;
    }
    return PA_PASS;
}

/* One read of the cache, under memhook_query's rule (cache.h,
 * mh_cache_look_begin): the map's answer stands only where no event
 * published before the call and not in it yet - this thread's or
 * another's, an ALLOC, a FREE, a marker - may change it: for memory in no
 * region nothing may touch p, for a region nothing may touch the region
 * (docs/design/pointer-attributes.md, "While another thread drains"), so a
 * drain busy in another thread does not send the call to the driver.
 * Fills *v for PA_REGION.  The caller has raised mh_hook_depth (nothing
 * the driver calls records). */
static inline __attribute__((always_inline)) pa_kind view_of(uint64_t p, pa_view *v)
{
    if (p == UINT64_MAX || !driver_ready())
        return PA_PASS;
    mh_cache *c = mh_cache_process();
    mh_cache_look look;
    if (__builtin_expect(mh_cache_look_begin(c, &look), 1))
        return map_view(c, p, v);
    return view_behind(c, p, v, &look);
}

/* Attribute sets as bit masks: bit a for attribute a.  Bit 0 (no attribute
 * is 0) stands for whatever is never answered: an attribute above 31, an
 * output that is NULL. */
#define BIT(a) (1u << (a))
#define NEVER 1u
static inline uint32_t bit_of(CUpointer_attribute a)
{
    return (unsigned)a < 32 ? BIT((unsigned)a) : NEVER;
}

/* The attributes answered for a pointer in no CUDA allocation: by
 * cuPointerGetAttribute (with CUDA_ERROR_INVALID_VALUE, documented for
 * these three) and by cuPointerGetAttributes (their defaults). */
#define NOT_CUDA_GET                                                                  \
    (BIT(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) | BIT(CU_POINTER_ATTRIBUTE_IS_MANAGED) |   \
     BIT(CU_POINTER_ATTRIBUTE_CONTEXT))
#define NOT_CUDA_GETS                                                                 \
    (NOT_CUDA_GET | BIT(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) |                        \
     BIT(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) | BIT(CU_POINTER_ATTRIBUTE_RANGE_SIZE))
/* ... and for a pointer in a region of any type; HOST_POINTER not for
 * device memory, DEVICE_POINTER only as device_pointer_is_ptr says. */
#define REGION_ATTRS                                                                  \
    (BIT(CU_POINTER_ATTRIBUTE_MEMORY_TYPE) | BIT(CU_POINTER_ATTRIBUTE_IS_MANAGED) |   \
     BIT(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) | BIT(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) | \
     BIT(CU_POINTER_ATTRIBUTE_RANGE_SIZE) | BIT(CU_POINTER_ATTRIBUTE_MAPPED))
#define REGION_AT_MOST                                                                \
    (REGION_ATTRS | BIT(CU_POINTER_ATTRIBUTE_HOST_POINTER) |                          \
     BIT(CU_POINTER_ATTRIBUTE_DEVICE_POINTER))

/* Whether a call asking `asked` can be answered for any pointer at all:
 * decided from the call's arguments alone, before the cache is read, so a
 * set no answer can cover (the runtime's own, which asks CONTEXT and
 * HOST_POINTER together) costs the driver call only. */
static inline bool may_answer(uint32_t asked, uint32_t not_cuda)
{
    return (asked & ~not_cuda) == 0 || (asked & ~REGION_AT_MOST) == 0;
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
_Static_assert(((REGION_AT_MOST | NOT_CUDA_GETS) >> (MAX_ANSWERED + 1)) == 0 &&
                   ((REGION_AT_MOST | NOT_CUDA_GETS) & NEVER) == 0,
               "every answered attribute has a value and a width");

static inline void values_of(pa_kind kind, const pa_view *v, uint64_t p,
                             uint64_t out[MAX_ANSWERED + 1])
{
    bool region = kind == PA_REGION;
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

/* One attribute's value, for cuPointerGetAttribute (a region's: memory in
 * no allocation gets no value from it). */
static inline uint64_t value_of(const pa_view *v, uint64_t p, CUpointer_attribute a)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        return v->type == MEMHOOK_MEMORY_CUDA_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        return v->type == MEMHOOK_MEMORY_CUDA_MANAGED;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        return (uint32_t)v->device;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        return v->start;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        return v->size;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        return 1;
    default:  /* DEVICE_POINTER, HOST_POINTER: the pointer itself */
        return p;
    }
}

/* Write attribute a (answerable, so at most MAX_ANSWERED) to data. */
static inline void write_value(const uint64_t *values, CUpointer_attribute a, void *data)
{
    if (WIDTH[a] == 4)
        *(uint32_t *)data = (uint32_t)values[a];
    else
        *(uint64_t *)data = values[a];
}

/* The calling thread's current context's device: false where there is no
 * current context (or no driver entry to ask).  (mh_hook_depth raised by
 * the caller.) */
static bool current_device(CUdevice *dev)
{
    ctx_get_device_fn cur = (ctx_get_device_fn)driver_fn(&g_ctx_get_device, "cuCtxGetDevice");
    return cur != NULL && cur(dev) == CUDA_SUCCESS;
}

/* DEVICE_POINTER is the address kernels of the calling thread's current
 * context use: the pointer itself for device and managed memory of that
 * context's device (unified addressing).  With no current context the
 * driver answers INVALID_CONTEXT, for another device's memory it depends on
 * peer access, and page-locked memory may have a device alias of its own:
 * those go to the driver.  One driver call (cuCtxGetDevice), made only
 * when DEVICE_POINTER is asked for and everything else asked is answered. */
static __attribute__((noinline)) bool device_pointer_is_ptr(const pa_view *v)
{
    if (v->type == MEMHOOK_MEMORY_CUDA_HOST)
        return false;
    CUdevice dev = -1;
    return current_device(&dev) && dev == v->device;
}

/* Whether every attribute in `asked` is answered for a pointer in region
 * *v. */
static inline __attribute__((always_inline)) bool region_answers(const pa_view *v,
                                                                uint32_t asked)
{
    uint32_t mask = REGION_ATTRS |
                    (v->type != MEMHOOK_MEMORY_CUDA ? BIT(CU_POINTER_ATTRIBUTE_HOST_POINTER) : 0u);
    uint32_t rest = asked & ~mask;
    return rest == 0 ||
           (rest == BIT(CU_POINTER_ATTRIBUTE_DEVICE_POINTER) && device_pointer_is_ptr(v));
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

/* What the cache says of p for a call asking `asked`: PA_PASS unless every
 * attribute asked is answered (`not_cuda`: the set answered for memory in
 * no allocation).  Fills *v for PA_REGION. */
static inline __attribute__((always_inline)) pa_kind decide(uint64_t p, uint32_t asked,
                                                            uint32_t not_cuda, pa_view *v)
{
    if (!may_answer(asked, not_cuda))
        return PA_PASS;
    mh_hook_depth++;
    pa_kind k = view_of(p, v);
    if (k == PA_NOT_CUDA && (asked & ~not_cuda) != 0)
        k = PA_PASS;
    else if (k == PA_REGION && !region_answers(v, asked))
        k = PA_PASS;
    mh_hook_depth--;
    return k;
}

CUresult mh_w_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    cuPointerGetAttribute_fn real_ = (cuPointerGetAttribute_fn)mh_next(MH_FN_cuPointerGetAttribute);
    if (real_ == NULL)
        return (CUresult)mh_unresolved(MH_FN_cuPointerGetAttribute);
    if (!answering() || data == NULL)
        return real_(data, attribute, ptr);
    pa_view v;
    pa_kind k = decide(ptr, bit_of(attribute), NOT_CUDA_GET, &v);
    if (k == PA_PASS)
        return real_(data, attribute, ptr);
    t_answered++;
    if (k == PA_NOT_CUDA)
        return CUDA_ERROR_INVALID_VALUE;  /* nothing written, as the driver */
    uint64_t value = value_of(&v, ptr, attribute);
    if (WIDTH[attribute] == 4)
        *(uint32_t *)data = (uint32_t)value;
    else
        *(uint64_t *)data = value;
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
    /* The set asked, read once; nothing is written unless every attribute
     * is answered, so a call passed through finds its outputs as the
     * caller left them. */
    uint32_t asked = 0;
    for (unsigned int i = 0; i < numAttributes; i++)
        asked |= bit_of(attributes[i]);
    if (may_answer(asked, NOT_CUDA_GETS))
        for (unsigned int i = 0; i < numAttributes; i++)
            asked |= data[i] == NULL ? NEVER : 0u;
    pa_view v;
    pa_kind k = decide(ptr, asked, NOT_CUDA_GETS, &v);
    if (k == PA_PASS)
        return real_(numAttributes, attributes, data, ptr);
    uint64_t values[MAX_ANSWERED + 1];
    values_of(k, &v, ptr, values);
    uint32_t untouched = k == PA_NOT_CUDA ? RANGE_OF_NO_ALLOCATION : 0;
    for (unsigned int i = 0; i < numAttributes; i++)
        if (!(untouched & BIT(attributes[i])))
            write_value(values, attributes[i], data[i]);
    t_answered++;
    return CUDA_SUCCESS;
}

/* cudaPointerGetAttributes needs the runtime's context: the real call makes
 * the device's primary context current where none is (and fails where it
 * cannot), so it is answered only in a thread with a current context.
 * The runtime reports a device pointer for the current device's memory;
 * another device's (peer access or not) and page-locked host memory
 * (whose device alias the driver alone knows) pass through.  Which case a
 * pointer is decides first, from the cache alone; the one driver call
 * (cuCtxGetDevice) is made only for a pointer that will be answered if the
 * context allows it. */
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
    pa_view v = {0};
    pa_kind k = view_of(p, &v);
    if (k == PA_REGION && v.type == MEMHOOK_MEMORY_CUDA_HOST)
        k = PA_PASS;
    CUdevice dev = -1;
    if (k != PA_PASS && (!current_device(&dev) ||
                         (k == PA_REGION && v.type == MEMHOOK_MEMORY_CUDA && v.device != dev)))
        k = PA_PASS;
    mh_hook_depth--;
    if (k == PA_PASS)
        return real_(attributes, ptr);
    /* (every field written, reserved zeroed as cuda.h asks of the caller:
     * libcudart leaves its stack contents there, which no caller can use) */
    struct cudaPointerAttributes out = {0};
    if (k == PA_NOT_CUDA) {
        out.type = 0;  /* cudaMemoryTypeUnregistered */
        out.device = CU_DEVICE_INVALID;
        out.hostPointer = (void *)ptr;
    } else if (v.type == MEMHOOK_MEMORY_CUDA_MANAGED) {
        out.type = 3;  /* cudaMemoryTypeManaged */
        out.device = v.device;
        out.devicePointer = out.hostPointer = (void *)ptr;
    } else {
        out.type = 2;  /* cudaMemoryTypeDevice */
        out.device = v.device;
        out.devicePointer = (void *)ptr;
    }
    *attributes = out;
    t_answered++;
    return 0;
}
