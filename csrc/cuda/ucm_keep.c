/*
 * ucm_keep.c - feed-only hooks on UCX's CUDA entry points, left in place by
 * memhook's hand-back when UCX cannot install hooks of its own.
 *
 * memhook fed UCX (ucm_feed.c) and uninstalls: UCX is asked to install its
 * own hooks on the entries memhook just restored.  UCX's bistro can refuse
 * (its far jump, when its CUDA module lies past a rel32 jump's reach of
 * the driver, needs more of the prologue than its decoder moves), and a
 * UCX that patched some entries before refusing the next gives up on all
 * of them.  Leaving then would leave UCX's memory-type cache blind for the
 * rest of the process.  So memhook patches each of UCX's entry points that
 * UCX left as it was with a hook of this file: it calls the original (the
 * bistro trampoline) and dispatches UCX's MEM_TYPE event, as memhook's
 * wrappers did while installed - and records nothing of memhook's.  An
 * entry UCX did patch keeps UCX's hook (feeding it too would send UCX every
 * call there twice), for good: from then on UCX is fed at the entries
 * only, memhook installed or not, and memhook's install puts each hook of
 * this file behind its wrapper instead of taking it out (ucm_keep.h).  An
 * entry where memhook's own patch could not leave
 * (another patcher's jump is over it) still leads into memhook's wrapper,
 * which passes the calls on unrecorded: the hook goes between the wrapper
 * and its trampoline instead.  The list is UCX 1.22's own (libucm_cuda's
 * driver hooks), by name: a driver without one of them has nothing to
 * keep there.
 *
 * The hooks go in through bistro's live-write protocol, like memhook's
 * own, so threads may be calling the entries meanwhile; one whose patch
 * cannot go in is named in status() as blind for UCX.  They come out when
 * memhook installs again (its wrappers feed UCX then), through the same
 * protocol; one another patcher wrote over stays, with its trampoline,
 * and only passes calls on (the bytes under the other's jump are never
 * restored over it).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cuda_signatures.h"
#include "log.h"
#include "mh_sonames.h"
#include "reloc.h"
#include "ucm_feed.h"
#include "ucm_keep.h"

/* Not in memhook's table (no CUDA release has it; UCX asks for it anyway). */
typedef CUresult (*cuMemFreeHost_v2_fn)(void *p);

#define KEEP_ENTRIES(X)                                                                      \
    X(cuMemAlloc) X(cuMemAlloc_v2) X(cuMemAllocManaged) X(cuMemAllocPitch)                   \
    X(cuMemAllocPitch_v2) X(cuMemMap) X(cuModuleGetGlobal_v2) X(cuMemAllocAsync)             \
    X(cuMemAllocFromPoolAsync) X(cuLibraryGetGlobal) X(cuMemFree) X(cuMemFree_v2)            \
    X(cuMemFreeHost) X(cuMemFreeHost_v2) X(cuMemUnmap) X(cuMemFreeAsync)

enum {
#define X(name) K_##name,
    KEEP_ENTRIES(X)
#undef X
    K_COUNT
};

/* Where each kept hook goes on: the trampoline bistro hands back (written
 * before the patch goes live).  Process-wide: the entries are. */
static void *g_next[K_COUNT];
/* Whether the kept hooks dispatch: off once memhook's wrappers feed UCX
 * again, so a kept hook that could not come out never sends a call twice. */
static int g_feeding;

static bool feeding(void) { return __atomic_load_n(&g_feeding, __ATOMIC_ACQUIRE) != 0; }

#define NEXT(name) ((name##_fn)__atomic_load_n(&g_next[K_##name], __ATOMIC_ACQUIRE))

/* An allocation: the event after the call, before the caller has the
 * pointer (as memhook's wrappers and UCX's own hooks send it). */
#define KEEP_ALLOC(name, params, args, addr_expr, size_expr, mem_type)          \
    static CUresult keep_##name params                                          \
    {                                                                           \
        CUresult r_ = NEXT(name) args;                                          \
        if (r_ == CUDA_SUCCESS && feeding())                                    \
            mh_ucm_alloc((uint64_t)(addr_expr), (uint64_t)(size_expr), mem_type); \
        return r_;                                                              \
    }

/* The size of the allocation at addr, from the driver, or 0. */
static uint64_t driver_size(uint64_t addr)
{
    uint64_t base = 0, size = 0;
    return mh_driver_range(addr, &base, &size) && base == addr ? size : 0;
}

/* A free: the event before the call (UCX's cache never holds a range the
 * driver may hand out again), the allocation again if the driver refused. */
#define KEEP_FREE(name, params, args, addr_expr, given, mem_type)               \
    static CUresult keep_##name params                                          \
    {                                                                           \
        uint64_t a_ = (uint64_t)(addr_expr), s_ = (given);                      \
        bool fed_ = a_ != 0 && feeding();                                       \
        if (fed_) {                                                             \
            if (s_ == 0)                                                        \
                s_ = driver_size(a_);                                           \
            mh_ucm_free(a_, s_, mem_type);                                      \
        }                                                                       \
        CUresult r_ = NEXT(name) args;                                          \
        if (fed_ && r_ != CUDA_SUCCESS)                                         \
            mh_ucm_alloc(a_, s_, mem_type);                                     \
        return r_;                                                              \
    }

KEEP_ALLOC(cuMemAlloc, (CUdeviceptr_v1 *p, unsigned int n), (p, n), *p, n, MEMHOOK_MEM_CUDA)
KEEP_ALLOC(cuMemAlloc_v2, (CUdeviceptr *p, size_t n), (p, n), *p, n, MEMHOOK_MEM_CUDA)
KEEP_ALLOC(cuMemAllocManaged, (CUdeviceptr *p, size_t n, unsigned int f), (p, n, f), *p, n,
           MEMHOOK_MEM_CUDA_MANAGED)
KEEP_ALLOC(cuMemAllocPitch,
           (CUdeviceptr_v1 *p, unsigned int *pitch, unsigned int w, unsigned int h,
            unsigned int e),
           (p, pitch, w, h, e), *p, (uint64_t)*pitch * h, MEMHOOK_MEM_CUDA)
KEEP_ALLOC(cuMemAllocPitch_v2,
           (CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int e),
           (p, pitch, w, h, e), *p, (uint64_t)*pitch * h, MEMHOOK_MEM_CUDA)
KEEP_ALLOC(cuMemAllocAsync, (CUdeviceptr *p, size_t n, CUstream s), (p, n, s), *p, n,
           MEMHOOK_MEM_CUDA)
/* (an explicit pool may be host-located: UCX asks the driver) */
KEEP_ALLOC(cuMemAllocFromPoolAsync, (CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s),
           (p, n, pool, s), *p, n, MEMHOOK_MEM_UNKNOWN)
KEEP_FREE(cuMemFree, (CUdeviceptr_v1 p), (p), p, 0, MEMHOOK_MEM_CUDA)
KEEP_FREE(cuMemFree_v2, (CUdeviceptr p), (p), p, 0, MEMHOOK_MEM_CUDA)
KEEP_FREE(cuMemFreeHost, (void *p), (p), (uintptr_t)p, 0, MEMHOOK_MEM_CUDA_HOST)
KEEP_FREE(cuMemFreeHost_v2, (void *p), (p), (uintptr_t)p, 0, MEMHOOK_MEM_CUDA_HOST)
KEEP_FREE(cuMemUnmap, (CUdeviceptr p, size_t n), (p, n), p, n, MEMHOOK_MEM_UNKNOWN)
KEEP_FREE(cuMemFreeAsync, (CUdeviceptr p, CUstream s), (p, s), p, 0, MEMHOOK_MEM_CUDA)

/* A map is an allocation of its range, typed by where its handle's memory
 * lives (as memhook's wrapper types it). */
static CUresult keep_cuMemMap(CUdeviceptr p, size_t n, size_t off,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = NEXT(cuMemMap)(p, n, off, handle, flags);
    if (r == CUDA_SUCCESS && feeding()) {
        int mem_type = MEMHOOK_MEM_UNKNOWN, device = -1;
        mh_handle_kind(handle, &mem_type, &device);
        mh_ucm_alloc(p, n, mem_type);
    }
    return r;
}

/* A module or library global; a NULL dptr asks for the size only. */
#define KEEP_GLOBAL(name, handle_t)                                                   \
    static CUresult keep_##name(CUdeviceptr *p, size_t *bytes, handle_t h, const char *n) \
    {                                                                                 \
        size_t own = 0;                                                               \
        size_t *sizep = bytes != NULL || p == NULL ? bytes : &own;                    \
        CUresult r = NEXT(name)(p, sizep, h, n);                                      \
        if (r == CUDA_SUCCESS && p != NULL && feeding())                              \
            mh_ucm_alloc(*p, *sizep, MEMHOOK_MEM_CUDA);                               \
        return r;                                                                     \
    }
KEEP_GLOBAL(cuModuleGetGlobal_v2, CUmodule)
KEEP_GLOBAL(cuLibraryGetGlobal, CUlibrary)

typedef enum keep_state {
    KEEP_NONE = 0,  /* not noted, or absent from the driver */
    KEEP_NOTED,     /* noted before UCX tried */
    KEEP_ON,        /* memhook's feed-only hook is at the entry */
    KEEP_PASS,      /* memhook's own jump stayed: its wrapper passes calls to the hook */
    KEEP_UCX,       /* UCX patched the entry before refusing another */
    KEEP_FAILED,    /* UCX refused and memhook's hook could not go in */
    KEEP_STUCK,     /* the hook could not come out: it passes calls on */
} keep_state;

#define KEEP_BYTES 16

/* The entries (attach lock, ucm_feed.c). */
static struct keep_entry {
    const char *name;
    void *hook;
    keep_state state;
    void *at;
    uint8_t noted[KEEP_BYTES];
    memhook_bistro_patch *patch;  /* KEEP_ON, KEEP_STUCK */
    mh_hook *row;                 /* KEEP_PASS */
    bool overwritten;             /* KEEP_PASS: another patcher's jump is over memhook's */
    bool ucx_owned;               /* UCX patched it once: UCX never takes its hooks out */
    char why[256];
} g_keep[K_COUNT] = {
#define X(fn) [K_##fn] = {.name = #fn, .hook = (void *)keep_##fn},
    KEEP_ENTRIES(X)
#undef X
};
static int g_ucx_status; /* what UCX answered at the hand-back that kept hooks */

static void note(struct keep_entry *k, void *lib)
{
    int i = (int)(k - g_keep);
    k->state = KEEP_NONE;
    k->at = lib != NULL ? mh_real_dlsym(lib, k->name) : NULL;
    k->why[0] = '\0';
    for (int j = 0; j < i && k->at != NULL; j++)
        if (g_keep[j].at == k->at)
            k->at = NULL;  /* one code, two names: patched once, by the first */
    if (k->at != NULL) {
        memcpy(k->noted, k->at, KEEP_BYTES);
        k->state = KEEP_NOTED;
    }
}

void mh_ucm_keep_note(void)
{
    void *lib = mh_real_dlopen(MH_LIBCUDA_SONAME, RTLD_LAZY | RTLD_NOLOAD);
    for (int i = 0; i < K_COUNT; i++)
        if (g_keep[i].state != KEEP_STUCK)  /* ours, under another's patch: left there */
            note(&g_keep[i], lib);
    if (lib != NULL)
        mh_real_dlclose(lib);
    (void)dlerror();
}

/* memhook's row of k's function whose patch the uninstall could not take
 * out (a thread blocked the live-write protocol's signals, or another
 * patcher's jump is over memhook's), or NULL.  Its wrapper still gets the
 * calls and, recording nothing, passes them to the row's trampoline:
 * the feed-only hook goes in between (install lock held). */
static mh_hook *stayed_row(const struct keep_entry *k)
{
    for (int f = 0; f < MH_FN_COUNT; f++) {
        mh_hook *h = &mh_hooks[f];
        if (h->patch != NULL && h->patched_at == k->at && strcmp(h->name, k->name) == 0 &&
            __atomic_load_n(&h->trampoline, __ATOMIC_ACQUIRE) != NULL)
            return h;
    }
    return NULL;
}

static void pass_through_hook(struct keep_entry *k, mh_hook *h)
{
    int i = (int)(k - g_keep);
    void *next = __atomic_load_n(&h->trampoline, __ATOMIC_ACQUIRE);
    if (next != k->hook)  /* (spliced once only: the hook would call itself) */
        __atomic_store_n(&g_next[i], next, __ATOMIC_RELEASE);
    __atomic_store_n(&h->trampoline, k->hook, __ATOMIC_RELEASE);
    k->row = h;
    k->overwritten = !memhook_bistro_patch_intact(h->patch);
    k->state = KEEP_PASS;
}

/* Give each entry of who[0..n) a feed-only hook: between memhook's row and
 * its trampoline where memhook's patch is at the entry (its wrapper gets
 * every call there), else a patch of its own.  Returns how many are fed. */
static int place(const int *who, int n)
{
    memhook_bistro_request req[K_COUNT];
    int at[K_COUNT], m = 0, fed = 0;
    for (int j = 0; j < n; j++) {
        struct keep_entry *k = &g_keep[who[j]];
        mh_hook *h = stayed_row(k);
        if (h != NULL) {
            pass_through_hook(k, h);
            fed++;
            continue;
        }
        req[m] = (memhook_bistro_request){.target = k->at, .hook = k->hook,
                                          .original = &g_next[who[j]]};
        at[m++] = who[j];
    }
    memhook_bistro_install_batch(req, (size_t)m);
    for (int j = 0; j < m; j++) {
        struct keep_entry *k = &g_keep[at[j]];
        if (req[j].err == 0) {
            k->patch = req[j].patch;
            k->state = KEEP_ON;
            fed++;
        } else {
            k->state = KEEP_FAILED;
            snprintf(k->why, sizeof k->why, "%s", req[j].why);
            mh_warn("ucm: UCX gets no events from %s: UCX could not hook it (status %d) and "
                    "neither could memhook: %s", k->name, g_ucx_status, req[j].why);
        }
    }
    return fed;
}

/* Right after UCX refused: an entry whose bytes changed since they were
 * noted was patched by UCX; every other noted entry gets a feed-only hook.
 * Returns how many it fed. */
static int keep_noted(void)
{
    int who[K_COUNT], n = 0;
    for (int i = 0; i < K_COUNT; i++) {
        struct keep_entry *k = &g_keep[i];
        if (k->state != KEEP_NOTED)
            continue;
        if (k->ucx_owned || memcmp(k->noted, k->at, KEEP_BYTES) != 0) {
            k->state = KEEP_UCX;
            k->ucx_owned = true;
        } else {
            who[n++] = i;
        }
    }
    return place(who, n);
}

int mh_ucm_keep_install(int ucx_status)
{
    g_ucx_status = ucx_status;
    int kept = keep_noted();
    __atomic_store_n(&g_feeding, kept > 0, __ATOMIC_RELEASE);
    return kept;
}

int mh_ucm_keep_refresh(void)
{
    void *lib = mh_real_dlopen(MH_LIBCUDA_SONAME, RTLD_LAZY | RTLD_NOLOAD);
    int freed = 0;
    for (int i = 0; i < K_COUNT; i++) {
        struct keep_entry *k = &g_keep[i];
        /* the uninstall took memhook's patch out after all (and the hook
         * with it, from the row): the entry is the driver's again */
        if (k->state == KEEP_PASS && k->row->patch == NULL) {
            note(k, lib);
            freed++;
        }
    }
    if (lib != NULL)
        mh_real_dlclose(lib);
    (void)dlerror();
    return freed > 0 ? keep_noted() : 0;
}

/* Take the feed-only patches of who[0..n) out; an entry whose patch came
 * out is in state `out` after. */
static void unpatch(memhook_bistro_patch **patches, const int *who, int n, keep_state out)
{
    int errs[K_COUNT];
    memhook_bistro_remove_batch(patches, errs, (size_t)n);
    for (int m = 0; m < n; m++) {
        struct keep_entry *k = &g_keep[who[m]];
        if (errs[m] == 0 || errs[m] == EINVAL) {
            k->state = out;
            k->patch = NULL;
            continue;
        }
        /* EBUSY: another patcher's jump is over ours and its trampoline
         * leads into our hook, which stays in that patcher's chain; EAGAIN
         * or a refused mprotect: ours stays whole.  memhook's own install
         * then finds the entry taken and says so in its row. */
        k->state = KEEP_STUCK;
        snprintf(k->why, sizeof k->why, "%s", strerror(errs[m]));
        mh_warn("ucm: the feed-only hook on %s could not come out (%s); it %s", k->name,
                strerror(errs[m]),
                feeding() ? "still feeds UCX the calls that reach it" : "passes calls on");
    }
}

bool mh_ucm_keep_beside(void)
{
    for (int i = 0; i < K_COUNT; i++)
        if (g_keep[i].ucx_owned)
            return true;
    return false;
}

void mh_ucm_keep_lift(void)
{
    memhook_bistro_patch *patches[K_COUNT];
    int who[K_COUNT], n = 0;
    for (int i = 0; i < K_COUNT; i++)
        if (g_keep[i].state == KEEP_ON) {
            patches[n] = g_keep[i].patch;
            who[n++] = i;
        }
    /* (the entry is the driver's again: noted, as before UCX was asked) */
    unpatch(patches, who, n, KEEP_NOTED);
}

int mh_ucm_keep_settle(void)
{
    int who[K_COUNT], n = 0;
    for (int i = 0; i < K_COUNT; i++) {
        struct keep_entry *k = &g_keep[i];
        /* a row memhook's uninstall took out took the spliced hook with it */
        bool unspliced = k->state == KEEP_PASS && k->row->patch == NULL;
        if (k->state == KEEP_NOTED || k->state == KEEP_FAILED || unspliced) {
            k->row = NULL;
            who[n++] = i;
        }
    }
    return place(who, n);
}

void mh_ucm_keep_drop(void)
{
    __atomic_store_n(&g_feeding, 0, __ATOMIC_RELEASE);
    memhook_bistro_patch *patches[K_COUNT];
    int who[K_COUNT], n = 0;
    for (int i = 0; i < K_COUNT; i++) {
        struct keep_entry *k = &g_keep[i];
        if (k->state == KEEP_ON) {
            patches[n] = k->patch;
            who[n++] = i;
            continue;
        }
        if (k->state == KEEP_PASS) {
            /* the row's wrapper calls its trampoline again directly */
            void *hook = k->hook;
            __atomic_compare_exchange_n(&k->row->trampoline, &hook,
                                        __atomic_load_n(&g_next[i], __ATOMIC_ACQUIRE), false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            k->row = NULL;
        }
        if (k->state != KEEP_STUCK)
            k->state = KEEP_NONE;
    }
    unpatch(patches, who, n, KEEP_NONE);
}

/* While memhook is installed beside UCX's own hooks (the hand-back left
 * UCX some entries): who gives UCX its events at this entry. */
static bool installed_reason(const struct keep_entry *k, char *why, size_t why_len)
{
    switch (k->state) {
    case KEEP_UCX:
        snprintf(why, why_len,
                 "UCX's own hook is at this entry (UCX patched it when memhook handed its hooks "
                 "back, then refused another of its entry points, status %d): UCX's "
                 "memory-type events for these calls come from that hook, none from memhook",
                 g_ucx_status);
        return true;
    case KEEP_PASS:
        snprintf(why, why_len,
                 "UCX has no hook of its own here (it hooked some of its entry points when "
                 "memhook handed them back, then refused another, status %d): memhook's "
                 "feed-only hook, behind memhook's wrapper, dispatches UCX's memory-type "
                 "events for every call through this entry", g_ucx_status);
        return true;
    case KEEP_ON:
        snprintf(why, why_len,
                 "UCX has no hook of its own here (it hooked some of its entry points when "
                 "memhook handed them back, then refused another, status %d): memhook's "
                 "feed-only hook stays at this entry and dispatches UCX's memory-type events",
                 g_ucx_status);
        return true;
    default:
        return false;  /* (a failed or stuck hook: said as when uninstalled) */
    }
}

bool mh_ucm_keep_reason(const char *name, bool installed, char *why, size_t why_len)
{
    for (int i = 0; i < K_COUNT; i++) {
        const struct keep_entry *k = &g_keep[i];
        if (strcmp(k->name, name) != 0)
            continue;
        if (installed && installed_reason(k, why, why_len))
            return true;
        switch (k->state) {
        case KEEP_ON:
            snprintf(why, why_len,
                     "uninstalled, but still patched for UCX: UCX could not install its own "
                     "CUDA hooks when memhook handed them back (status %d), so a feed-only "
                     "hook stays here and dispatches UCX's memory-type events (memhook "
                     "records nothing); %s", g_ucx_status,
                     mh_ucm_keep_beside()
                         ? "UCX's own hooks stay at some of its other entry points, so "
                           "install() keeps feeding UCX from this entry (behind memhook's "
                           "wrapper where bistro patches it)"
                         : "install() takes it out again");
            return true;
        case KEEP_PASS:
            snprintf(why, why_len,
                     "uninstalled, but still patched for UCX: %s, and UCX could not install "
                     "its own CUDA hooks (status %d), so memhook's wrapper here dispatches "
                     "UCX's memory-type events only (memhook records nothing)",
                     k->overwritten ? "another library patched over memhook's jump here "
                                      "(restoring would erase its patch)"
                                    : "memhook's jump could not be taken out here",
                     g_ucx_status);
            return true;
        case KEEP_UCX:
            snprintf(why, why_len,
                     "UCX's own hook is at this entry (UCX patched it, then refused another "
                     "of its entry points, status %d)", g_ucx_status);
            return true;
        case KEEP_FAILED:
            snprintf(why, why_len,
                     "UCX gets no events from this entry: UCX could not hook it (status %d) "
                     "and neither could memhook's feed-only hook: %.150s", g_ucx_status, k->why);
            return true;
        case KEEP_STUCK:
            snprintf(why, why_len,
                     "memhook's feed-only hook for UCX could not come out (%.60s): it stays "
                     "under the entry's patch and %s", k->why,
                     feeding() ? "dispatches UCX's events for the calls that reach it"
                               : "passes calls on while memhook is installed");
            return true;
        default:
            return false;
        }
    }
    return false;
}
