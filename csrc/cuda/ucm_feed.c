/*
 * ucm_feed.c - memhook's events handed to UCX's memory hooks (libucm) in
 * the same process, when memhook holds the CUDA entry points first.
 *
 * With memhook's jump at a driver entry, UCX's bistro refuses the entry and
 * UCX's memtype cache would get no CUDA events at all.  So, when memhook
 * first finds libucm (at install, or after a dlopen reloc's wrapper sees)
 * and UCX's CUDA module is not loaded yet, it declares MEM_TYPE_ALLOC|FREE
 * external (ucm_set_external_event) and dispatches one event per call it
 * records: an ALLOC before the caller has the pointer, a FREE before the
 * real free (UCX never holds a range the driver may have handed out
 * again), the ALLOC again when the driver refused the free.  UCX's CUDA
 * module already loaded means UCX hooked first: memhook feeds nothing, so
 * UCX never sees a call twice.  At uninstall memhook hands the hooks back
 * and dispatches the existing mappings, as libucm does for late hooks; if
 * UCX cannot install them, memhook's feed-only hooks stay (ucm_keep.c).
 *
 * The dispatch holds libucm's event lock for reading, as libucm's own
 * hooks do; attach and hand-back run under g_lock.  The declarations below
 * are memhook's own, from UCX's public ucm/api/ucm.h (UCX 1.22).
 * docs/design/ucx-coexistence.md argues the choice, the ABI and the limits.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_hooks.h"
#include "log.h"
#include "procfs.h"
#include "reloc.h"
#include "ucm_feed.h"
#include "ucm_keep.h"

#define UCM_SONAME "libucm.so.0"
#define UCM_CUDA_SONAME "libucm_cuda.so.0"

/* ucm_event_type_t bits */
#define UCM_EV_MEM_TYPE_ALLOC (1 << 20)
#define UCM_EV_MEM_TYPE_FREE (1 << 21)
#define UCM_EV_MEM_TYPE (UCM_EV_MEM_TYPE_ALLOC | UCM_EV_MEM_TYPE_FREE)

/* ucs_memory_type_t values */
enum { UCS_MT_HOST = 0, UCS_MT_CUDA = 1, UCS_MT_CUDA_MANAGED = 2, UCS_MT_UNKNOWN = 10 };
#define UCS_SYS_DEV_UNKNOWN 0xff
#define UCS_MEM_FLAG_REGISTRABLE 1

/* ucm_event_t, of which memhook uses the mem_type member: UCX releases
 * without its last two fields ignore them, and this storage is larger than
 * any member of the union. */
typedef union mh_ucm_event {
    struct {
        void *address;
        size_t size;
        int mem_type;        /* ucs_memory_type_t */
        uint8_t sys_dev;     /* ucs_sys_device_t */
        uint8_t mem_flags;
    } mem_type;
    uint8_t storage[128];
} mh_ucm_event;

typedef void (*ucm_cb_fn)(int, mh_ucm_event *, void *);

/* libucm's entry points, resolved at attach.  Process-wide like libucm. */
static struct {
    void (*set_external)(int);
    void (*unset_external)(int);
    /* ucs_status_t is a one-byte enum: the upper bits of the return
     * register are not part of the answer */
    int8_t (*set_handler)(int, int, ucm_cb_fn, void *);
    void (*unset_handler)(int, ucm_cb_fn, void *);
    void (*dispatch)(int, mh_ucm_event *);
    void (*enter)(void);
    void (*leave)(void);
} g_ucm;

/* Read on every event by the hooks: whether memhook feeds libucm now. */
MH_HOT int mh_ucm_feeding;

/* Attach and hand-back, which libucm serialises too; never from a hook. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mh_ucm_state g_state; /* written under g_lock, read atomically */

void mh_ucm_fork_child(void) { pthread_mutex_init(&g_lock, NULL); }

static void set_state(mh_ucm_state st) { __atomic_store_n(&g_state, st, __ATOMIC_RELEASE); }

static void *sym(void *h, const char *name, bool *ok)
{
    void *p = mh_real_dlsym(h, name);
    *ok &= p != NULL;
    return p;
}

static bool resolve(void *h)
{
    bool ok = true;
    g_ucm.set_external = (void (*)(int))sym(h, "ucm_set_external_event", &ok);
    g_ucm.unset_external = (void (*)(int))sym(h, "ucm_unset_external_event", &ok);
    g_ucm.set_handler = (int8_t (*)(int, int, ucm_cb_fn, void *))sym(h, "ucm_set_event_handler", &ok);
    g_ucm.unset_handler = (void (*)(int, ucm_cb_fn, void *))sym(h, "ucm_unset_event_handler", &ok);
    g_ucm.dispatch = (void (*)(int, mh_ucm_event *))sym(h, "ucm_event_dispatch", &ok);
    g_ucm.enter = (void (*)(void))sym(h, "ucm_event_enter", &ok);
    g_ucm.leave = (void (*)(void))sym(h, "ucm_event_leave", &ok);
    return ok;
}

static bool loaded(const char *soname)
{
    void *h = mh_real_dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (h != NULL)
        mh_real_dlclose(h);
    return h != NULL;
}

void mh_ucm_attach(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_state != MH_UCM_ABSENT) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    void *h = mh_real_dlopen(UCM_SONAME, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) {
        (void)dlerror();
        pthread_mutex_unlock(&g_lock);
        return;
    }
    /* libucm stays loaded while we hold the reference: its functions are
     * called from the hooks. */
    if (!resolve(h)) {
        set_state(MH_UCM_UNUSABLE);
        mh_real_dlclose(h);
        mh_warn("ucm: %s lacks an entry point memhook needs to feed it (a UCX older than "
                "its MEM_TYPE events?); UCX keeps its own CUDA hooks", UCM_SONAME);
    } else if (loaded(UCM_CUDA_SONAME)) {
        set_state(MH_UCM_OWN_HOOKS);
        mh_real_dlclose(h);
        mh_info("ucm: UCX's CUDA module was loaded before memhook found libucm: UCX keeps its "
                "own CUDA hooks and memhook feeds it nothing");
    } else {
        g_ucm.set_external(UCM_EV_MEM_TYPE);
        set_state(MH_UCM_FED);
        __atomic_store_n(&mh_ucm_feeding, 1, __ATOMIC_RELEASE);
        mh_info("ucm: memhook feeds UCX's MEM_TYPE events (declared external)");
    }
    (void)dlerror();
    pthread_mutex_unlock(&g_lock);
}

/* A libucm dlopened after install (the common case for a Python UCX,
 * imported late) must be fed before its first handler is registered,
 * which happens after its dlopen returns: reloc's wrapper tells us.  The
 * look is one dlsym in what that dlopen brought in (the object and its
 * dependencies: libucm comes with libucs), no search of the library path,
 * and no lock of ours unless libucm is there. */
static void after_dlopen(void *handle)
{
    if (__atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == MH_UCM_ABSENT &&
        mh_real_dlsym(handle, "ucm_set_external_event") != NULL)
        mh_ucm_attach();
}

void mh_ucm_feed_at_load(void)
{
    (void)mh_reloc_watch_load(after_dlopen);
}

mh_ucm_state mh_ucm_state_get(void)
{
    return __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
}

static int to_ucs(int mem_type)
{
    switch (mem_type) {
    case MEMHOOK_MEM_CUDA:
        return UCS_MT_CUDA;
    case MEMHOOK_MEM_CUDA_MANAGED:
        return UCS_MT_CUDA_MANAGED;
    case MEMHOOK_MEM_HOST:
    case MEMHOOK_MEM_CUDA_HOST:
        return UCS_MT_HOST;
    default:
        return UCS_MT_UNKNOWN;
    }
}

static void dispatch(int event, uint64_t addr, uint64_t size, int ucs_type, uint8_t flags)
{
    mh_ucm_event ev;
    memset(&ev, 0, sizeof ev);
    ev.mem_type.address = (void *)(uintptr_t)addr;
    ev.mem_type.size = size;
    ev.mem_type.mem_type = ucs_type;
    ev.mem_type.sys_dev = UCS_SYS_DEV_UNKNOWN;
    ev.mem_type.mem_flags = flags;
    g_ucm.enter();
    g_ucm.dispatch(event, &ev);
    g_ucm.leave();
}

void mh_ucm_alloc(uint64_t addr, uint64_t size, int mem_type)
{
    /* Page-locked host memory is host memory to UCX: its cache holds only
     * what is not (a miss means host), as libucm's own hooks do. */
    int t = to_ucs(mem_type);
    if (addr == 0 || t == UCS_MT_HOST)
        return;
    /* No device and no flags: UCX asks the driver for the attributes it
     * needs besides the type (its system device) at its first lookup, as
     * it does after libucm's own hooks. */
    dispatch(UCM_EV_MEM_TYPE_ALLOC, addr, size, t, 0);
}

void mh_ucm_free(uint64_t addr, uint64_t size, int mem_type)
{
    if (addr == 0)
        return;
    /* An unknown size: the least range that still takes addr out. */
    dispatch(UCM_EV_MEM_TYPE_FREE, addr, size ? size : 1, to_ucs(mem_type),
             UCS_MEM_FLAG_REGISTRABLE);
}

static void noop_handler(int type, mh_ucm_event *ev, void *arg)
{
    (void)type;
    (void)ev;
    (void)arg;
}

/* What libucm does for a handler that arrives after allocations were made:
 * every mapping the process cannot touch (CUDA's reserved VA) or that maps
 * a /dev/nvidia* device, as an ALLOC of unknown type. */
static bool rescan_one(const mh_map_entry *e, void *ctx)
{
    (void)ctx;
    bool none = !(e->prot & (PROT_READ | PROT_WRITE | PROT_EXEC));
    if (none || strncmp(e->name, "/dev/nvidia", 11) == 0)
        dispatch(UCM_EV_MEM_TYPE_ALLOC, e->start, e->end - e->start, UCS_MT_UNKNOWN,
                 UCS_MEM_FLAG_REGISTRABLE);
    return true;
}

static void rescan(void) { (void)mh_maps_each(rescan_one, NULL); }

/* Set when memhook's install took the feed-only hooks out: what was called
 * between that and recording is dispatched once recording runs. */
static bool g_rescan_due;

void mh_ucm_hand_back(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_state == MH_UCM_BESIDE) {
        /* UCX keeps its own hooks on some entries and would refuse again at
         * the first of them: it is not asked.  The feed-only hooks that
         * memhook's patches took out with them go back to their entries. */
        if (mh_ucm_keep_settle() > 0)
            rescan();
        set_state(MH_UCM_FEED_ONLY);
        pthread_mutex_unlock(&g_lock);
        return;
    }
    /* A second uninstall may have freed an entry memhook's patch held:
     * what was called between its patch going and the hook coming is
     * dispatched as the existing mappings. */
    if (g_state == MH_UCM_FEED_ONLY && mh_ucm_keep_refresh() > 0)
        rescan();
    if (g_state != MH_UCM_FED) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    __atomic_store_n(&mh_ucm_feeding, 0, __ATOMIC_RELEASE);
    mh_ucm_keep_note();
    g_ucm.unset_external(UCM_EV_MEM_TYPE);
    static int token; /* the handler's identity for the unset */
    int st = g_ucm.set_handler(UCM_EV_MEM_TYPE, 0, noop_handler, &token);
    if (st == 0)
        g_ucm.unset_handler(UCM_EV_MEM_TYPE, noop_handler, &token);
    /* UCX refused (ucm_keep.c says when): memhook's feed-only hooks take
     * the entries UCX left alone, and the events stay external, so that a
     * handler UCX registers later does not try UCX's hooks again (it would
     * fail the same way, and the registration with it): the kept hooks
     * feed that handler too. */
    int kept = st != 0 ? mh_ucm_keep_install(st) : 0;
    if (kept > 0)
        g_ucm.set_external(UCM_EV_MEM_TYPE);
    rescan();
    set_state(st == 0 ? MH_UCM_OWN_HOOKS : kept > 0 ? MH_UCM_FEED_ONLY : MH_UCM_HANDED_BACK_FAILED);
    if (st == 0)
        mh_info("ucm: memhook's hooks are out; UCX installed its own CUDA hooks");
    else if (kept > 0)
        mh_warn("ucm: UCX could not install its own CUDA hooks (status %d): memhook keeps %d "
                "feed-only hooks that dispatch UCX's events and record nothing of memhook's "
                "(status() names them)", st, kept);
    else
        mh_warn("ucm: memhook's hooks are out and UCX could not install its own CUDA hooks "
                "(status %d), nor could memhook keep feeding it: UCX sees no CUDA allocation "
                "from here on", st);
    (void)dlerror();
    pthread_mutex_unlock(&g_lock);
}

void mh_ucm_install_begin(unsigned from, unsigned to)
{
    pthread_mutex_lock(&g_lock);
    if (from == 0 && g_state == MH_UCM_FEED_ONLY && mh_ucm_keep_beside()) {
        /* UCX's own hooks stay on some entries: a wrapper's event would
         * reach UCX a second time through them, so the wrappers feed
         * nothing (mh_ucm_feeding stays 0) and the feed-only hooks feed UCX
         * from every other entry (ucm_keep.h). */
        set_state(MH_UCM_BESIDE);
    } else if (from == 0 && g_state == MH_UCM_FEED_ONLY) {
        /* feeding first: the wrappers dispatch from their first recorded call */
        __atomic_store_n(&mh_ucm_feeding, 1, __ATOMIC_RELEASE);
        mh_ucm_keep_drop();
        set_state(MH_UCM_FED);
        g_rescan_due = true;
    }
    if (g_state == MH_UCM_BESIDE && (to & MEMHOOK_MODE_BISTRO))
        mh_ucm_keep_lift();  /* bistro patches the driver's entries, not our jumps */
    pthread_mutex_unlock(&g_lock);
}

void mh_ucm_install_done(void)
{
    pthread_mutex_lock(&g_lock);
    bool due = g_rescan_due && g_state == MH_UCM_FED;
    if (g_state == MH_UCM_BESIDE && mh_ucm_keep_settle() > 0)
        due = true;  /* an entry lifted was unfed until now */
    if (due)
        rescan();
    g_rescan_due = false;
    pthread_mutex_unlock(&g_lock);
}

bool mh_ucm_row_reason(const char *name, bool installed, char *why, size_t why_len)
{
    pthread_mutex_lock(&g_lock);
    bool said = installed ? g_state == MH_UCM_BESIDE && mh_ucm_keep_reason(name, true, why, why_len)
                          : g_state != MH_UCM_FED && mh_ucm_keep_reason(name, false, why, why_len);
    pthread_mutex_unlock(&g_lock);
    return said;
}
