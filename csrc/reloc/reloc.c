/*
 * reloc.c - the GOT engine's exported entry points (memhook_reloc_*,
 * memhook_internal/api.h), its lock, and fork.
 *
 * The engine has three parts: the registry of hooked names (registry.c),
 * the walk over loaded objects that writes and remembers their slots
 * (walk.c), and the interposed loader entry points that keep both up to
 * date as objects come and go (interpose_dl.c).  Other layers add entry
 * points they interpose for their own lookups (mh_reloc_interpose) and
 * ask the registry for replacements; the engine knows no library's names
 * but the loader's.
 *
 * Lock order: memhook's recursive mutex, then the loader's lock (taken by
 * dl_iterate_phdr / dlopen inside).  The dlopen wrapper does not hold the
 * mutex across the real dlopen (constructors may start threads that dlopen);
 * the dlclose wrapper does, so that no object is unmapped between a walk's
 * collection and its writes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "reloc_int.h"

#include "memhook_internal/api.h"

/* The real dl* entry points: process-wide because the functions they name
 * are (one loader per process); written once under g_lock before any
 * wrapper can run, then only read. */
mh_dlsym_fn mh_real_dlsym;
mh_dlvsym_fn mh_real_dlvsym;
mh_dlopen_fn mh_real_dlopen;
mh_dlmopen_fn mh_real_dlmopen;
mh_dlclose_fn mh_real_dlclose;
/* Per thread: set while a wrapper runs, so a hook reached from inside
 * memhook never recurses. */
__thread int mh_reloc_inside __attribute__((tls_model("initial-exec")));

/* Process-wide, as the slots it guards are: published with release. */
static int g_active;
static pthread_mutex_t g_lock;
static pthread_once_t g_lock_once = PTHREAD_ONCE_INIT;
/* How deep this thread holds g_lock: a child forked from inside a hold
 * (a destructor run by the dlclose wrapper) must come out holding it as
 * deep, minus the atfork hold. */
static __thread int t_lock_depth __attribute__((tls_model("initial-exec")));

static void make_lock(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

/* fork(): the lock is held across it, so the child's registry and object
 * records are between two operations.  The child cannot unlock what the
 * parent's thread locked (a recursive mutex checks the owner's tid, which
 * the child's thread does not have), so it makes the lock afresh.
 * Registered at load, with every other module's handlers, in the lock
 * order that csrc/core/mh_lock_order.h writes down. */
void mh_reloc_fork_prepare(void) { mh_reloc_lock(); }
void mh_reloc_fork_parent(void) { mh_reloc_unlock(); }
void mh_reloc_fork_child(void)
{
    int depth = t_lock_depth - 1;
    make_lock();
    t_lock_depth = 0;
    while (depth-- > 0)
        mh_reloc_lock();
}

/* Makes the lock (once).  Where the lock sits among memhook's others:
 * csrc/core/mh_lock_order.h. */
static void reloc_init(void)
{
    pthread_once(&g_lock_once, make_lock);
}

void mh_reloc_lock(void)
{
    reloc_init();
    pthread_mutex_lock(&g_lock);
    t_lock_depth++;
}

void mh_reloc_unlock(void)
{
    t_lock_depth--;
    pthread_mutex_unlock(&g_lock);
}

bool mh_reloc_active(void)
{
    return __atomic_load_n(&g_active, __ATOMIC_ACQUIRE) != 0;
}

static void format_why(char *why, size_t why_len, const char *fmt, ...)
{
    if (why == NULL || why_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

int memhook_reloc_install(const memhook_reloc_symbol *symbols, size_t count, char *why,
                          size_t why_len)
{
    format_why(why, why_len, "%s", "");
    if (count > 0 && symbols == NULL) {
        format_why(why, why_len, "symbols is NULL with count %zu", count);
        return EINVAL;
    }
    for (size_t i = 0; i < count; i++) {
        if (symbols[i].name == NULL || symbols[i].replacement == NULL ||
            strlen(symbols[i].name) >= MH_RELOC_NAME_MAX || symbols[i].name[0] == '\0') {
            format_why(why, why_len, "symbol %zu: name missing or too long, or no replacement", i);
            return EINVAL;
        }
    }
    mh_reloc_lock();
    mh_reloc_inside++;
    mh_registry_add_kept();
    int err = 0;
    for (size_t i = 0; i < count && err == 0; i++) {
        err = mh_registry_add(symbols[i].name, symbols[i].replacement, symbols[i].original);
        if (err)
            format_why(why, why_len, "cannot register %s: %s", symbols[i].name, strerror(err));
    }
    if (err == 0) {
        mh_registry_resolve_missing(NULL);
        __atomic_store_n(&g_active, 1, __ATOMIC_RELEASE);
        err = mh_reloc_walk(MH_WALK_INSTALL);
        if (err)
            format_why(why, why_len, "some slots could not be rewritten: %s", strerror(err));
    }
    mh_reloc_inside--;
    mh_reloc_unlock();
    return err;
}

void mh_reloc_refresh(void *new_handle)
{
    if (!mh_reloc_active())
        return;
    mh_reloc_lock();
    mh_reloc_inside++;
    if (mh_reloc_active()) {
        mh_reloc_walk(MH_WALK_REFRESH);
        if (new_handle)
            mh_registry_resolve_missing(new_handle);
    }
    mh_reloc_inside--;
    mh_reloc_unlock();
}

int memhook_reloc_uninstall(void)
{
    mh_reloc_lock();
    mh_reloc_inside++;
    int result = 0;
    if (mh_registry_count() > 0) {
        result = mh_reloc_restore_all();
        __atomic_store_n(&g_active, 0, __ATOMIC_RELEASE);
        mh_registry_forget_user();
        mh_reloc_walk_reset();
    }
    mh_reloc_inside--;
    mh_reloc_unlock();
    return result;
}

size_t memhook_reloc_patched_slots(void)
{
    mh_reloc_lock();
    size_t n = mh_reloc_count_user_slots();
    mh_reloc_unlock();
    return n;
}
