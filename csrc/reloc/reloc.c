/*
 * reloc.c - the registry of hooked names, the records of every slot memhook
 * changed, and the dl_iterate_phdr walks that apply them.
 *
 * Registry: a fixed array of entries, appended under the lock and published
 * with a release store of the count, so the dlsym entry stub and the
 * cuGetProcAddress wrappers read it without a lock.  Entries 0..N_INTERNAL-1
 * are the loader and CUDA entry points the engine interposes itself
 * (dlopen, dlmopen, dlclose, dlsym, dlvsym, cuGetProcAddress(_v2)); the
 * user's symbols follow.  An entry named "name@VERSION" matches only that
 * needed version; a plain name matches every version.
 *
 * Objects: one record per loaded object memhook has seen (keyed by load bias
 * + program-header address), holding the slots it changed and their
 * previous values.  A walk collects the loaded objects inside
 * dl_iterate_phdr (the loader's lock is held there: nothing but copying
 * happens in the callback), then patches outside it.  A walk whose
 * dlpi_adds/dlpi_subs counters did not move since the last one stops at the
 * first object: that is what makes a dlopen of an already-loaded library
 * nearly free.  An object that vanished is forgotten without touching its
 * memory; at install, one whose first changed slot no longer holds our
 * pointer was unloaded and another mapped at the same place, and is patched
 * afresh.  Every object is pinned (dlopen RTLD_NOLOAD) while its slots are
 * written, so a dlclose in another thread cannot unmap it under us; the
 * maps snapshot is read after pinning.  A refresh after dlopen/dlclose pins
 * and patches only the objects it has not seen.
 *
 * Never patched: memhook's own object (found by the address of a local
 * function), so every dl* call memhook makes reaches libc; and the dynamic
 * linker (AT_BASE).  In a non-base link-map namespace (dlmopen) only the
 * user's symbols are rewritten: its dl* functions belong to another libc.
 *
 * Lock order: memhook's recursive mutex, then the loader's lock (taken by
 * dl_iterate_phdr / dlopen inside).  The dlopen wrapper does not hold the
 * mutex across the real dlopen (constructors may start threads that dlopen);
 * the dlclose wrapper does, so that no object is unmapped between a walk's
 * collection and its writes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "log.h"
#include "reloc.h"

/* The real dl* and cuGetProcAddress entry points: process-wide because the
 * functions they name are (one loader, one driver per process); written once
 * under g_lock before any wrapper can run, then only read. */
mh_dlsym_fn mh_real_dlsym;
mh_dlvsym_fn mh_real_dlvsym;
mh_dlopen_fn mh_real_dlopen;
mh_dlmopen_fn mh_real_dlmopen;
mh_dlclose_fn mh_real_dlclose;
void *mh_real_cuGetProcAddress;
void *mh_real_cuGetProcAddress_v2;
/* Per thread: set while a wrapper runs, so a hook reached from inside
 * memhook never recurses. */
__thread int mh_reloc_inside __attribute__((tls_model("initial-exec")));

#define MAX_ENTRIES 1024
#define NAME_MAX_LEN 160
#define N_INTERNAL 7
#define N_DL 5      /* the first N_DL internal entries are libc's dl* */

typedef struct entry {
    char name[NAME_MAX_LEN];   /* as registered: "name" or "name@VERSION" */
    size_t plain_len;          /* length of the part before '@' */
    uint32_t hash;             /* of the plain part */
    void *replacement;
    void **original_out;       /* user's pointer, or NULL */
    void *definition;          /* what the loader binds the name to */
    void **real_store;         /* internal entries: memhook's copy of the real */
} entry;

/* Process-wide: the hooked-symbol set applies to every object of the one
 * address space.  Fixed arrays (no malloc) because the dlsym and
 * cuGetProcAddress wrappers read them lock-free on any thread; entries are
 * appended under g_lock and published with release stores. */
static entry g_entries[MAX_ENTRIES];
static size_t g_count;          /* published with release */
static int g_active;            /* published with release */
static uint16_t g_bucket[256];  /* hash -> 1 + first entry index */
static uint16_t g_chain[MAX_ENTRIES];

typedef struct record {
    void **slot;
    void *old;          /* the slot's value before memhook wrote it */
    void *now;          /* what memhook wrote */
    uint32_t entry;
} record;

typedef struct object {
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    size_t phnum;
    bool seen;          /* during a walk */
    bool base_ns;
    struct link_map *lm;
    char *name;         /* copy of the loader's name, to pin the object */
    record *recs;
    size_t nrecs, cap;
} object;

/* Process-wide record of every object walked and every slot written (what
 * uninstall restores); guarded by g_lock. */
static object *g_objs;
static size_t g_nobjs, g_objcap;
static unsigned long long g_adds = ~0ULL, g_subs = ~0ULL;
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
 * the child's thread does not have), so it makes the lock afresh.  Callers
 * that nest their own lock outside this one (install.c) register their
 * handlers after mh_reloc_init(), so that their prepare runs first. */
static void fork_prepare(void) { mh_reloc_lock(); }
static void fork_parent(void) { mh_reloc_unlock(); }
static void fork_child(void)
{
    int depth = t_lock_depth - 1;
    make_lock();
    t_lock_depth = 0;
    while (depth-- > 0)
        mh_reloc_lock();
}

static void init_lock(void)
{
    make_lock();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void mh_reloc_init(void)
{
    pthread_once(&g_lock_once, init_lock);
}

void mh_reloc_lock(void)
{
    mh_reloc_init();
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

static uint32_t hash_n(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n && s[i]; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* ---- lookups ---- */

/* The installed entry for a plain name (lock-free), or NULL. */
static const entry *installed_entry(const char *name)
{
    if (name == NULL || !mh_reloc_active())
        return NULL;
    size_t n = __atomic_load_n(&g_count, __ATOMIC_ACQUIRE);
    size_t len = strlen(name);
    uint32_t h = hash_n(name, len);
    for (size_t i = 0; i < n; i++) {
        const entry *e = &g_entries[i];
        if (e->hash == h && e->plain_len == len && e->name[len] == '\0' &&
            memcmp(e->name, name, len) == 0)
            return e;
    }
    return NULL;
}

void *mh_reloc_replacement(const char *name)
{
    const entry *e = installed_entry(name);
    return e ? e->replacement : NULL;
}

/* Is `found` another library's definition of e's name - a defined symbol
 * of that name, elsewhere than the definition the replacement calls?  A
 * non-PIE executable's canonical PLT entry (an undefined symbol with a
 * value, which dlsym answers for functions whose address the executable
 * takes) is not: it jumps through the slot memhook rewrites. */
static bool other_definition(const entry *e, void *found)
{
    void *known = __atomic_load_n(&e->definition, __ATOMIC_ACQUIRE);
    if (known == NULL || found == NULL || found == known || found == e->replacement)
        return false;
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (dladdr1(found, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL ||
        sym->st_shndx == SHN_UNDEF || info.dli_saddr != found || info.dli_sname == NULL)
        return false;
    return strncmp(info.dli_sname, e->name, e->plain_len) == 0 &&
           info.dli_sname[e->plain_len] == '\0';
}

void *mh_reloc_replacement_for(const char *name, void *definition)
{
    const entry *e = installed_entry(name);
    /* Another library's definition of the name: see binds_elsewhere. */
    return e && definition && !other_definition(e, definition) ? e->replacement : NULL;
}

static int entry_for(const char *name, size_t len)
{
    size_t n = __atomic_load_n(&g_count, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++)
        if (g_entries[i].plain_len == len && g_entries[i].name[len] == '\0' &&
            memcmp(g_entries[i].name, name, len) == 0)
            return (int)i;
    return -1;
}

/* Lock-free (a dlsym from a constructor runs under the loader's lock and
 * must not wait for memhook's): the first definition learned wins. */
static void set_definition(entry *e, void *definition)
{
    void *expected = NULL;
    if (definition == NULL ||
        !__atomic_compare_exchange_n(&e->definition, &expected, definition, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    if (e->original_out)
        __atomic_store_n(e->original_out, definition, __ATOMIC_RELEASE);
    if (e->real_store)
        __atomic_store_n(e->real_store, definition, __ATOMIC_RELEASE);
}

void mh_reloc_note_definition(const char *name, void *definition)
{
    if (name == NULL || definition == NULL)
        return;
    /* The real entry points are worth keeping even while inactive. */
    if (strcmp(name, "cuGetProcAddress") == 0 && mh_real_cuGetProcAddress == NULL)
        __atomic_store_n(&mh_real_cuGetProcAddress, definition, __ATOMIC_RELEASE);
    if (strcmp(name, "cuGetProcAddress_v2") == 0 && mh_real_cuGetProcAddress_v2 == NULL)
        __atomic_store_n(&mh_real_cuGetProcAddress_v2, definition, __ATOMIC_RELEASE);
    int i = entry_for(name, strlen(name));
    if (i >= N_DL)
        set_definition(&g_entries[i], definition);
}

/* The object a (link-map chain) handle for lm: dlopen by name with
 * RTLD_NOLOAD, so dlsym sees a fully set-up search list. */
static void *handle_of(struct link_map *lm)
{
    if (lm == NULL)
        return NULL;
    const char *path = (lm->l_name && lm->l_name[0]) ? lm->l_name : NULL;
    return mh_real_dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
}

static struct link_map *owner_of(const void *addr)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0)
        return NULL;
    return lm;
}

void *mh_reloc_find_after(struct link_map *after, const char *name)
{
    for (struct link_map *lm = after ? after->l_next : NULL; lm; lm = lm->l_next) {
        void *h = handle_of(lm);
        if (h == NULL)
            continue;
        void *v = mh_real_dlsym(h, name);
        mh_real_dlclose(h);
        if (v != NULL && owner_of(v) == lm)
            return v;
    }
    return NULL;
}

/* What the loader binds `name` to for the global scope.  In a non-PIE
 * executable that takes a function's address, dlsym answers the executable's
 * canonical PLT entry, which jumps through the very slot memhook rewrites;
 * the definition is then looked up in the objects after the executable. */
static void *resolve_definition(const entry *e, void *scope_handle)
{
    char plain[NAME_MAX_LEN];
    memcpy(plain, e->name, e->plain_len);
    plain[e->plain_len] = '\0';
    const char *version = e->name[e->plain_len] == '@' ? e->name + e->plain_len + 1 : NULL;
    void *h = scope_handle ? scope_handle : RTLD_DEFAULT;
    void *r = version ? mh_real_dlvsym(h, plain, version) : mh_real_dlsym(h, plain);
    if (r == NULL)
        return NULL;
    /* dladdr reports a canonical PLT entry as the symbol itself (an
     * undefined symbol with a value): look at the symbol table entry. */
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    struct link_map *lm = owner_of(r);
    if (lm != NULL && lm->l_prev == NULL &&
        dladdr1(r, &info, (void **)&sym, RTLD_DL_SYMENT) != 0 &&
        (sym == NULL || sym->st_shndx == SHN_UNDEF || info.dli_saddr != r)) {
        void *next = mh_reloc_find_after(lm, plain);
        if (next != NULL)
            return next;
    }
    return r;
}

/* ---- registry ---- */

static void rebuild_buckets(void)
{
    memset(g_bucket, 0, sizeof(g_bucket));
    for (size_t i = g_count; i-- > 0;) {
        unsigned b = g_entries[i].hash & 255u;
        g_chain[i] = g_bucket[b];
        g_bucket[b] = (uint16_t)(i + 1);
    }
}

static int add_entry(const char *name, void *replacement, void **original_out, void **real_store)
{
    size_t len = strlen(name);
    if (len == 0 || len >= NAME_MAX_LEN)
        return EINVAL;
    for (size_t i = 0; i < g_count; i++) {
        entry *e = &g_entries[i];
        if (strcmp(e->name, name) == 0) {
            e->replacement = replacement;
            if (original_out && e->original_out != original_out) {
                e->original_out = original_out;
                if (e->definition)
                    *original_out = e->definition;
            }
            return 0;
        }
    }
    if (g_count >= MAX_ENTRIES)
        return ENOSPC;
    entry *e = &g_entries[g_count];
    memset(e, 0, sizeof(*e));
    memcpy(e->name, name, len + 1);
    const char *at = strchr(name, '@');
    e->plain_len = at ? (size_t)(at - name) : len;
    e->hash = hash_n(name, e->plain_len);
    e->replacement = replacement;
    e->original_out = original_out;
    e->real_store = real_store;
    __atomic_store_n(&g_count, g_count + 1, __ATOMIC_RELEASE);
    return 0;
}

static void add_internal_entries(void)
{
    if (g_count >= N_INTERNAL)
        return;
    mh_real_dlsym = dlsym;      /* memhook's own GOT is never rewritten */
    mh_real_dlvsym = dlvsym;
    mh_real_dlopen = dlopen;
    mh_real_dlmopen = dlmopen;
    mh_real_dlclose = dlclose;
    add_entry("dlopen", (void *)mh_dlopen_wrapper, NULL, NULL);
    add_entry("dlmopen", (void *)mh_dlmopen_wrapper, NULL, NULL);
    add_entry("dlclose", (void *)mh_dlclose_wrapper, NULL, NULL);
    add_entry("dlsym", (void *)mh_dlsym_entry, NULL, NULL);
    add_entry("dlvsym", (void *)mh_dlvsym_entry, NULL, NULL);
    add_entry("cuGetProcAddress", (void *)mh_cuGetProcAddress_wrapper, NULL,
              &mh_real_cuGetProcAddress);
    add_entry("cuGetProcAddress_v2", (void *)mh_cuGetProcAddress_v2_wrapper, NULL,
              &mh_real_cuGetProcAddress_v2);
    g_entries[0].definition = (void *)mh_real_dlopen;
    g_entries[1].definition = (void *)mh_real_dlmopen;
    g_entries[2].definition = (void *)mh_real_dlclose;
    g_entries[3].definition = (void *)mh_real_dlsym;
    g_entries[4].definition = (void *)mh_real_dlvsym;
}

/* ---- objects and walks ---- */

typedef struct seen_obj {
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    size_t phnum;
    const char *name;
} seen_obj;

typedef struct collect {
    seen_obj *list;
    size_t count, cap;
    bool unchanged;
    bool failed;
    unsigned long long adds, subs;
} collect;

static int collect_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    collect *c = data;
    if (c->count == 0 && size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
        c->adds = info->dlpi_adds;
        c->subs = info->dlpi_subs;
        if (c->unchanged && c->adds == g_adds && c->subs == g_subs)
            return 1;   /* nothing loaded or unloaded since the last walk */
        c->unchanged = false;
    }
    if (c->count == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        seen_obj *grown = realloc(c->list, cap * sizeof(*grown));
        if (grown == NULL) {
            c->failed = true;
            return 1;
        }
        c->list = grown;
        c->cap = cap;
    }
    c->list[c->count++] = (seen_obj){info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum,
                                     info->dlpi_name};
    return 0;
}

static bool is_self(uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum)
{
    return mh_phdr_contains(base, phdr, phnum, (uintptr_t)&is_self);
}

static bool is_loader(uintptr_t base)
{
    uintptr_t at_base = (uintptr_t)getauxval(AT_BASE);
    return at_base != 0 && base == at_base;
}

static record *find_record(object *o, void **slot)
{
    for (size_t i = 0; i < o->nrecs; i++)
        if (o->recs[i].slot == slot)
            return &o->recs[i];
    return NULL;
}

static int slot_prot(const object *o, void **slot)
{
    return mh_elf_prot(o->base, o->phdr, o->phnum, (uintptr_t)slot);
}

typedef struct patch_ctx {
    object *obj;
    const mh_maps *maps;
    size_t written;
    int error;
} patch_ctx;

static int match_entry(const mh_elf_reloc *rel)
{
    size_t len = strlen(rel->name);
    uint32_t h = hash_n(rel->name, len);
    int plain = -1;
    for (unsigned i = g_bucket[h & 255u]; i != 0; i = g_chain[i - 1]) {
        const entry *e = &g_entries[i - 1];
        if (e->hash != h || e->plain_len != len || memcmp(e->name, rel->name, len) != 0)
            continue;
        if (e->name[len] == '\0') {
            if (plain < 0)
                plain = (int)(i - 1);
        } else if (rel->version && strcmp(e->name + len + 1, rel->version) == 0) {
            return (int)(i - 1);    /* an exact version match wins */
        }
    }
    return plain;
}

/* Does this slot bind `e`'s name to ANOTHER library's definition than the
 * one the replacement calls?  Two versions of a library can be loaded side
 * by side, each with its own users (libcudart.so.12 and .so.13 under
 * RTLD_LOCAL, one for CuPy and one for PyTorch); the replacement calls one
 * definition, the first learned, so routing the other's users through it
 * would hand their calls to the wrong library.  Such slots are left alone.
 * A lazy slot not bound yet (it points into the object's own PLT) is judged
 * by what the object's scope would bind.  A slot holding something that is
 * not a definition of the name (another tool's hook) is not "another
 * definition": it is patched as before. */
static bool binds_elsewhere(const mh_elf_object *elf, object *o, const mh_elf_reloc *rel,
                            const entry *e)
{
    void *bound = *rel->slot;
    if (bound == e->replacement || bound == e->definition || e->definition == NULL)
        return false;
    if (bound == NULL || mh_elf_contains(elf, (uintptr_t)bound)) {
        void *h = handle_of(o->lm);
        bound = h ? resolve_definition(e, h) : NULL;
        if (h)
            mh_real_dlclose(h);
        if (bound == NULL || bound == e->definition)
            return false;
    }
    if (!other_definition(e, bound))
        return false;
    Dl_info info;
    mh_info("reloc: %s binds %s to %s, not the definition memhook calls; left alone",
            o->name && o->name[0] ? o->name : "the executable", e->name,
            dladdr(bound, &info) && info.dli_fname ? info.dli_fname : "?");
    return true;
}

static bool patch_reloc(const mh_elf_object *elf, const mh_elf_reloc *rel, void *data)
{
    patch_ctx *pc = data;
    object *o = pc->obj;
    int idx = match_entry(rel);
    if (idx < 0)
        return true;
    if (idx < N_INTERNAL && !o->base_ns)
        return true;
    if (rel->type == R_X86_64_64 && rel->addend != 0)
        return true;
    entry *e = &g_entries[idx];
    if (e->replacement == NULL)
        return true;
    if (e->definition == NULL && idx >= N_DL) {
        /* Bound inside a local scope (RTLD_LOCAL): ask this object's scope. */
        void *h = handle_of(o->lm);
        if (h) {
            set_definition(e, resolve_definition(e, h));
            mh_real_dlclose(h);
        }
    }
    if (idx >= N_INTERNAL && find_record(o, rel->slot) == NULL && binds_elsewhere(elf, o, rel, e))
        return true;
    record *r = find_record(o, rel->slot);
    if (r != NULL) {
        if (r->now != e->replacement || *rel->slot != e->replacement) {
            if (*rel->slot != r->now)
                r->old = *rel->slot;    /* someone rebound it (lazy binding) */
            if (mh_got_write(pc->maps, rel->slot, e->replacement, slot_prot(o, rel->slot)) == 0)
                r->now = e->replacement;
        }
        return true;
    }
    if (o->nrecs == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 8;
        record *grown = realloc(o->recs, cap * sizeof(*grown));
        if (grown == NULL) {
            pc->error = ENOMEM;
            return false;
        }
        o->recs = grown;
        o->cap = cap;
    }
    void *old = *rel->slot;
    int err = mh_got_write(pc->maps, rel->slot, e->replacement, slot_prot(o, rel->slot));
    if (err != 0) {
        mh_warn("reloc: %s: cannot rewrite the slot of %s at %p: %s",
                elf->name[0] ? elf->name : "(executable)", rel->name, (void *)rel->slot,
                strerror(err));
        pc->error = err;
        return true;
    }
    o->recs[o->nrecs++] = (record){rel->slot, old, e->replacement, (uint32_t)idx};
    pc->written++;
    (void)elf;
    return true;
}

static int patch_object(object *o, const mh_maps *maps, const char *name)
{
    mh_elf_object elf;
    if (!mh_elf_parse(o->base, name, o->phdr, o->phnum, &elf))
        return 0;
    patch_ctx pc = {o, maps, 0, 0};
    mh_elf_for_each_reloc(&elf, patch_reloc, &pc);
    if (pc.written)
        mh_debug("reloc: %s: %zu slot(s) rewritten", name[0] ? name : "(executable)",
                 pc.written);
    return pc.error;
}

/* Take a reference on a collected object so that a dlclose in another
 * thread (one that does not pass through memhook's wrapper) cannot unmap it
 * while its slots are written.  NULL: it is gone (or was never dlopen-able,
 * the vDSO): skip it.  The executable is never unloaded. */
static void *pin(const char *name, uintptr_t base)
{
    void *h = mh_real_dlopen(name && name[0] ? name : NULL, RTLD_LAZY | RTLD_NOLOAD);
    if (h != NULL && ((struct link_map *)h)->l_addr != base) {
        mh_real_dlclose(h);     /* another object of that name: not ours */
        return NULL;
    }
    return h;
}

static void drop_object(size_t i)
{
    free(g_objs[i].recs);
    free(g_objs[i].name);
    g_objs[i] = g_objs[--g_nobjs];
}

static object *find_object(uintptr_t base, const ElfW(Phdr) *phdr)
{
    for (size_t i = 0; i < g_nobjs; i++)
        if (g_objs[i].base == base && g_objs[i].phdr == phdr)
            return &g_objs[i];
    return NULL;
}

/* The walk: collect, forget unloaded objects, patch new ones (all of them
 * when full).  Caller holds the lock. */
static int walk(bool full, bool patch)
{
    collect c = {NULL, 0, 0, !full, false, 0, 0};
    dl_iterate_phdr(collect_cb, &c);
    if (c.failed) {
        free(c.list);
        return ENOMEM;
    }
    if (c.unchanged && c.count <= 1) {
        free(c.list);
        return 0;
    }
    g_adds = c.adds;
    g_subs = c.subs;
    for (size_t i = 0; i < g_nobjs; i++)
        g_objs[i].seen = false;
    /* Pin every collected object first, then read the maps: a pinned object
     * is fully loaded (RELRO applied) and stays mapped while we write, so
     * the snapshot describes exactly the pages we touch. */
    void **pins = patch ? calloc(c.count ? c.count : 1, sizeof(void *)) : NULL;
    if (patch && pins == NULL) {
        free(c.list);
        return ENOMEM;
    }
    /* A full walk (install) pins and may write every object; a refresh
     * (after dlopen/dlclose) only the ones it has not seen yet. */
    size_t to_patch = 0;
    for (size_t k = 0; patch && k < c.count; k++) {
        if (!full && find_object(c.list[k].base, c.list[k].phdr) != NULL)
            continue;
        pins[k] = pin(c.list[k].name, c.list[k].base);
        to_patch += pins[k] != NULL;
    }
    mh_maps maps = {NULL, 0};
    /* Reading /proc/self/maps costs ~1 ms with a few hundred objects; a
     * dlopen-time refresh writes only freshly loaded (pinned, so fully
     * relocated) objects, whose page protections are exactly what their
     * program headers say (PT_GNU_RELRO read-only, else PT_LOAD's flags). */
    int err = (patch && to_patch && full) ? mh_maps_read(&maps) : 0;
    int result = err;
    for (size_t k = 0; k < c.count && err == 0; k++) {
        seen_obj *s = &c.list[k];
        object *o = find_object(s->base, s->phdr);
        bool fresh = false;
        if (!patch || (!full && o != NULL)) {
            if (o != NULL)
                o->seen = true;
            continue;
        }
        void *pinned = pins[k];
        if (pinned == NULL)
            continue;   /* unloaded since collected: forgotten below */
        if (o != NULL) {
            o->seen = true;
            /* Unloaded and another object mapped at the same place? */
            if (o->nrecs && mh_maps_prot(&maps, (uintptr_t)o->recs[0].slot) >= 0 &&
                *o->recs[0].slot != o->recs[0].now) {
                o->nrecs = 0;
                fresh = true;
            }
        } else {
            if (is_self(s->base, s->phdr, s->phnum) || is_loader(s->base))
                continue;
            if (g_nobjs == g_objcap) {
                size_t cap = g_objcap ? g_objcap * 2 : 256;
                object *grown = realloc(g_objs, cap * sizeof(*grown));
                if (grown == NULL) {
                    result = ENOMEM;
                    break;
                }
                g_objs = grown;
                g_objcap = cap;
            }
            o = &g_objs[g_nobjs++];
            memset(o, 0, sizeof(*o));
            o->base = s->base;
            o->phdr = s->phdr;
            o->phnum = s->phnum;
            o->seen = true;
            o->base_ns = true;
            o->lm = pinned;     /* glibc: a handle is the object's link_map */
            o->name = strdup(s->name ? s->name : "");
            Lmid_t lmid = LM_ID_BASE;
            if (dlinfo(o->lm, RTLD_DI_LMID, &lmid) == 0 && lmid != LM_ID_BASE)
                o->base_ns = false;
            fresh = true;
        }
        if (fresh || full) {
            int e = patch_object(o, &maps, s->name ? s->name : "");
            if (e != 0 && result == 0)
                result = e;
        }
    }
    if (err != 0) {   /* no snapshot: keep what we knew */
        for (size_t i = 0; i < g_nobjs; i++)
            g_objs[i].seen = true;
    }
    for (size_t k = 0; patch && k < c.count; k++)
        if (pins[k])
            mh_real_dlclose(pins[k]);
    free(pins);
    for (size_t i = g_nobjs; i-- > 0;)
        if (!g_objs[i].seen)
            drop_object(i);
    mh_maps_free(&maps);
    free(c.list);
    return result;
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
            strlen(symbols[i].name) >= NAME_MAX_LEN || symbols[i].name[0] == '\0') {
            format_why(why, why_len, "symbol %zu: name missing or too long, or no replacement", i);
            return EINVAL;
        }
    }
    mh_reloc_lock();
    mh_reloc_inside++;
    add_internal_entries();
    int err = 0;
    for (size_t i = 0; i < count && err == 0; i++) {
        err = add_entry(symbols[i].name, symbols[i].replacement, symbols[i].original, NULL);
        if (err)
            format_why(why, why_len, "cannot register %s: %s", symbols[i].name, strerror(err));
    }
    rebuild_buckets();
    if (err == 0) {
        for (size_t i = N_DL; i < g_count; i++)
            set_definition(&g_entries[i], resolve_definition(&g_entries[i], NULL));
        __atomic_store_n(&g_active, 1, __ATOMIC_RELEASE);
        err = walk(true, true);
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
        walk(false, true);
        if (new_handle) {
            for (size_t i = N_DL; i < g_count; i++)
                if (g_entries[i].definition == NULL)
                    set_definition(&g_entries[i], resolve_definition(&g_entries[i], new_handle));
        }
    }
    mh_reloc_inside--;
    mh_reloc_unlock();
}

int memhook_reloc_uninstall(void)
{
    mh_reloc_lock();
    mh_reloc_inside++;
    int result = 0;
    if (g_count > 0) {
        walk(false, false);     /* forget objects that are gone */
        void **pins = calloc(g_nobjs ? g_nobjs : 1, sizeof(void *));
        for (size_t i = 0; pins && i < g_nobjs; i++)
            pins[i] = pin(g_objs[i].name, g_objs[i].base);
        mh_maps maps = {NULL, 0};
        result = pins ? mh_maps_read(&maps) : ENOMEM;
        if (result == 0) {
            for (size_t i = 0; i < g_nobjs; i++) {
                object *o = &g_objs[i];
                void *pinned = pins[i];
                for (size_t j = pinned ? o->nrecs : 0; j-- > 0;) {
                    record *r = &o->recs[j];
                    if (*r->slot != r->now)
                        continue;   /* rebound by someone else since: leave it */
                    int err = mh_got_write(&maps, r->slot, r->old, slot_prot(o, r->slot));
                    if (err && result == 0)
                        result = err;
                }
                if (pinned)
                    mh_real_dlclose(pinned);
                free(o->recs);
                free(o->name);
            }
            g_nobjs = 0;
            mh_maps_free(&maps);
        } else {
            for (size_t i = 0; pins && i < g_nobjs; i++)
                if (pins[i])
                    mh_real_dlclose(pins[i]);
        }
        free(pins);
        __atomic_store_n(&g_active, 0, __ATOMIC_RELEASE);
        if (g_count > N_INTERNAL) {
            __atomic_store_n(&g_count, (size_t)N_INTERNAL, __ATOMIC_RELEASE);
            rebuild_buckets();
        }
        g_adds = g_subs = ~0ULL;
    }
    mh_reloc_inside--;
    mh_reloc_unlock();
    return result;
}

size_t memhook_reloc_patched_slots(void)
{
    mh_reloc_lock();
    size_t n = 0;
    for (size_t i = 0; i < g_nobjs; i++)
        for (size_t j = 0; j < g_objs[i].nrecs; j++)
            if (g_objs[i].recs[j].entry >= N_INTERNAL &&
                *g_objs[i].recs[j].slot == g_objs[i].recs[j].now)
                n++;
    mh_reloc_unlock();
    return n;
}
