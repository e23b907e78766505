/*
 * install.c - putting the wrappers in place with bistro and reloc,
 * switching modes, and saying which mechanism covers each function.
 *
 * Switching installs the new mechanisms before removing the old ones, so a
 * call made during the switch is always recorded by one of them.  Every
 * mechanism routes to the same wrapper, and the wrapper calls bistro's
 * trampoline when the entry is patched (calling the entry itself would
 * come straight back), else the real definition: a call that reaches the
 * wrapper through both a GOT slot and a patched entry is still one call.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "caller.h"
#include "mh_objects.h"
#include "cuda_hooks.h"
#include "log.h"
#include "mh_sonames.h"
#include "queue.h"
#include "reloc.h"
#include "ucm_feed.h"

static void cache_period_end(void);
static void cache_coverage_update(unsigned mode, bool new_period);

MH_HOT int mh_recording;

/* Install state: one set of hooks per process, changed under g_lock. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork(): g_lock is first in the lock order (csrc/core/mh_lock_order.h),
 * so its prepare runs first and its parent/child handlers last
 * (fork_order.c registers every module's handlers at load).  The child
 * makes the lock afresh: it starts between two install operations.  A
 * fork() from code run under g_lock (a libcuda constructor during
 * install's dlopen) would deadlock in prepare; memhook runs no other code
 * there. */
void mh_install_fork_prepare(void) { pthread_mutex_lock(&g_lock); }
void mh_install_fork_parent(void) { pthread_mutex_unlock(&g_lock); }
void mh_install_fork_child(void) { pthread_mutex_init(&g_lock, NULL); }

static void install_lock(void) { pthread_mutex_lock(&g_lock); }
static unsigned g_mode;
static bool g_reloc_on;
static char g_reloc_why[256];
/* Was libcuda loaded when reloc went in?  Then objects may hold driver
 * pointers they resolved before, which reloc cannot see through. */
static bool g_driver_before_reloc;
/* Was the driver already initialised when hooks went in (from mode none)?
 * Then it may hold allocations no hook saw - pinned host memory above all,
 * which looks like any other host memory in /proc/self/maps - so a pointer
 * in no known region cannot be vouched for as HOST, ever again in this
 * process: memory_type asks the driver instead. */
static bool g_driver_used_unseen;
/* Have the hooks stopped recording since load?  Then a start puts a gap
 * marker in the event order too (hooks_gap). */
static bool g_stopped_once;

/* Recording stopped (`stopping`) or starts again after a stop, under
 * g_lock.  While no hook records, the program frees, unregisters and
 * closes memory unseen, and the addresses come back as other allocations:
 * nothing the consumers learned before - a region the hooks recorded, an
 * answer the driver gave - can be vouched for after.  The live table
 * dates its records by generation (live_table.c); the consumers get one
 * marker in the event order (MEMHOOK_EVENT_HOOKS_GAP) and distrust what
 * they knew before it.  Why one at the stop: every event recorded until
 * then comes out before it, including ALLOCs not yet drained.  Why one
 * more at the restart: a call that began recording before the stop and
 * returned after it publishes its event after the stop's marker (the
 * epoch it reads is the marker's); the restart's marker is after it,
 * unless its thread stayed preempted across the whole gap. */
static void hooks_gap(bool stopping)
{
    if (stopping)
        g_stopped_once = true;
    else if (!g_stopped_once)
        return;  /* the first start: nothing was recorded, so nothing is stale */
    mh_emit_marker(MEMHOOK_EVENT_HOOKS_GAP);
}

/* libcuda.so.1 when this process has it loaded (a reference: give it back
 * with dlclose), else NULL.  memhook's own probes and lookups must not
 * leave an error behind for a caller's dlerror(): the API functions below
 * end with dl_clear (a wrapper of the dl functions themselves leaves what
 * the real call left: csrc/reloc/interpose_dl.c). */
static void *loaded_driver(void) { return mh_real_dlopen(MH_LIBCUDA_SONAME, RTLD_LAZY | RTLD_NOLOAD); }
static void dl_clear(void) { (void)dlerror(); }

static bool driver_initialised(void)
{
    void *h = loaded_driver();
    if (h == NULL)
        return false;
    typedef CUresult (*count_fn)(int *);
    count_fn count = (count_fn)mh_real_dlsym(h, "cuDeviceGetCount");
    int n = 0;
    mh_hook_depth++;  /* our own query: nothing it reaches is recorded */
    bool used = count != NULL && count(&n) == CUDA_SUCCESS;  /* NOT_INITIALIZED before cuInit */
    mh_hook_depth--;
    mh_real_dlclose(h);
    return used;
}
/* bistro's reference on libcuda.so.1, kept for the life of the process:
 * callers may hold wrappers that call into it. */
static void *g_libcuda;
static char g_libcuda_error[200];

static const char *loaded_driver_path(void *handle, const char *any_symbol, char *buf, size_t n)
{
    Dl_info info;
    void *sym = handle ? mh_real_dlsym(handle, any_symbol) : NULL;
    snprintf(buf, n, "%s", sym && dladdr(sym, &info) && info.dli_fname ? info.dli_fname
                                                                     : MH_LIBCUDA_SONAME);
    return buf;
}

/* A pointer-attribute row while pointer attributes are off: not routed to
 * memhook (pointer_attributes.c). */
static bool answers_off(const mh_hook *h)
{
    return h->kind == MEMHOOK_EVENT_NONE && !memhook_hooks_pointer_attributes();
}

#define ANSWERS_OFF_REASON                                                          \
    "pointer attributes are off (MEMHOOK_POINTER_ATTRIBUTES=1 or "                  \
    "install(pointer_attributes=True) routes this call to memhook)"

/* Whether h's entry needs a patch; fills *req then.  `asked` holds the
 * entries already asked for in this pass (two names, one code). */
static bool bistro_want_one(mh_hook *h, void *lib, const char *lib_path, void *const *asked,
                            int nasked, memhook_bistro_request *req)
{
    const char *fallback = mh_fallback_name(h);
    void *addr = mh_real_dlsym(lib, h->name);
    const char *via = h->name;
    if (addr == NULL && fallback != NULL) {
        addr = mh_real_dlsym(lib, fallback);
        via = fallback;
    }
    if (addr == NULL) {
        snprintf(h->reason, sizeof h->reason, "%.200s does not export %s", lib_path, h->name);
        return false;
    }
    if (h->patch != NULL && h->patched_at == addr)
        return false;  /* already in place */
    if (via != h->name && memhook_hook_index(via) >= 0) {
        __atomic_store_n(&h->resolved, addr, __ATOMIC_RELEASE);
        snprintf(h->reason, sizeof h->reason,
                 "%.160s does not export %s; bistro patches its older spelling %s in its own row",
                 lib_path, h->name, via);
        return false;
    }
    for (int i = 0; i < MH_FN_COUNT; i++) {
        bool same = &mh_hooks[i] != h && mh_hooks[i].patch != NULL &&
                    mh_hooks[i].patched_at == addr;
        for (int k = 0; k < nasked && !same; k++)
            same = asked[k] == addr && &mh_hooks[i] != h;
        if (same) {
            __atomic_store_n(&h->resolved, addr, __ATOMIC_RELEASE);
            snprintf(h->reason, sizeof h->reason,
                     "%.60s is the same code as %.60s, which bistro patched", h->name,
                     mh_hooks[i].name);
            return false;
        }
    }
    __atomic_store_n(&h->resolved, addr, __ATOMIC_RELEASE);
    *req = (memhook_bistro_request){.target = addr, .hook = h->wrapper,
                                    .original = &h->trampoline};
    return true;
}

static void bistro_done_one(mh_hook *h, const memhook_bistro_request *req)
{
    int rc = req->err;
    h->bistro_errno = rc;
    if (rc == 0) {
        h->patch = req->patch;
        h->patched_at = req->target;
        h->reason[0] = '\0';
    } else {
        h->patch = NULL;
        __atomic_store_n(&h->trampoline, NULL, __ATOMIC_RELEASE);
        /* the engine's reason already starts with "bistro: " */
        const char *what = strncmp(req->why, "bistro: ", 8) == 0 ? req->why + 8 : req->why;
        snprintf(h->reason, sizeof h->reason, "bistro: %.250s (%.40s)", what, strerror(rc));
        mh_info("bistro could not patch %s: %s", h->name, req->why);
    }
}

/* Returns 0, or the first errno when bistro is alone and patched nothing.
 * Every entry goes in through one pass of bistro's live-write protocol. */
static int bistro_apply(bool alone, char *why, size_t why_len)
{
    if (g_libcuda == NULL) {
        g_libcuda = mh_real_dlopen(MH_LIBCUDA_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (g_libcuda == NULL) {
            const char *e = dlerror();
            snprintf(g_libcuda_error, sizeof g_libcuda_error, "%s", e ? e : "not found");
        }
    }
    char path[512];
    loaded_driver_path(g_libcuda, "cuInit", path, sizeof path);
    static memhook_bistro_request req[MH_FN_COUNT]; /* install lock; too big for the stack */
    static void *asked[MH_FN_COUNT];
    int who[MH_FN_COUNT], nreq = 0;
    for (int i = 0; i < MH_FN_COUNT; i++) {
        mh_hook *h = &mh_hooks[i];
        if (h->api != MEMHOOK_API_DRIVER || answers_off(h))
            continue;
        if (g_libcuda == NULL) {
            snprintf(h->reason, sizeof h->reason, "bistro: " MH_LIBCUDA_SONAME " cannot be loaded (%.200s)",
                     g_libcuda_error);
            continue;
        }
        if (bistro_want_one(h, g_libcuda, path, asked, nreq, &req[nreq])) {
            asked[nreq] = req[nreq].target;
            who[nreq++] = i;
        }
    }
    memhook_bistro_install_batch(req, (size_t)nreq);
    for (int k = 0; k < nreq; k++)
        bistro_done_one(&mh_hooks[who[k]], &req[k]);
    int tried = 0, patched = 0, first_errno = 0;
    const char *first_reason = NULL;
    for (int i = 0; i < MH_FN_COUNT; i++) {
        mh_hook *h = &mh_hooks[i];
        /* (whether bistro works is judged by the rows that record events) */
        if (h->api != MEMHOOK_API_DRIVER || g_libcuda == NULL || h->kind == MEMHOOK_EVENT_NONE)
            continue;
        if (h->patch != NULL) {
            patched++;
            tried++;
        } else if (h->bistro_errno != 0) {
            tried++;
            if (first_errno == 0) {
                first_errno = h->bistro_errno;
                first_reason = h->reason;
            }
        }
    }
    if (alone && tried > 0 && patched == 0) {
        snprintf(why, why_len, "bistro could not patch any driver entry point of %.160s: %.300s", path,
                 first_reason ? first_reason : "?");
        return first_errno;
    }
    return 0;
}

/* All patches out in one pass (`answers_only`: those of the
 * pointer-attribute rows, pointer attributes being off).  One that stays
 * (EAGAIN: a thread blocks SIGTRAP or the probe signal; or a refused
 * mprotect) keeps its row: the wrapper passes calls through while nothing
 * is recorded, and a later install finds it in place.
 *
 * EBUSY: another patcher wrote its jump over ours after memhook installed
 * (bistro.h).  Its trampoline holds our jump, relocated, so its hook still
 * leads into our wrapper; putting back the bytes memhook saw before would
 * erase its jump and leave its trampoline returning into the middle of
 * what we wrote.  So nothing is written: our jump and trampoline stay under
 * its patch, the row keeps them (the wrapper, recording nothing once
 * uninstalled, calls our trampoline, the original code), and status() says
 * so (bistro_overwritten); docs/design/ucx-coexistence.md has the argument. */
static void bistro_remove(bool answers_only)
{
    memhook_bistro_patch *patches[MH_FN_COUNT];
    int errs[MH_FN_COUNT], who[MH_FN_COUNT], n = 0;
    for (int i = 0; i < MH_FN_COUNT; i++) {
        mh_hook *h = &mh_hooks[i];
        if (answers_only && h->kind != MEMHOOK_EVENT_NONE)
            continue;
        if (h->patch == NULL) {
            h->bistro_errno = 0;
            h->reason[0] = '\0';
            continue;
        }
        patches[n] = h->patch;
        who[n++] = i;
    }
    memhook_bistro_remove_batch(patches, errs, (size_t)n);
    for (int k = 0; k < n; k++) {
        mh_hook *h = &mh_hooks[who[k]];
        int rc = errs[k];
        if (rc == EBUSY) {
            mh_warn("bistro: %s was patched over by another library after memhook; memhook's "
                    "jump stays under it (its trampoline leads into memhook's), so nothing "
                    "is restored", h->name);
            continue;
        }
        if (rc != 0)
            mh_warn("bistro: restoring %s failed: %s", h->name, strerror(rc));
        if (rc == 0 || rc == EINVAL) {
            h->patch = NULL;
            h->patched_at = NULL;
            /* A thread that already loaded the trampoline may still run it:
             * trampolines stay mapped. */
            __atomic_store_n(&h->trampoline, NULL, __ATOMIC_RELEASE);
        }
        h->bistro_errno = 0;
        h->reason[0] = '\0';
    }
}

static void bistro_remove_all(void) { bistro_remove(false); }

static int reloc_apply(char *why, size_t why_len)
{
    memhook_reloc_symbol syms[MH_FN_COUNT];
    size_t nsyms = 0;
    for (int i = 0; i < MH_FN_COUNT; i++) {
        /* (Once registered, a name stays routed until uninstall: with
         * pointer attributes off again its wrapper passes calls through.) */
        if (answers_off(&mh_hooks[i]))
            continue;
        syms[nsyms].name = mh_hooks[i].name;
        syms[nsyms].replacement = mh_hooks[i].wrapper;
        syms[nsyms].original = &mh_hooks[i].reloc_original;
        nsyms++;
    }
    if (!g_reloc_on) {
        void *h = loaded_driver();
        g_driver_before_reloc = h != NULL;
        if (h)
            mh_real_dlclose(h);
    }
    int rc = memhook_reloc_install(syms, nsyms, g_reloc_why, sizeof g_reloc_why);
    if (rc != 0) {
        snprintf(why, why_len, "reloc: %.250s", g_reloc_why);
        return rc;
    }
    g_reloc_why[0] = '\0';
    g_reloc_on = true;
    return 0;
}

static void reloc_remove(void)
{
    if (g_reloc_on)
        memhook_reloc_uninstall();
    g_reloc_on = false;
}

int memhook_hooks_install(unsigned mode, char *why, size_t why_len)
{
    char scratch[8];
    if (why == NULL || why_len == 0) {
        why = scratch;
        why_len = sizeof scratch;
    }
    why[0] = '\0';
    if (mode & ~MEMHOOK_MODE_ALL) {
        snprintf(why, why_len, "mode %u has bits other than bistro (1) and reloc (2); "
                 "valid: 0-3", mode);
        return EINVAL;
    }
    install_lock();
    static bool table_ready;
    if (!table_ready) {
        mh_table_init();
        table_ready = true;
    }
    if (g_mode == 0 && mode != 0 && !g_driver_used_unseen)
        g_driver_used_unseen = driver_initialised();
    if (mode != 0)
        mh_ucm_install_begin(g_mode, mode);  /* UCX's feed-only hooks out of memhook's way */
    int rc = 0;
    if (mode & MEMHOOK_MODE_RELOC)
        rc = reloc_apply(why, why_len);
    if (mode & MEMHOOK_MODE_BISTRO) {
        int brc = bistro_apply(!(mode & MEMHOOK_MODE_RELOC), why, why_len);
        if (brc != 0 && !(mode & MEMHOOK_MODE_RELOC)) {
            /* bistro alone patched nothing: a failed install changes
             * nothing - the previous mode stays, with its mechanisms (the
             * rows keep bistro's reasons, which status() shows). */
            if (g_mode == 0)
                mh_ucm_hand_back();  /* UCX fed again, by its hooks or ours */
            else
                mh_ucm_install_done();  /* the feed-only hooks where they were */
            dl_clear();
            pthread_mutex_unlock(&g_lock);
            mh_warn("%s", why);
            return brc;
        }
        if (rc == 0)
            rc = brc;
        if (!memhook_hooks_pointer_attributes())
            bistro_remove(true);
    } else {
        bistro_remove_all();
    }
    if (!(mode & MEMHOOK_MODE_RELOC))
        reloc_remove();
    unsigned g_mode_before = g_mode;
    __atomic_store_n(&g_mode, mode, __ATOMIC_RELEASE); /* (read unlocked: the token) */
    if (mode != 0) {
        mh_ucm_attach();  /* UCX in the process: feed it (ucm_feed.c) */
        mh_driver_calls_prepare();
        mh_pointer_attributes_prepare();
    }
    mh_objects_changed();  /* CUDA's text, for events' callers (caller.h) */
    if (g_mode_before == 0 && mode != 0) {
        mh_live_new_generation(true);  /* before recording starts: live_table.c */
        hooks_gap(false);
        /* A new install period for the cache: what it learned before is
         * no longer vouched for (frees may have gone unseen meanwhile).
         * Events recorded before are applied in the period they belong to. */
        mh_queue_feed_run(true);
        mh_cache_publish_deferred(mh_cache_process(), true);
        mh_cache_period_next(mh_cache_process(), true);
    }
    __atomic_store_n(&mh_recording, mode != 0, __ATOMIC_RELEASE);
    if (mode != 0)
        mh_ucm_install_done();  /* the feed-only hooks beside memhook's (ucm_feed.c) */
    if (g_mode_before != 0 && mode == 0) {
        mh_live_new_generation(false);  /* after recording stopped: live_table.c */
        hooks_gap(true);
        cache_period_end();
        mh_ucm_hand_back();  /* every patch is out: UCX's own hooks go in */
    }
    dl_clear();
    pthread_mutex_unlock(&g_lock);
    if (rc != 0)
        mh_warn("%s", why);
    cache_coverage_update(mode, g_mode_before == 0 && mode != 0);
    return rc;
}

int memhook_hooks_uninstall(void)
{
    mh_cache_set_coverage(mh_cache_process(), false);
    install_lock();
    bool was_on = g_mode != 0;
    __atomic_store_n(&mh_recording, 0, __ATOMIC_RELEASE);
    if (was_on)
        cache_period_end();
    mh_live_new_generation(false);  /* after recording stopped: live_table.c */
    bistro_remove_all();
    reloc_remove();
    __atomic_store_n(&g_mode, 0u, __ATOMIC_RELEASE); /* (read unlocked: the token) */
    /* The marker after the mode reads none: a query that still read the
     * hooks on, and so stores a driver answer, read it before the marker
     * existed - its store is then marked by the marker's apply, or refused
     * for coming after it (memhook/_queries/query.py, _remember). */
    if (was_on)
        hooks_gap(true);
    mh_ucm_hand_back();  /* every patch is out: UCX's own hooks go in */
    dl_clear();
    pthread_mutex_unlock(&g_lock);
    return 0;
}

unsigned memhook_hooks_mode(void)
{
    install_lock();
    unsigned m = g_mode;
    pthread_mutex_unlock(&g_lock);
    return m;
}

/* `consumer`: for this process's consumer of events (memhook/_events/drain.py),
 * which lacks what mh_queue_trim dropped; the core's cache saw those. */
static int coverage_complete(bool consumer)
{
    install_lock();
    /* (mh_queue_trimmed: events this process's consumer never saw.) */
    int complete = g_mode != 0 && !g_driver_used_unseen && !(consumer && mh_queue_trimmed());
    void *lib = complete ? loaded_driver() : NULL;
    if (complete && lib != NULL) {
        bool bistro_all = true;
        for (int i = 0; i < MH_FN_COUNT && complete; i++) {
            const mh_hook *h = &mh_hooks[i];
            /* (the pointer-attribute calls make no allocation) */
            if (h->api != MEMHOOK_API_DRIVER || h->kind == MEMHOOK_EVENT_NONE)
                continue;
            void *addr = mh_real_dlsym(lib, h->name);
            if (addr == NULL)
                continue;
            bool patched = h->patch != NULL && h->patched_at == addr;
            for (int j = 0; j < MH_FN_COUNT && !patched; j++)
                patched = mh_hooks[j].patch != NULL && mh_hooks[j].patched_at == addr;
            bistro_all &= patched;
            if (!patched && !g_reloc_on)
                complete = 0;
        }
        if (complete && !bistro_all && g_driver_before_reloc)
            complete = 0;
    }
    if (lib != NULL)
        mh_real_dlclose(lib);
    dl_clear();
    pthread_mutex_unlock(&g_lock);
    return complete;
}

int memhook_hooks_coverage_complete(void) { return coverage_complete(true); }

/* The end of an install period (install lock held, recording stopped):
 * what was recorded in it is applied as of it, then the period ends. */
static void cache_period_end(void)
{
    mh_cache_set_coverage(mh_cache_process(), false);
    mh_queue_feed_run(true);
    mh_cache_publish_deferred(mh_cache_process(), true);
    mh_cache_period_next(mh_cache_process(), false);
}

/* After an install (no lock held): the cache's copy of the coverage
 * answer, and, for a new period, the VA CUDA reserved before it marked
 * UNKNOWN (allocations no hook saw may be there: a query asks the
 * driver) when the driver was initialised before.  The answer changes with the mode only: a driver loaded later
 * is patched at its load (reloc follows dlopen; bistro loads it at
 * install). */
static void cache_coverage_update(unsigned mode, bool new_period)
{
    mh_cache *c = mh_cache_process();
    /* (a driver never initialised before the hooks went in handed nothing
     * out: the no-access mappings of the process are not CUDA's) */
    if (new_period && g_driver_used_unseen) {
        uint64_t stack[2 * 64];
        uint64_t *pairs = stack;
        long long n = memhook_cuda_reserved_ranges(pairs, 64);
        if (n > 64) {
            pairs = malloc((size_t)n * 2 * sizeof(uint64_t));
            n = pairs != NULL ? memhook_cuda_reserved_ranges(pairs, (size_t)n) : -1;
        }
        if (n > 0)
            mh_cache_mark_reserved(c, pairs, (size_t)n);
        if (pairs != stack)
            free(pairs);
    }
    mh_cache_set_coverage(c, mode != 0 && coverage_complete(false));
}

/* Python asks memhook_hooks_coverage_complete before answering HOST for a
 * pointer it does not know, so it remembers the answer under this token and
 * asks again only when the token moves: one call per query instead of the
 * mode and the loader count apart (a host query paid two extension calls
 * for them, about twice a device query's cost).  The answer can change
 * only with the mode, an object loaded, or the queue's first trim; the
 * install-time flags change only with the mode. */
unsigned long long memhook_coverage_token(void)
{
    unsigned long long adds = memhook_loader_generation();
    /* Not memhook_hooks_mode(): no install lock.  memory_type's C fast path
     * (csrc/pyext/query_fast.c) asks for the token on every HOST answer,
     * with the GIL held; a mode read mid-install is the old one (the memo's:
     * an answer as of just before the install) or the new one (no match:
     * the Python path asks memhook_hooks_coverage_complete, which waits). */
    unsigned mode = __atomic_load_n(&g_mode, __ATOMIC_ACQUIRE);
    return adds << 3 | (unsigned long long)mh_queue_trimmed() << 2 | (mode & 3u);
}

/* `driver`: the loaded driver, or NULL (install lock held). */
static bool present(const mh_hook *h, void *driver)
{
    /* (Not h->resolved: that may be the older spelling a missing name
     * falls back to.) */
    if (h->api == MEMHOOK_API_RUNTIME &&
        __atomic_load_n(&h->reloc_original, __ATOMIC_ACQUIRE) != NULL)
        return true;
    void *lib = h->api == MEMHOOK_API_DRIVER ? driver : RTLD_DEFAULT;
    return lib != NULL && mh_real_dlsym(lib, h->name) != NULL;
}

/* Row `index` (install lock held). */
static void hook_info_locked(size_t index, void *driver, memhook_hook_info *out)
{
    const mh_hook *h = &mh_hooks[index];
    memset(out, 0, sizeof *out);
    out->name = h->name;
    out->api = h->api;
    out->kind = h->kind;
    out->present = present(h, driver);
    bool off = answers_off(h);
    bool patched = h->patch != NULL && (g_mode & MEMHOOK_MODE_BISTRO);
    out->mechanisms = (patched ? MEMHOOK_MODE_BISTRO : 0) |
                      (g_reloc_on && !off ? MEMHOOK_MODE_RELOC : 0);
    out->bistro_jump = patched ? memhook_bistro_patch_jump_size(h->patch) : 0;
    out->bistro_overwritten = h->patch != NULL && !memhook_bistro_patch_intact(h->patch);
    if (g_mode == 0 && mh_ucm_row_reason(h->name, false, out->reason, sizeof out->reason))
        ;  /* kept patched (or blind) for UCX after the hand-back: ucm_keep.c */
    else if (out->bistro_overwritten)
        snprintf(out->reason, sizeof out->reason,
                 "bistro: another library patched this entry after memhook; memhook's jump "
                 "stays under its patch (%s), since restoring the bytes memhook saw would "
                 "erase it", g_mode & MEMHOOK_MODE_BISTRO
                     ? "calls that come through it are recorded"
                     : "uninstalled: calls that come through it are passed on, unrecorded");
    else if (h->reason[0] != '\0')  /* (also after a failed install, in mode none) */
        snprintf(out->reason, sizeof out->reason, "%s", h->reason);
    else if (g_mode == 0)
        snprintf(out->reason, sizeof out->reason, "hooks are not installed (mode none)");
    else if (mh_ucm_row_reason(h->name, true, out->reason, sizeof out->reason))
        ;  /* installed beside UCX's own hooks: who feeds UCX here (ucm_keep.c) */
    else if (off && !out->mechanisms)
        snprintf(out->reason, sizeof out->reason, "%s", ANSWERS_OFF_REASON);
    else if (!out->mechanisms && h->api == MEMHOOK_API_RUNTIME)
        snprintf(out->reason, sizeof out->reason,
                 "runtime entry points are hooked by reloc only (bistro patches the "
                 "driver's exports, which the runtime calls)");
    else if (!out->mechanisms && (g_mode & MEMHOOK_MODE_RELOC) && g_reloc_why[0] != '\0')
        snprintf(out->reason, sizeof out->reason, "reloc: %s", g_reloc_why);
}

int memhook_hook_get(size_t index, memhook_hook_info *out)
{
    if (index >= MH_FN_COUNT || out == NULL)
        return EINVAL;
    return memhook_hook_get_range(index, 1, out) == 1 ? 0 : EINVAL;
}

/* The whole table in one call: one lock hold and one probe of the driver.
 * Asked row by row, status() released the GIL once a row, and in a busy
 * Python process each release may cost a switch interval or more
 * (docs/performance.md, "Costs behind the code's choices"). */
size_t memhook_hook_get_range(size_t first, size_t count, memhook_hook_info *out)
{
    if (out == NULL || first >= MH_FN_COUNT)
        return 0;
    if (count > MH_FN_COUNT - first)
        count = MH_FN_COUNT - first;
    install_lock();
    void *driver = loaded_driver();
    for (size_t i = 0; i < count; i++)
        hook_info_locked(first + i, driver, &out[i]);
    if (driver != NULL)
        mh_real_dlclose(driver);
    dl_clear();
    pthread_mutex_unlock(&g_lock);
    return count;
}
