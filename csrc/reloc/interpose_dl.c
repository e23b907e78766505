/*
 * interpose_dl.c - memhook's dlopen, dlmopen, dlclose, dlsym and dlvsym.
 *
 * Every object's GOT slots for these names point here while reloc is
 * installed (memhook's own excepted), so objects loaded later are patched
 * before dlopen returns and a dlsym of a hooked name answers the wrapper.
 *
 * glibc identifies the calling object by the return address, so each
 * wrapper answers as the loader would have answered the caller: a dlsym of
 * a name memhook does not hook tail-jumps to the real one from an assembly
 * stub (interpose_x86_64.S); a hooked name is looked up in the caller's
 * scope (hooked_lookup); dlopen resolves the name along the caller's own
 * search path (open_as_caller).  Every wrapper leaves dlerror() as the real
 * call left it (ctypes dereferences it after a failure).  A dlopen made
 * from a constructor inside a wrapped dlopen does not patch: the outer
 * wrapper does, and memhook's lock is never taken under the loader's.
 * docs/design/reloc-interposition.md gives each rule and what still differs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mh_objects.h"
#include "log.h"
#include "reloc_int.h"

/* Per thread: inside the real dlopen/dlclose (a constructor or destructor
 * that dlopens again must not re-enter memhook's walk). */
static __thread int t_in_real_dl __attribute__((tls_model("initial-exec")));

/* ---- dlerror ---- */

/* After a successful real call: nothing memhook did since may show. */
static void dl_clear_error(void) { (void)dlerror(); }

/* ---- dlsym / dlvsym ---- */

/* Called by the stubs: should this lookup be answered by memhook? */
MH_HIDDEN int mh_dl_name_hooked(const char *name);
int mh_dl_name_hooked(const char *name)
{
    if (mh_reloc_inside || !mh_reloc_active())
        return 0;
    return mh_reloc_replacement(name) != NULL;
}

static struct link_map *caller_map(const void *caller)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (caller == NULL || dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0)
        return NULL;
    return lm;
}

static void *lookup_in_caller_scope(const void *caller, const char *name, const char *version)
{
    struct link_map *lm = caller_map(caller);
    if (lm == NULL)
        return NULL;
    void *h = mh_real_dlopen(lm->l_name && lm->l_name[0] ? lm->l_name : NULL,
                             RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL)
        return NULL;
    void *r = version ? mh_real_dlvsym(h, name, version) : mh_real_dlsym(h, name);
    mh_real_dlclose(h);
    return r;
}

/* A hooked lookup found nothing: leave dlerror() holding what the real
 * lookup says.  For a handle or RTLD_DEFAULT that is the same real call
 * again (the lookups in between overwrote its error).  RTLD_NEXT was
 * answered by memhook's own walk (mh_reloc_find_after), so the real call
 * made here is the caller's own-scope lookup: glibc's message for a failed
 * RTLD_NEXT names the caller's object, and so does this one (a glibc
 * handle is its link_map).  Should the caller's own scope define the name
 * (an interposer looking for the next definition of its own symbol),
 * dlerror() stays clear. */
static void dl_fail_as_real(void *handle, const char *name, const char *version, void *caller)
{
    if (handle == RTLD_NEXT) {
        struct link_map *lm = caller_map(caller);
        handle = lm != NULL ? (void *)lm : RTLD_DEFAULT;
    }
    if (version != NULL)
        (void)mh_real_dlvsym(handle, name, version);
    else
        (void)mh_real_dlsym(handle, name);
}

/* A handle or RTLD_DEFAULT: the real lookup, then the caller's own scope
 * (a caller loaded RTLD_LOCAL); RTLD_NEXT: the first object after the
 * caller's in the link map that defines the name.  Found: the wrapper. */
static void *hooked_lookup(void *handle, const char *name, const char *version, void *caller)
{
    mh_reloc_inside++;
    void *real;
    bool more = handle == RTLD_NEXT;  /* memhook's own dl calls after the real one */
    if (handle == RTLD_NEXT) {
        real = mh_reloc_find_after(caller_map(caller), name);
    } else {
        real = version ? mh_real_dlvsym(handle, name, version) : mh_real_dlsym(handle, name);
        if (real == NULL && handle == RTLD_DEFAULT) {
            real = lookup_in_caller_scope(caller, name, version);
            more = true;
        }
    }
    if (real == NULL && more)
        dl_fail_as_real(handle, name, version, caller);
    mh_reloc_inside--;
    if (real == NULL)
        return NULL;
    if (more)
        dl_clear_error();
    mh_reloc_note_definition(name, real);
    void *repl = mh_reloc_replacement_for(name, real);
    return repl ? repl : real;
}

MH_HIDDEN void *mh_dlsym_hooked(void *handle, const char *name, void *caller);
void *mh_dlsym_hooked(void *handle, const char *name, void *caller)
{
    return hooked_lookup(handle, name, NULL, caller);
}

MH_HIDDEN void *mh_dlvsym_hooked(void *handle, const char *name, const char *version,
                                 void *caller);
void *mh_dlvsym_hooked(void *handle, const char *name, const char *version, void *caller)
{
    return hooked_lookup(handle, name, version, caller);
}

/* ---- dlopen / dlmopen ---- */

typedef struct search_path {
    Dl_serinfo *info;
} search_path;

static Dl_serinfo *serinfo_of(void *lm)
{
    Dl_serinfo size;
    if (dlinfo(lm, RTLD_DI_SERINFOSIZE, &size) != 0 || size.dls_size < sizeof(Dl_serinfo))
        return NULL;
    Dl_serinfo *info = malloc(size.dls_size);
    if (info == NULL)
        return NULL;
    *info = size;
    if (dlinfo(lm, RTLD_DI_SERINFOSIZE, info) != 0 || dlinfo(lm, RTLD_DI_SERINFO, info) != 0) {
        free(info);
        return NULL;
    }
    return info;
}

static bool in_list(const Dl_serinfo *list, const char *dir)
{
    if (list == NULL)
        return false;
    for (unsigned i = 0; i < list->dls_cnt; i++)
        if (strcmp(list->dls_serpath[i].dls_name, dir) == 0)
            return true;
    return false;
}

/* memhook's own search path: what a bare-name dlopen from here searches. */
static Dl_serinfo *own_serinfo(void)
{
    static Dl_serinfo *own;
    static int done;
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        struct link_map *lm = caller_map((void *)&own_serinfo);
        Dl_serinfo *info = lm ? serinfo_of(lm) : NULL;
        Dl_serinfo *expected = NULL;
        if (!__atomic_compare_exchange_n(&own, &expected, info, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            free(info);
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    }
    return own;
}

static void *real_open(Lmid_t lmid, bool is_mopen, const char *file, int mode)
{
    t_in_real_dl++;
    void *h = is_mopen ? mh_real_dlmopen(lmid, file, mode) : mh_real_dlopen(file, mode);
    t_in_real_dl--;
    return h;
}

static bool caller_dir(struct link_map *lm, char *out, size_t cap)
{
    char exe[PATH_MAX];
    const char *path = lm->l_name;
    if (path == NULL || path[0] == '\0') {
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
            return false;
        exe[n] = '\0';
        path = exe;
    }
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return false;
    size_t len = (size_t)(slash - path);
    if (len + 1 > cap)
        return false;
    memcpy(out, path, len);
    out[len] = '\0';
    return true;
}

/* The name as the loader would resolve it for the caller: a path as is
 * (a leading $ORIGIN expanded), a loaded bare name by RTLD_NOLOAD, else the
 * caller's search path up to its last directory memhook's lacks, then the
 * bare name, which resolves the same for any caller. */
static void *open_as_caller(const void *caller, Lmid_t lmid, bool is_mopen, const char *file,
                            int mode)
{
    if (file == NULL || mh_reloc_inside || !mh_reloc_active() ||
        (is_mopen && lmid != LM_ID_BASE))
        return real_open(lmid, is_mopen, file, mode);
    struct link_map *lm = caller_map(caller);
    if (lm == NULL)
        return real_open(lmid, is_mopen, file, mode);
    char path[PATH_MAX];
    if (strchr(file, '/') != NULL) {
        size_t skip = strncmp(file, "$ORIGIN/", 8) == 0 ? 7
                      : strncmp(file, "${ORIGIN}/", 10) == 0 ? 9 : 0;
        if (skip && caller_dir(lm, path, sizeof(path)) &&
            strlen(path) + strlen(file + skip) < sizeof(path)) {
            strcat(path, file + skip);
            return real_open(lmid, is_mopen, path, mode);
        }
        return real_open(lmid, is_mopen, file, mode);
    }
    /* Already loaded (by name or soname)?  The loader checks that first. */
    void *h = real_open(lmid, is_mopen, file, mode | RTLD_NOLOAD);
    if (h != NULL)
        return h;
    Dl_serinfo *mine = serinfo_of(lm);
    if (mine != NULL) {
        Dl_serinfo *own = own_serinfo();
        int last = -1;
        for (unsigned i = 0; i < mine->dls_cnt; i++)
            if (!in_list(own, mine->dls_serpath[i].dls_name))
                last = (int)i;
        for (int i = 0; i <= last; i++) {
            const char *dir = mine->dls_serpath[i].dls_name;
            size_t dl = strlen(dir), fl = strlen(file);
            if (dl + fl + 2 > sizeof(path))
                continue;
            memcpy(path, dir, dl);
            if (dl == 0 || path[dl - 1] != '/')
                path[dl++] = '/';
            memcpy(path + dl, file, fl + 1);
            if (access(path, R_OK) != 0)
                continue;
            h = real_open(lmid, is_mopen, path, mode);
            if (h != NULL) {
                free(mine);
                return h;
            }
        }
        free(mine);
    }
    return real_open(lmid, is_mopen, file, mode);
}

/* Process-wide: registered by other layers' constructors, read by the
 * dlopen wrappers. */
#define MAX_LOAD_WATCHES 2
static void (*g_load_watches[MAX_LOAD_WATCHES])(void *);
static size_t g_nload_watches;

int mh_reloc_watch_load(void (*arrived)(void *))
{
    if (arrived == NULL)
        return EINVAL;
    if (g_nload_watches == MAX_LOAD_WATCHES)
        return ENOSPC;
    g_load_watches[g_nload_watches++] = arrived;
    return 0;
}

/* A refused open (h NULL) ends with the real call's error and nothing
 * after it; a successful one ends with dlerror() clear, whatever the
 * probes before it or the refresh after it left. */
static void after_open(void *h)
{
    if (h == NULL)
        return;
    if (t_in_real_dl == 0) {
        mh_reloc_refresh(h);
        mh_objects_changed_by_dl();  /* the trace's module records */
        for (size_t i = 0; i < g_nload_watches; i++)
            g_load_watches[i](h);
    }
    dl_clear_error();
}

void *mh_dlopen_wrapper(const char *file, int mode)
{
    void *h = open_as_caller(__builtin_return_address(0), LM_ID_BASE, false, file, mode);
    after_open(h);
    return h;
}

void *mh_dlmopen_wrapper(Lmid_t lmid, const char *file, int mode)
{
    void *h = open_as_caller(__builtin_return_address(0), lmid, true, file, mode);
    after_open(h);
    return h;
}

/* ---- unload watches ---- */

/* Process-wide: registered by the layers above in the core's load step
 * (nothing of memhook runs before it), read by the dlclose wrapper. */
#define MAX_WATCHES 4
static struct watch {
    const char *soname;
    void (*gone)(void);
} g_watches[MAX_WATCHES];
static size_t g_nwatches;

int mh_reloc_watch_unload(const char *soname, void (*gone)(void))
{
    if (soname == NULL || gone == NULL)
        return EINVAL;
    if (g_nwatches == MAX_WATCHES)
        return ENOSPC;
    g_watches[g_nwatches++] = (struct watch){soname, gone};
    return 0;
}

/* Whether soname is loaded (a reference taken and given back). */
static bool loaded(const char *soname)
{
    void *h = mh_real_dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (h != NULL)
        mh_real_dlclose(h);
    return h != NULL;
}

int mh_dlclose_wrapper(void *handle)
{
    if (!mh_reloc_active() || t_in_real_dl > 0 || mh_reloc_inside)
        return mh_real_dlclose(handle);
    /* Held across the real call: no walk may be between collecting an
     * object and writing its slots while it is unmapped. */
    mh_reloc_lock();
    t_in_real_dl++;
    bool had[MAX_WATCHES];
    for (size_t i = 0; i < g_nwatches; i++)
        had[i] = loaded(g_watches[i].soname);
    int r = mh_real_dlclose(handle);
    if (r != 0) {
        /* Refused (a handle closed once too often): nothing was unloaded,
         * and dlerror() says why - no dl call of memhook's after it. */
        t_in_real_dl--;
        mh_reloc_unlock();
        return r;
    }
    mh_registry_forget_unloaded();
    for (size_t i = 0; i < g_nwatches; i++)
        if (had[i] && !loaded(g_watches[i].soname))
            g_watches[i].gone();    /* its memory is gone: the watcher forgets it */
    t_in_real_dl--;
    mh_reloc_refresh(NULL);
    mh_reloc_unlock();
    mh_objects_changed_by_dl();  /* the trace's module records */
    dl_clear_error();
    return r;
}
