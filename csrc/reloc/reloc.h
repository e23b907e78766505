/*
 * reloc.h - internal API of the relocation (GOT/PLT) rewriter.
 *
 *   elf_index.c      parse one loaded object's PT_DYNAMIC; iterate the
 *                    relocations that bind a symbol to a pointer-sized slot
 *   got.c            write one slot: page protection from /proc/self/maps,
 *                    mprotect only that page, atomic store, restore
 *   reloc.c          the registry of hooked names, the per-object records of
 *                    changed slots, install/uninstall, the walks
 *   interpose_dl.c   dlopen/dlmopen/dlclose/dlsym/dlvsym wrappers
 *   interpose_x86_64.S  the dlsym/dlvsym entry stubs (tail-jump to the real
 *                    function with the caller's return address intact)
 *   interpose_cuda.c cuGetProcAddress/_v2 wrappers
 */
#ifndef MEMHOOK_RELOC_H
#define MEMHOOK_RELOC_H

#include <elf.h>
#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/memhook.h"

#define MH_HIDDEN __attribute__((visibility("hidden")))

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

/* ---- reloc.c ---- */

typedef void *(*mh_dlsym_fn)(void *, const char *);
typedef void *(*mh_dlvsym_fn)(void *, const char *, const char *);
typedef void *(*mh_dlopen_fn)(const char *, int);
typedef void *(*mh_dlmopen_fn)(Lmid_t, const char *, int);
typedef int (*mh_dlclose_fn)(void *);

/* The real loader functions (libc's), resolved once from memhook's own
 * unpatched GOT.  Read by the assembly stubs. */
MH_HIDDEN extern mh_dlsym_fn mh_real_dlsym;
MH_HIDDEN extern mh_dlvsym_fn mh_real_dlvsym;
MH_HIDDEN extern mh_dlopen_fn mh_real_dlopen;
MH_HIDDEN extern mh_dlmopen_fn mh_real_dlmopen;
MH_HIDDEN extern mh_dlclose_fn mh_real_dlclose;

/* Set while a thread runs memhook's own reloc code (no interposition then). */
MH_HIDDEN extern __thread int mh_reloc_inside __attribute__((tls_model("initial-exec")));

/* True while at least one symbol is installed. */
MH_HIDDEN bool mh_reloc_active(void);
/* The replacement memhook hands out for `name` (a hooked user symbol or one
 * of the interposed loader/CUDA entry points), or NULL.  Lock-free. */
MH_HIDDEN void *mh_reloc_replacement(const char *name);
/* The replacement to hand out for a lookup of `name` that found
 * `definition`: NULL when that is another library's definition of the name
 * than the one the replacement calls (two versions loaded side by side). */
MH_HIDDEN void *mh_reloc_replacement_for(const char *name, void *definition);
/* Tell the registry that `name` is defined at `definition` (learned from a
 * dlsym or cuGetProcAddress answer): fills the original if still unknown. */
MH_HIDDEN void mh_reloc_note_definition(const char *name, void *definition);
/* Patch objects loaded since the last walk, forget unloaded ones; a handle
 * returned by dlopen lets unresolved originals be looked up in it. */
MH_HIDDEN void mh_reloc_refresh(void *new_handle);
/* Makes the lock and registers its fork handlers (once). */
MH_HIDDEN void mh_reloc_init(void);
MH_HIDDEN void mh_reloc_lock(void);
MH_HIDDEN void mh_reloc_unlock(void);
/* Find the definition of name in an object after `after` in the load order
 * (RTLD_NEXT's approximation); NULL if none. */
MH_HIDDEN void *mh_reloc_find_after(struct link_map *after, const char *name);

/* ---- interpose_dl.c / interpose_x86_64.S / interpose_cuda.c ---- */

MH_HIDDEN void *mh_dlsym_entry(void *handle, const char *name);           /* .S */
MH_HIDDEN void *mh_dlvsym_entry(void *handle, const char *name, const char *version); /* .S */
MH_HIDDEN void *mh_dlopen_wrapper(const char *file, int mode);
MH_HIDDEN void *mh_dlmopen_wrapper(Lmid_t lmid, const char *file, int mode);
MH_HIDDEN int mh_dlclose_wrapper(void *handle);
MH_HIDDEN int mh_cuGetProcAddress_wrapper(const char *symbol, void **pfn, int version,
                                          uint64_t flags);
MH_HIDDEN int mh_cuGetProcAddress_v2_wrapper(const char *symbol, void **pfn, int version,
                                             uint64_t flags, int *status);
/* Set when memhook learns the real entry points (dlsym answers, patching). */
MH_HIDDEN extern void *mh_real_cuGetProcAddress;
MH_HIDDEN extern void *mh_real_cuGetProcAddress_v2;

/* The CUDA layer (emit.c): the driver was just unloaded (a dlclose took
 * libcuda.so.1 out of the process). */
MH_HIDDEN void mh_driver_unloaded(void);

#endif
