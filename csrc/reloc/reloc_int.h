/*
 * reloc_int.h - the internal API of the relocation (GOT/PLT) rewriter, for
 * csrc/reloc/ only; what the layers above use is reloc.h (included here).
 *
 *   elf_index.c      parse one loaded object's PT_DYNAMIC; iterate the
 *                    relocations that bind a symbol to a pointer-sized slot
 *   got.c            write one slot: page protection from /proc/self/maps,
 *                    mprotect only that page, atomic store, restore
 *   registry.c       the hooked names: replacement, definition, the one
 *                    lookup (lock-free)
 *   walk.c           the loaded objects and the slots changed in each; the
 *                    install / refresh / forget walk, restore, count
 *   reloc.c          the public API (memhook_reloc_*), the lock, fork
 *   interpose_dl.c   dlopen/dlmopen/dlclose/dlsym/dlvsym wrappers, and the
 *                    unload watches
 *   interpose_x86_64.S  the dlsym/dlvsym entry stubs (tail-jump to the real
 *                    function with the caller's return address intact)
 */
#ifndef MEMHOOK_RELOC_INT_H
#define MEMHOOK_RELOC_INT_H

#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/memhook.h"

#include "mh_visibility.h"
#include "reloc.h"

/* ---- elf_index.c ---- */

typedef struct mh_elf_object {
    uintptr_t base;             /* load bias (dlpi_addr) */
    const char *name;           /* dlpi_name ("" for the executable) */
    const ElfW(Phdr) *phdr;
    size_t phnum;
    const ElfW(Sym) *symtab;
    const char *strtab;
    size_t strsz;
    const ElfW(Versym) *versym; /* may be NULL */
    const ElfW(Verneed) *verneed; /* may be NULL */
    size_t verneednum;
    const ElfW(Rela) *jmprel;   /* DT_JMPREL (x86-64: always RELA) */
    size_t jmprel_count;
    const ElfW(Rela) *rela;     /* DT_RELA */
    size_t rela_count;
} mh_elf_object;

/* One relocation that makes a pointer-sized slot hold a symbol's address. */
typedef struct mh_elf_reloc {
    const char *name;           /* plain symbol name */
    const char *version;        /* needed version name (e.g. "GLIBC_2.34") or NULL */
    void **slot;                /* the GOT (or data) slot */
    int64_t addend;
    uint32_t type;              /* R_X86_64_JUMP_SLOT, _GLOB_DAT or _64 */
    const ElfW(Sym) *sym;
} mh_elf_reloc;

/* Parse the dynamic section of a loaded object.  Returns false when the
 * object has no PT_DYNAMIC or no symbol table (nothing to patch). */
MH_HIDDEN bool mh_elf_parse(uintptr_t base, const char *name, const ElfW(Phdr) *phdr,
                            size_t phnum, mh_elf_object *out);
/* Call fn for every JUMP_SLOT (DT_JMPREL), GLOB_DAT and R_X86_64_64 (DT_RELA)
 * relocation with a named symbol.  fn returns false to stop. */
typedef bool (*mh_elf_reloc_fn)(const mh_elf_object *obj, const mh_elf_reloc *rel, void *ctx);
MH_HIDDEN void mh_elf_for_each_reloc(const mh_elf_object *obj, mh_elf_reloc_fn fn, void *ctx);
/* Does addr lie inside one of the object's PT_LOAD segments? */
MH_HIDDEN bool mh_elf_contains(const mh_elf_object *obj, uintptr_t addr);
MH_HIDDEN bool mh_phdr_contains(uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum,
                                uintptr_t addr);

/* ---- got.c ---- */

/* A snapshot of /proc/self/maps: sorted [start, end) ranges with PROT_*. */
typedef struct mh_maps {
    struct mh_map_range { uintptr_t start, end; int prot; } *ranges;
    size_t count;
} mh_maps;

MH_HIDDEN int mh_maps_read(mh_maps *maps);          /* 0 or errno */
MH_HIDDEN void mh_maps_free(mh_maps *maps);
/* PROT_* of the page holding addr, or -1 if unmapped. */
MH_HIDDEN int mh_maps_prot(const mh_maps *maps, uintptr_t addr);
/* Store value into *slot (an aligned pointer slot), making its page writable
 * only for the store and restoring its exact protection (from maps, else
 * elf_prot; -1: unknown).  Returns 0 or an errno (the slot is unchanged). */
MH_HIDDEN int mh_got_write(const mh_maps *maps, void **slot, void *value, int elf_prot);
/* The protection the loader leaves on addr's page, from the object's
 * program headers (PT_GNU_RELRO, PT_LOAD flags); -1 if outside it. */
MH_HIDDEN int mh_elf_prot(uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum, uintptr_t addr);

/* ---- registry.c ---- */

#define MH_RELOC_NAME_MAX 160     /* "name@VERSION", with its NUL */

typedef enum mh_entry_kind {
    MH_ENTRY_USER = 0,      /* a symbol of memhook_reloc_install */
    MH_ENTRY_LOADER,        /* dlopen, dlmopen, dlclose, dlsym, dlvsym */
    MH_ENTRY_INTERPOSER,    /* registered with mh_reloc_interpose */
} mh_entry_kind;

typedef struct mh_reloc_entry {
    char name[MH_RELOC_NAME_MAX];  /* as registered: "name" or "name@VERSION" */
    size_t plain_len;          /* length of the part before '@' */
    uint32_t hash;             /* of the plain part */
    mh_entry_kind kind;
    void *replacement;
    void **original_out;       /* receives the definition, or NULL */
    void *definition;          /* what the loader binds the name to */
} mh_reloc_entry;

/* The one lookup (lock-free): the index of the entry for `name` - the
 * "name@version" entry when version is given and registered, else the
 * plain one - or -1. */
MH_HIDDEN int mh_registry_find(const char *name, const char *version);
/* The entry at index (NULL for -1 or past the end). */
MH_HIDDEN mh_reloc_entry *mh_registry_entry(int index);
MH_HIDDEN size_t mh_registry_count(void);
/* Record e's definition if it has none yet (lock-free; the first wins). */
MH_HIDDEN void mh_registry_set_definition(mh_reloc_entry *e, void *definition);
/* What the loader binds e's name to in a scope (NULL: the global one). */
MH_HIDDEN void *mh_registry_resolve(const mh_reloc_entry *e, void *scope_handle);
/* Resolve, in a scope, every entry whose definition is still unknown. */
MH_HIDDEN void mh_registry_resolve_missing(void *scope_handle);
/* Forget definitions whose object was unloaded (after a dlclose). */
MH_HIDDEN void mh_registry_forget_unloaded(void);
/* Is `found` another library's definition of e's name? */
MH_HIDDEN bool mh_registry_other_definition(const mh_reloc_entry *e, void *found);
/* Under the lock: add (or update) a user entry; 0 or an errno. */
MH_HIDDEN int mh_registry_add(const char *name, void *replacement, void **original_out);
/* Under the lock: the loader's and the interposers' entries (once). */
MH_HIDDEN void mh_registry_add_kept(void);
/* Under the lock: forget the user's entries (uninstall). */
MH_HIDDEN void mh_registry_forget_user(void);
/* A handle on lm's object (dlopen RTLD_NOLOAD by name), or NULL. */
MH_HIDDEN void *mh_reloc_handle_of(struct link_map *lm);

/* ---- walk.c (under the lock) ---- */

typedef enum mh_walk_op {
    MH_WALK_INSTALL,    /* pin and patch every loaded object */
    MH_WALK_REFRESH,    /* patch the objects loaded since the last walk */
    MH_WALK_FORGET,     /* patch nothing; forget objects that are gone */
} mh_walk_op;

/* One walk over the loaded objects; 0 or the first errno. */
MH_HIDDEN int mh_reloc_walk(mh_walk_op op);
/* Give every changed slot still holding memhook's pointer its old value
 * back and forget every object; 0 or the first errno (then nothing is
 * forgotten). */
MH_HIDDEN int mh_reloc_restore_all(void);
/* The next walk looks at every object again. */
MH_HIDDEN void mh_reloc_walk_reset(void);
/* Slots that hold a user entry's replacement. */
MH_HIDDEN size_t mh_reloc_count_user_slots(void);

/* ---- reloc.c ---- */

typedef void *(*mh_dlvsym_fn)(void *, const char *, const char *);
typedef void *(*mh_dlmopen_fn)(Lmid_t, const char *, int);

/* The other real loader functions (reloc.h has dlsym, dlopen, dlclose).
 * Read by the assembly stubs. */
MH_HIDDEN extern mh_dlvsym_fn mh_real_dlvsym;
MH_HIDDEN extern mh_dlmopen_fn mh_real_dlmopen;

MH_HIDDEN void mh_reloc_lock(void);
MH_HIDDEN void mh_reloc_unlock(void);
/* Patch objects loaded since the last walk, forget unloaded ones; a handle
 * returned by dlopen lets unresolved originals be looked up in it. */
MH_HIDDEN void mh_reloc_refresh(void *new_handle);

/* ---- registry.c: the lookups beside reloc.h's (lock-free) ---- */

/* The replacement memhook hands out for `name` (a hooked user symbol or an
 * interposed entry point), or NULL. */
MH_HIDDEN void *mh_reloc_replacement(const char *name);
/* Find the definition of name in an object after `after` in the load order
 * (RTLD_NEXT's approximation); NULL if none. */
MH_HIDDEN void *mh_reloc_find_after(struct link_map *after, const char *name);

/* ---- interpose_dl.c / interpose_x86_64.S ---- */

MH_HIDDEN void *mh_dlsym_entry(void *handle, const char *name);           /* .S */
MH_HIDDEN void *mh_dlvsym_entry(void *handle, const char *name, const char *version); /* .S */
MH_HIDDEN void *mh_dlopen_wrapper(const char *file, int mode);
MH_HIDDEN void *mh_dlmopen_wrapper(Lmid_t lmid, const char *file, int mode);
MH_HIDDEN int mh_dlclose_wrapper(void *handle);

#endif
