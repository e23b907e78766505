/*
 * walk.c - the loaded objects memhook has seen, the slots it changed in
 * each, and the dl_iterate_phdr walk that brings them up to date.
 *
 * One record per loaded object (keyed by load bias + program-header
 * address), holding the slots it changed and their previous values.  A
 * walk collects the loaded objects inside dl_iterate_phdr (the loader's
 * lock is held there: nothing but copying happens in the callback), then
 * works outside it.  What it does is the operation asked for:
 *
 *   MH_WALK_INSTALL  pin and patch every object (new and known);
 *   MH_WALK_REFRESH  pin and patch only objects not seen before (after a
 *                    dlopen/dlclose);
 *   MH_WALK_FORGET   patch nothing.
 *
 * Every operation forgets the objects that vanished, without touching
 * their memory.  A walk whose dlpi_adds/dlpi_subs counters did not move
 * since the last one stops at the first object (refresh and forget): that
 * is what makes a dlopen of an already-loaded library nearly free.  At
 * install, an object whose first changed slot no longer holds our pointer
 * was unloaded and another mapped at the same place, and is patched
 * afresh.  Every object is pinned (dlopen RTLD_NOLOAD) while its slots are
 * written, so a dlclose in another thread cannot unmap it under us; the
 * maps snapshot is read after pinning.
 *
 * Never patched: memhook's own object (found by the address of a local
 * function), so every dl* call memhook makes reaches libc; and the dynamic
 * linker (AT_BASE).  In a non-base link-map namespace (dlmopen) only the
 * user's symbols are rewritten: its dl* functions belong to another libc,
 * and the interposers' entry points to another copy of their library.
 *
 * Everything here runs under reloc's lock.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "log.h"
#include "reloc_int.h"

typedef struct record {
    void **slot;
    void *old;          /* the slot's value before memhook wrote it */
    void *now;          /* what memhook wrote */
    bool user;          /* for one of the user's symbols (what patched_slots counts) */
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
 * uninstall restores); guarded by reloc's lock. */
static object *g_objs;
static size_t g_nobjs, g_objcap;
static unsigned long long g_adds = ~0ULL, g_subs = ~0ULL;

/* ---- collecting ---- */

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

/* ---- patching one object ---- */

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

/* Does this slot bind `e`'s name to ANOTHER library's definition than the
 * one the replacement calls?  Two versions of a library can be loaded side
 * by side, each with its own users (a runtime's .so.12 and .so.13 under
 * RTLD_LOCAL, one for each of two frameworks); the replacement calls one
 * definition, the first learned, so routing the other's users through it
 * would hand their calls to the wrong library.  Such slots are left alone.
 * A lazy slot not bound yet (it points into the object's own PLT) is judged
 * by what the object's scope would bind.  A slot holding something that is
 * not a definition of the name at all is another tool's hook (UCX's UCM
 * puts its own there): it is left alone too.  Writing over it would take
 * that tool out (memhook's wrapper calls the definition, not the hook),
 * and such a tool re-applies its slots when objects load, so the two would
 * take the slot from each other; the tool's hook calls on to the
 * definition, where memhook's entry patch (or, through a dlsym, its
 * wrapper) still sees the call. */
static bool binds_elsewhere(const mh_elf_object *elf, object *o, const mh_elf_reloc *rel,
                            const mh_reloc_entry *e)
{
    void *bound = *rel->slot;
    if (bound == e->replacement || bound == e->definition || e->definition == NULL)
        return false;
    if (bound == NULL || mh_elf_contains(elf, (uintptr_t)bound)) {
        void *h = mh_reloc_handle_of(o->lm);
        bound = h ? mh_registry_resolve(e, h) : NULL;
        if (h)
            mh_real_dlclose(h);
        if (bound == NULL || bound == e->definition)
            return false;
    }
    Dl_info info;
    mh_info("reloc: %s binds %s to %s (%s), not the definition memhook calls; left alone",
            o->name && o->name[0] ? o->name : "the executable", e->name,
            dladdr(bound, &info) && info.dli_fname ? info.dli_fname : "?",
            mh_registry_other_definition(e, bound) ? "another library's definition"
                                                   : "another tool's hook");
    return true;
}

/* Which entry this relocation's slot should hold, or NULL to leave it. */
static const mh_reloc_entry *entry_for_slot(const mh_elf_object *elf, object *o,
                                      const mh_elf_reloc *rel)
{
    mh_reloc_entry *e = mh_registry_entry(mh_registry_find(rel->name, rel->version));
    if (e == NULL || (e->kind != MH_ENTRY_USER && !o->base_ns))
        return NULL;
    if (rel->type == R_X86_64_64 && rel->addend != 0)
        return NULL;
    if (e->replacement == NULL)
        return NULL;
    if (e->definition == NULL && e->kind != MH_ENTRY_LOADER) {
        /* Bound inside a local scope (RTLD_LOCAL): ask this object's scope. */
        void *h = mh_reloc_handle_of(o->lm);
        if (h) {
            mh_registry_set_definition(e, mh_registry_resolve(e, h));
            mh_real_dlclose(h);
        }
    }
    if (e->kind == MH_ENTRY_USER && find_record(o, rel->slot) == NULL &&
        binds_elsewhere(elf, o, rel, e))
        return NULL;
    return e;
}

static bool patch_reloc(const mh_elf_object *elf, const mh_elf_reloc *rel, void *data)
{
    patch_ctx *pc = data;
    object *o = pc->obj;
    const mh_reloc_entry *e = entry_for_slot(elf, o, rel);
    if (e == NULL)
        return true;
    record *r = find_record(o, rel->slot);
    if (r != NULL) {
        void *now = *rel->slot;
        if (now != r->now && now != e->definition && !mh_elf_contains(elf, (uintptr_t)now))
            return true;  /* another tool's hook went over ours: its slot now */
        if (r->now != e->replacement || now != e->replacement) {
            if (now != r->now)
                r->old = now;    /* someone rebound it (lazy binding) */
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
    o->recs[o->nrecs++] = (record){rel->slot, old, e->replacement, e->kind == MH_ENTRY_USER};
    pc->written++;
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

/* ---- the object records ---- */

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

/* A record for an object seen for the first time (pinned: `pinned` is its
 * handle, which glibc makes its link_map).  NULL: out of memory. */
static object *new_object(const seen_obj *s, void *pinned)
{
    if (g_nobjs == g_objcap) {
        size_t cap = g_objcap ? g_objcap * 2 : 256;
        object *grown = realloc(g_objs, cap * sizeof(*grown));
        if (grown == NULL)
            return NULL;
        g_objs = grown;
        g_objcap = cap;
    }
    object *o = &g_objs[g_nobjs++];
    memset(o, 0, sizeof(*o));
    o->base = s->base;
    o->phdr = s->phdr;
    o->phnum = s->phnum;
    o->seen = true;
    o->base_ns = true;
    o->lm = pinned;
    o->name = strdup(s->name ? s->name : "");
    Lmid_t lmid = LM_ID_BASE;
    if (dlinfo(o->lm, RTLD_DI_LMID, &lmid) == 0 && lmid != LM_ID_BASE)
        o->base_ns = false;
    return o;
}

/* Bring one collected, pinned object up to date.  Returns 0 or an errno;
 * *stop: no room for a new object's record (the walk goes no further). */
static int update_object(const seen_obj *s, void *pinned, const mh_maps *maps, bool all,
                         bool *stop)
{
    object *o = find_object(s->base, s->phdr);
    bool fresh = false;
    if (o != NULL) {
        o->seen = true;
        /* Unloaded and another object mapped at the same place? */
        if (o->nrecs && mh_maps_prot(maps, (uintptr_t)o->recs[0].slot) >= 0 &&
            *o->recs[0].slot != o->recs[0].now) {
            o->nrecs = 0;
            fresh = true;
        }
    } else {
        if (is_self(s->base, s->phdr, s->phnum) || is_loader(s->base))
            return 0;
        o = new_object(s, pinned);
        if (o == NULL) {
            *stop = true;
            return ENOMEM;
        }
        fresh = true;
    }
    if (fresh || all)
        return patch_object(o, maps, s->name ? s->name : "");
    return 0;
}

/* ---- the walk ---- */

/* Pin the objects this operation may write (install: all of them; refresh:
 * the ones not seen yet); *count: how many were pinned. */
static void **pin_collected(const collect *c, mh_walk_op op, size_t *count)
{
    void **pins = calloc(c->count ? c->count : 1, sizeof(void *));
    *count = 0;
    for (size_t k = 0; pins && k < c->count; k++) {
        if (op == MH_WALK_REFRESH && find_object(c->list[k].base, c->list[k].phdr) != NULL)
            continue;
        pins[k] = pin(c->list[k].name, c->list[k].base);
        *count += pins[k] != NULL;
    }
    return pins;
}

/* Write the collected objects' slots.  Returns the first error, *no_maps:
 * the maps snapshot could not be read (nothing was written). */
static int write_collected(const collect *c, void **pins, size_t npinned, mh_walk_op op,
                           bool *no_maps)
{
    mh_maps maps = {NULL, 0};
    /* Reading /proc/self/maps grows with every object loaded; a
     * dlopen-time refresh writes only freshly loaded (pinned, so fully
     * relocated) objects, whose page protections are exactly what their
     * program headers say (PT_GNU_RELRO read-only, else PT_LOAD's flags). */
    int err = (npinned && op == MH_WALK_INSTALL) ? mh_maps_read(&maps) : 0;
    *no_maps = err != 0;
    int result = err;
    for (size_t k = 0; k < c->count && err == 0; k++) {
        const seen_obj *s = &c->list[k];
        if (op == MH_WALK_REFRESH) {
            object *o = find_object(s->base, s->phdr);
            if (o != NULL) {
                o->seen = true;
                continue;
            }
        }
        if (pins[k] == NULL)
            continue;   /* unloaded since collected: forgotten below */
        bool stop = false;
        int e = update_object(s, pins[k], &maps, op == MH_WALK_INSTALL, &stop);
        if (stop) {
            result = e;
            break;
        }
        if (e != 0 && result == 0)
            result = e;
    }
    mh_maps_free(&maps);
    return result;
}

int mh_reloc_walk(mh_walk_op op)
{
    collect c = {NULL, 0, 0, op != MH_WALK_INSTALL, false, 0, 0};
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
    int result = 0;
    if (op == MH_WALK_FORGET) {
        for (size_t k = 0; k < c.count; k++) {
            object *o = find_object(c.list[k].base, c.list[k].phdr);
            if (o != NULL)
                o->seen = true;
        }
    } else {
        /* Pin every object to write first, then read the maps: a pinned
         * object is fully loaded (RELRO applied) and stays mapped while we
         * write, so the snapshot describes exactly the pages we touch. */
        size_t npinned;
        void **pins = pin_collected(&c, op, &npinned);
        if (pins == NULL) {
            free(c.list);
            return ENOMEM;
        }
        bool no_maps = false;
        result = write_collected(&c, pins, npinned, op, &no_maps);
        if (no_maps) {   /* no snapshot: keep what we knew */
            for (size_t i = 0; i < g_nobjs; i++)
                g_objs[i].seen = true;
        }
        for (size_t k = 0; k < c.count; k++)
            if (pins[k])
                mh_real_dlclose(pins[k]);
        free(pins);
    }
    for (size_t i = g_nobjs; i-- > 0;)
        if (!g_objs[i].seen)
            drop_object(i);
    free(c.list);
    return result;
}

/* ---- restoring and counting ---- */

int mh_reloc_restore_all(void)
{
    mh_reloc_walk(MH_WALK_FORGET);     /* forget objects that are gone */
    void **pins = calloc(g_nobjs ? g_nobjs : 1, sizeof(void *));
    for (size_t i = 0; pins && i < g_nobjs; i++)
        pins[i] = pin(g_objs[i].name, g_objs[i].base);
    mh_maps maps = {NULL, 0};
    int result = pins ? mh_maps_read(&maps) : ENOMEM;
    if (result != 0) {
        for (size_t i = 0; pins && i < g_nobjs; i++)
            if (pins[i])
                mh_real_dlclose(pins[i]);
        free(pins);
        return result;
    }
    for (size_t i = 0; i < g_nobjs; i++) {
        object *o = &g_objs[i];
        for (size_t j = pins[i] ? o->nrecs : 0; j-- > 0;) {
            record *r = &o->recs[j];
            if (*r->slot != r->now)
                continue;   /* rebound by someone else since: leave it */
            int err = mh_got_write(&maps, r->slot, r->old, slot_prot(o, r->slot));
            if (err && result == 0)
                result = err;
        }
        if (pins[i])
            mh_real_dlclose(pins[i]);
        free(o->recs);
        free(o->name);
    }
    g_nobjs = 0;
    mh_maps_free(&maps);
    free(pins);
    return result;
}

void mh_reloc_walk_reset(void)
{
    g_adds = g_subs = ~0ULL;
}

size_t mh_reloc_count_user_slots(void)
{
    size_t n = 0;
    for (size_t i = 0; i < g_nobjs; i++)
        for (size_t j = 0; j < g_objs[i].nrecs; j++) {
            const record *r = &g_objs[i].recs[j];
            if (r->user && *r->slot == r->now)
                n++;
        }
    return n;
}
