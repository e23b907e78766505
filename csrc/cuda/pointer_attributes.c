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

/* The answering functions start on a cache line.  Where the same code
 * started 32 bytes into one, the one-attribute answer ran measurably
 * slower (docs/performance.md, "Pointer-attribute answers"): a call this
 * short is bound by how many fetch windows its path spans, which should
 * not depend on what the linker placed before it. */
#define PA_LINE_ALIGNED __attribute__((aligned(64)))

/* What the cache vouches for about one pointer. */
typedef enum { PA_PASS = 0, PA_NOT_CUDA, PA_REGION } pa_kind;

/* For PA_REGION, the region ([lo, hi), type, device) as the cache's
 * vouched answer has it (mh_cache_hit's). */
typedef mh_hit pa_view;

/* What a vouched answer of the cache says of p: memory in no allocation
 * (a gap: host memory, the hooks vouch), a region the hooks recorded whose
 * attributes are its own, or neither. */
static inline __attribute__((always_inline)) pa_kind hit_view(uint64_t p, const pa_view *v)
{
    /* (p's granule, not the region's first: an irregular range is marked
     * whole, so a pointer into one always finds its mark) */
    if (v->gap)
        return irregular(p) ? PA_PASS : PA_NOT_CUDA;
    if (v->origin != MEMHOOK_ORIGIN_HOOKS || v->device < 0 || irregular(p))
        return PA_PASS;
    if (v->type != MEMHOOK_MEMORY_CUDA && v->type != MEMHOOK_MEMORY_CUDA_MANAGED &&
        v->type != MEMHOOK_MEMORY_CUDA_HOST)
        return PA_PASS;
    return PA_REGION;
}

/* What the published map says of p, searched (mh_cache_classify): a
 * vouched region p is in, or no region while the hooks vouch for host
 * memory, as hit_view reads it.  Fills *v for PA_REGION. */
static inline __attribute__((always_inline)) pa_kind map_view(mh_cache *c, uint64_t p,
                                                              pa_view *v)
{
    mh_found_region f;
    int k = mh_cache_classify(c, p, p + 1, &f);
    if (k == MH_FOUND_ABSENT) {
        v->gap = true;
        return f.host_vouched ? hit_view(p, v) : PA_PASS;
    }
    if (k != MH_FOUND_IN || !f.vouched || f.r.origin != MEMHOOK_ORIGIN_HOOKS)
        return PA_PASS;
    /* (what hit_view and the answers read, no more) */
    v->lo = f.r.start;
    v->hi = f.r.end;
    v->device = f.r.device;
    v->type = f.r.type;
    v->gap = false;
    v->origin = MEMHOOK_ORIGIN_HOOKS;
    return hit_view(p, v);
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
        uint64_t lo = k == PA_REGION ? v->lo : p;
        uint64_t hi = k == PA_REGION ? v->hi : p + 1;
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
    if (__builtin_expect(!mh_cache_look_begin(c, &look), 0))
        return view_behind(c, p, v, &look);
    /* The map holds every event published before the call: the cache's
     * vouched answer, from the thread's memo where it holds one (a
     * pointer asked again).  What it does not vouch for is the driver's:
     * for one byte, mh_cache_hit fails exactly where map_view passes - p
     * in a region that is not vouched, or in none while the hooks do not
     * vouch for host memory (the coverage, the period, a lost write) - so
     * no second search. */
    if (__builtin_expect(mh_cache_hit_kept(c, p, p + 1, v), 1))
        return hit_view(p, v);
    return PA_PASS;
}

/* Attribute sets as bit masks: bit a for attribute a.  Bit 0 (no attribute
 * is 0) stands for whatever is never answered: an attribute above 31, an
 * output that is NULL. */
#define BIT(a) (1u << (a))
#define NEVER 1u
/* BIT(a) for every a below 32, as a table: the loop over a call's
 * attributes then needs no shift count in %cl, which the compiler pays for
 * with registers saved around the loop. */
#define B4(a) BIT(a), BIT((a) + 1), BIT((a) + 2), BIT((a) + 3)
#define B16(a) B4(a), B4((a) + 4), B4((a) + 8), B4((a) + 12)
static const uint32_t BIT_OF[32] = {B16(0), B16(16)};

static inline uint32_t bit_of(CUpointer_attribute a)
{
    return (unsigned)a < 32 ? BIT_OF[(unsigned)a] : NEVER;
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

/* The answerable attributes that cuda.h types 8 bytes wide (pointers,
 * sizes, the context); the others are 4 (the booleans as the driver writes
 * them, the memory type, the ordinal).  A mask, not a per-attribute switch:
 * a call asking for several attributes takes no indirect branch per
 * attribute, and no table load either. */
#define WIDE                                                                          \
    (BIT(CU_POINTER_ATTRIBUTE_CONTEXT) | BIT(CU_POINTER_ATTRIBUTE_DEVICE_POINTER) |   \
     BIT(CU_POINTER_ATTRIBUTE_HOST_POINTER) | BIT(CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) | \
     BIT(CU_POINTER_ATTRIBUTE_RANGE_SIZE))
_Static_assert(sizeof(CUcontext) == 8 && sizeof(CUdeviceptr) == 8 && sizeof(void *) == 8 &&
                   sizeof(size_t) == 8 && sizeof(unsigned int) == 4 && sizeof(int) == 4,
               "WIDE names the 8-byte outputs, the rest are 4");
/* Values are indexed by attribute modulo VALUES: every answerable
 * attribute has a slot of its own, and a caller that rewrites its own
 * attribute array while the call runs gets some value, not a read past the
 * table. */
#define VALUES 16
_Static_assert(((REGION_AT_MOST | NOT_CUDA_GETS) >> VALUES) == 0 &&
                   ((REGION_AT_MOST | NOT_CUDA_GETS) & NEVER) == 0,
               "every answered attribute has a slot");

/* The values cuPointerGetAttributes writes for memory in no allocation:
 * the same for every such pointer, so they are a constant. */
static const uint64_t NOT_CUDA_VALUES[VALUES] = {
    [CU_POINTER_ATTRIBUTE_CONTEXT] = 0,
    [CU_POINTER_ATTRIBUTE_MEMORY_TYPE] = 0,
    [CU_POINTER_ATTRIBUTE_IS_MANAGED] = 0,
    [CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL] = (uint32_t)CU_DEVICE_INVALID,
};

/* A region's values: the slots of REGION_AT_MOST, the only ones read for
 * a region (answer_gets skips every attribute the call did not ask for). */
static inline void region_values(const pa_view *v, uint64_t p, uint64_t out[VALUES])
{
    out[CU_POINTER_ATTRIBUTE_MEMORY_TYPE] =
        v->type == MEMHOOK_MEMORY_CUDA_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    out[CU_POINTER_ATTRIBUTE_DEVICE_POINTER] = p;
    out[CU_POINTER_ATTRIBUTE_HOST_POINTER] = p;
    out[CU_POINTER_ATTRIBUTE_IS_MANAGED] = v->type == MEMHOOK_MEMORY_CUDA_MANAGED;
    out[CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL] = (uint32_t)v->device;
    out[CU_POINTER_ATTRIBUTE_RANGE_START_ADDR] = v->lo;
    out[CU_POINTER_ATTRIBUTE_RANGE_SIZE] = v->hi - v->lo;
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
        return v->lo;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        return v->hi - v->lo;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        return 1;
    default:  /* DEVICE_POINTER, HOST_POINTER: the pointer itself */
        return p;
    }
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
    uint32_t mask =
        REGION_ATTRS |
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

/* What the cache says of p for a call asking `asked`, a set may_answer
 * allows: PA_PASS unless every attribute asked is answered (`not_cuda`:
 * the set answered for memory in no allocation).  Fills *v for
 * PA_REGION. */
static inline __attribute__((always_inline)) pa_kind decide(uint64_t p, uint32_t asked,
                                                            uint32_t not_cuda, pa_view *v)
{
    mh_hook_depth = 1;  /* (0 before: answering()) */
    pa_kind k = view_of(p, v);
    if (k == PA_NOT_CUDA && (asked & ~not_cuda) != 0)
        k = PA_PASS;
    else if (k == PA_REGION && !region_answers(v, asked))
        k = PA_PASS;
    mh_hook_depth = 0;
    return k;
}

PA_LINE_ALIGNED CUresult mh_w_cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                                     CUdeviceptr ptr)
{
    cuPointerGetAttribute_fn real_ = (cuPointerGetAttribute_fn)mh_next(MH_FN_cuPointerGetAttribute);
    if (real_ == NULL)
        return (CUresult)mh_unresolved(MH_FN_cuPointerGetAttribute);
    uint32_t asked = bit_of(attribute);
    if (!answering() || data == NULL || !may_answer(asked, NOT_CUDA_GET))
        return real_(data, attribute, ptr);
    pa_view v;
    pa_kind k = decide(ptr, asked, NOT_CUDA_GET, &v);
    if (k == PA_PASS)
        return real_(data, attribute, ptr);
    t_answered++;
    if (k == PA_NOT_CUDA)
        return CUDA_ERROR_INVALID_VALUE;  /* nothing written, as the driver */
    uint64_t value = value_of(&v, ptr, attribute);
    if (asked & WIDE)
        *(uint64_t *)data = value;
    else
        *(uint32_t *)data = (uint32_t)value;
    return CUDA_SUCCESS;
}

/* The set a cuPointerGetAttributes call asks, in one pass over both its
 * arrays: NEVER where an output is NULL or an attribute is above 31 (then
 * so is the OR of them all; the bit a % 32 it also sets is moot).  (The
 * NULL outputs are counted, in 64 bits: no count of at most 2^32 - 1 wraps
 * to 0.) */
static inline __attribute__((always_inline)) uint32_t
asked_of(unsigned int n, const CUpointer_attribute *attributes, void *const *data)
{
    uint32_t asked = 0, any = 0;
    uint64_t nulls = 0;
    for (unsigned int i = 0; i < n; i++) {
        uint32_t a = (uint32_t)attributes[i];
        any |= a;
        asked |= BIT_OF[a % 32];
        nulls += data[i] == NULL;
    }
    return asked | ((any >> 5) != 0 || nulls != 0 ? NEVER : 0u);
}

/* The answer to a cuPointerGetAttributes whose set may_answer allows:
 * every output written (but RANGE_* of memory in no allocation), or the
 * real call, the outputs untouched.  Out of line, so that a set no
 * pointer can be answered for (the runtime's) is passed on by a wrapper
 * with no frame for the view and the values and two registers to save,
 * not six. */
static PA_LINE_ALIGNED __attribute__((noinline)) CUresult
answer_gets(cuPointerGetAttributes_fn real_, unsigned int n, CUpointer_attribute *attributes,
            void **data, CUdeviceptr ptr, uint32_t asked)
{
    pa_view v;
    pa_kind k = decide(ptr, asked, NOT_CUDA_GETS, &v);
    if (k == PA_PASS)
        return real_(n, attributes, data, ptr);
    uint64_t region[VALUES];
    const uint64_t *values = NOT_CUDA_VALUES;
    uint32_t skip = ~asked | RANGE_OF_NO_ALLOCATION;
    if (k == PA_REGION) {
        region_values(&v, ptr, region);
        values = region;
        skip = ~asked;
    }
    /* Each attribute is read again: one a caller rewrites meanwhile (its
     * own race) is skipped unless it is one more asked, whose value is
     * there - never a slot not written, never one past the table. */
    for (unsigned int i = 0; i < n; i++) {
        uint32_t a = (uint32_t)attributes[i] % VALUES;
        if ((skip >> a) & 1u)
            continue;
        if ((WIDE >> a) & 1u)
            *(uint64_t *)data[i] = values[a];
        else
            *(uint32_t *)data[i] = (uint32_t)values[a];
    }
    t_answered++;
    return CUDA_SUCCESS;
}

PA_LINE_ALIGNED CUresult mh_w_cuPointerGetAttributes(unsigned int numAttributes,
                                                      CUpointer_attribute *attributes, void **data,
                                                      CUdeviceptr ptr)
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
    uint32_t asked = asked_of(numAttributes, attributes, data);
    if (!may_answer(asked, NOT_CUDA_GETS))
        return real_(numAttributes, attributes, data, ptr);
    return answer_gets(real_, numAttributes, attributes, data, ptr, asked);
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
PA_LINE_ALIGNED cudaError_t
mh_w_cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
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
