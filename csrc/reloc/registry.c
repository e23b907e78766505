/*
 * registry.c - the hooked names: what each one is replaced by and what the
 * loader binds it to.
 *
 * A fixed array of entries, appended under reloc's lock and published with
 * release stores (of the count, then of the hash bucket's head), so the
 * dlsym entry stub and the interposers read it without a lock.  Each
 * bucket's chain runs from the newest entry to the oldest: an append
 * prepends, and forgetting the user's entries (uninstall) moves each head
 * past them, leaving the older links as they were.
 *
 * Three kinds of entry, in this order: the loader entry points the engine
 * interposes itself (dlopen, dlmopen, dlclose, dlsym, dlvsym), the
 * interposers other layers registered (mh_reloc_interpose), then the
 * user's symbols.  The first two kinds stay across uninstall.  An entry
 * named "name@VERSION" matches only that needed version; a plain name
 * matches every version.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <string.h>

#include "reloc_int.h"

#define MAX_ENTRIES 1024
#define MAX_INTERPOSERS 4

/* Process-wide: the hooked-symbol set applies to every object of the one
 * address space.  Fixed arrays (no malloc) because the dlsym wrapper and
 * the interposers read them lock-free on any thread. */
static mh_reloc_entry g_entries[MAX_ENTRIES];
static size_t g_count;             /* published with release */
static size_t g_kept;              /* entries kept across uninstall */
static uint16_t g_bucket[256];     /* hash -> 1 + newest entry index */
static uint16_t g_chain[MAX_ENTRIES];

/* Process-wide: registered by the layers above in the core's load step
 * (single-threaded: nothing of memhook runs before it), read at the first
 * install. */
static struct interposer {
    const char *name;
    void *replacement;
    void **real;
} g_interposers[MAX_INTERPOSERS];
static size_t g_ninterposers;

int mh_reloc_interpose(const char *name, void *replacement, void **real)
{
    if (name == NULL || replacement == NULL || strlen(name) >= MH_RELOC_NAME_MAX ||
        strchr(name, '@') != NULL)
        return EINVAL;
    if (g_ninterposers == MAX_INTERPOSERS || __atomic_load_n(&g_count, __ATOMIC_ACQUIRE) != 0)
        return ENOSPC;
    g_interposers[g_ninterposers++] = (struct interposer){name, replacement, real};
    return 0;
}

static uint32_t hash_n(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n && s[i]; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* ---- the one lookup ---- */

int mh_registry_find(const char *name, const char *version)
{
    if (name == NULL)
        return -1;
    size_t len = strlen(name);
    uint32_t h = hash_n(name, len);
    size_t n = __atomic_load_n(&g_count, __ATOMIC_ACQUIRE);
    int plain = -1;
    for (unsigned i = __atomic_load_n(&g_bucket[h & 255u], __ATOMIC_ACQUIRE); i != 0;
         i = __atomic_load_n(&g_chain[i - 1], __ATOMIC_ACQUIRE)) {
        if (i > n)
            continue;   /* forgotten by an uninstall since this walk began */
        const mh_reloc_entry *e = &g_entries[i - 1];
        if (e->hash != h || e->plain_len != len || memcmp(e->name, name, len) != 0)
            continue;
        if (e->name[len] == '\0')
            plain = (int)(i - 1);
        else if (version && strcmp(e->name + len + 1, version) == 0)
            return (int)(i - 1);    /* an exact version match wins */
    }
    return plain;
}

mh_reloc_entry *mh_registry_entry(int index)
{
    return index >= 0 && (size_t)index < __atomic_load_n(&g_count, __ATOMIC_ACQUIRE)
               ? &g_entries[index]
               : NULL;
}

size_t mh_registry_count(void)
{
    return __atomic_load_n(&g_count, __ATOMIC_ACQUIRE);
}

/* ---- definitions ---- */

/* Lock-free (a dlsym from a constructor runs under the loader's lock and
 * must not wait for memhook's): the first definition learned wins. */
void mh_registry_set_definition(mh_reloc_entry *e, void *definition)
{
    void *expected = NULL;
    if (definition == NULL ||
        !__atomic_compare_exchange_n(&e->definition, &expected, definition, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    if (e->original_out)
        __atomic_store_n(e->original_out, definition, __ATOMIC_RELEASE);
}

void mh_reloc_note_definition(const char *name, void *definition)
{
    if (name == NULL || definition == NULL)
        return;
    mh_reloc_entry *e = mh_registry_entry(mh_registry_find(name, NULL));
    if (e != NULL && e->kind != MH_ENTRY_LOADER)
        mh_registry_set_definition(e, definition);
}

static struct link_map *owner_of(const void *addr)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (dladdr1(addr, &info, (void **)&lm, RTLD_DL_LINKMAP) == 0)
        return NULL;
    return lm;
}

/* Is `found` another library's definition of e's name - a defined symbol
 * of that name, elsewhere than the definition the replacement calls?  A
 * non-PIE executable's canonical PLT entry (an undefined symbol with a
 * value, which dlsym answers for functions whose address the executable
 * takes) is not: it jumps through the slot memhook rewrites. */
bool mh_registry_other_definition(const mh_reloc_entry *e, void *found)
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

void *mh_reloc_replacement(const char *name)
{
    const mh_reloc_entry *e = mh_reloc_active() ? mh_registry_entry(mh_registry_find(name, NULL))
                                                : NULL;
    return e ? e->replacement : NULL;
}

void *mh_reloc_replacement_for(const char *name, void *definition)
{
    const mh_reloc_entry *e = mh_reloc_active() ? mh_registry_entry(mh_registry_find(name, NULL))
                                                : NULL;
    /* Another library's definition of the name: see binds_elsewhere (walk.c). */
    return e && definition && !mh_registry_other_definition(e, definition) ? e->replacement
                                                                           : NULL;
}

void *mh_reloc_handle_of(struct link_map *lm)
{
    if (lm == NULL)
        return NULL;
    const char *path = (lm->l_name && lm->l_name[0]) ? lm->l_name : NULL;
    return mh_real_dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
}

void *mh_reloc_find_after(struct link_map *after, const char *name)
{
    for (struct link_map *lm = after ? after->l_next : NULL; lm; lm = lm->l_next) {
        void *h = mh_reloc_handle_of(lm);
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
void *mh_registry_resolve(const mh_reloc_entry *e, void *scope_handle)
{
    char plain[MH_RELOC_NAME_MAX];
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

/* After a dlclose (reloc's lock held): a definition whose object left the
 * process is forgotten, so that the next object defining the name (the
 * same library loaded again, at whatever address) is looked up afresh
 * (mh_registry_resolve_missing) - a definition kept would point into
 * unmapped memory, or into whatever was mapped there since.  A wrapper
 * meanwhile finds no original (mh_unresolved), as before the first load. */
void mh_registry_forget_unloaded(void)
{
    for (size_t i = 0; i < g_count; i++) {
        mh_reloc_entry *e = &g_entries[i];
        void *d = __atomic_load_n(&e->definition, __ATOMIC_ACQUIRE);
        if (e->kind == MH_ENTRY_LOADER || d == NULL || owner_of(d) != NULL)
            continue;
        if (__atomic_compare_exchange_n(&e->definition, &d, NULL, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE) && e->original_out)
            __atomic_store_n(e->original_out, NULL, __ATOMIC_RELEASE);
    }
}

void mh_registry_resolve_missing(void *scope_handle)
{
    for (size_t i = 0; i < g_count; i++)
        if (g_entries[i].kind != MH_ENTRY_LOADER && g_entries[i].definition == NULL)
            mh_registry_set_definition(&g_entries[i],
                                       mh_registry_resolve(&g_entries[i], scope_handle));
}

/* ---- adding and forgetting (under reloc's lock) ---- */

/* Add (or update) an entry; a new one is filled in before it is
 * published, so a lock-free reader sees it whole. */
static int add(const char *name, void *replacement, void **original_out, mh_entry_kind kind,
               void *definition)
{
    size_t len = strlen(name);
    if (len == 0 || len >= MH_RELOC_NAME_MAX)
        return EINVAL;
    for (size_t i = 0; i < g_count; i++) {
        mh_reloc_entry *e = &g_entries[i];
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
    mh_reloc_entry *e = &g_entries[g_count];
    memset(e, 0, sizeof(*e));
    memcpy(e->name, name, len + 1);
    const char *at = strchr(name, '@');
    e->plain_len = at ? (size_t)(at - name) : len;
    e->hash = hash_n(name, e->plain_len);
    e->replacement = replacement;
    e->original_out = original_out;
    e->kind = kind;
    e->definition = definition;
    unsigned b = e->hash & 255u;
    __atomic_store_n(&g_chain[g_count], g_bucket[b], __ATOMIC_RELAXED);
    __atomic_store_n(&g_count, g_count + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&g_bucket[b], (uint16_t)g_count, __ATOMIC_RELEASE);
    return 0;
}

int mh_registry_add(const char *name, void *replacement, void **original_out)
{
    return add(name, replacement, original_out, MH_ENTRY_USER, NULL);
}

/* The loader's entry points, taken from memhook's own GOT as the loader
 * bound it, at load: memhook never rewrites its own GOT, but another GOT
 * patcher loaded first may later (UCX's reloc points every object's dlopen
 * at its own, which re-applies its patches over memhook's slots), so they
 * are read before anyone else's code can have run on this object. */
void mh_registry_at_load(void)
{
    mh_real_dlsym = dlsym;
    mh_real_dlvsym = dlvsym;
    mh_real_dlopen = dlopen;
    mh_real_dlmopen = dlmopen;
    mh_real_dlclose = dlclose;
}

/* The entries that stay: the loader's entry points with their definitions
 * (libc's, captured at load), then the interposers. */
void mh_registry_add_kept(void)
{
    if (g_count > 0)
        return;
    const struct { const char *name; void *replacement, *definition; } loader[] = {
        {"dlopen", (void *)mh_dlopen_wrapper, (void *)mh_real_dlopen},
        {"dlmopen", (void *)mh_dlmopen_wrapper, (void *)mh_real_dlmopen},
        {"dlclose", (void *)mh_dlclose_wrapper, (void *)mh_real_dlclose},
        {"dlsym", (void *)mh_dlsym_entry, (void *)mh_real_dlsym},
        {"dlvsym", (void *)mh_dlvsym_entry, (void *)mh_real_dlvsym},
    };
    for (size_t i = 0; i < sizeof loader / sizeof loader[0]; i++)
        add(loader[i].name, loader[i].replacement, NULL, MH_ENTRY_LOADER, loader[i].definition);
    for (size_t i = 0; i < g_ninterposers; i++)
        add(g_interposers[i].name, g_interposers[i].replacement, g_interposers[i].real,
            MH_ENTRY_INTERPOSER, NULL);
    g_kept = g_count;
}

void mh_registry_forget_user(void)
{
    if (g_count <= g_kept)
        return;
    __atomic_store_n(&g_count, g_kept, __ATOMIC_RELEASE);
    /* Chains run newest first, so every user entry precedes the kept ones:
     * moving each head past them is the whole change. */
    for (unsigned b = 0; b < 256; b++) {
        unsigned i = g_bucket[b];
        while (i > g_kept)
            i = g_chain[i - 1];
        __atomic_store_n(&g_bucket[b], (uint16_t)i, __ATOMIC_RELEASE);
    }
}
