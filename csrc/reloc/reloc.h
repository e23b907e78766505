/*
 * reloc.h - what the layers above use of the relocation (GOT/PLT)
 * rewriter; the rest of its internal API is reloc_int.h, for csrc/reloc/
 * only (tests/test_layering.py holds both to that).
 *
 * The engine knows no library but the loader.  A layer above that needs an
 * entry point of its own library interposed (a lookup function of its own,
 * as dlsym is the loader's) registers it with mh_reloc_interpose and asks
 * mh_reloc_replacement_for what to hand out; one that must hear of its
 * library's unloading registers mh_reloc_watch_unload.  Its own lookups of
 * that library go through the real loader functions below, marked with
 * mh_reloc_inside so that reloc does not interpose them.
 */
#ifndef MEMHOOK_RELOC_H
#define MEMHOOK_RELOC_H

#include <stdbool.h>

#include "mh_visibility.h"

/* ---- reloc.c ---- */

typedef void *(*mh_dlsym_fn)(void *, const char *);
typedef void *(*mh_dlopen_fn)(const char *, int);
typedef int (*mh_dlclose_fn)(void *);

/* The real loader functions (libc's), resolved once from memhook's own
 * unpatched GOT (reloc_int.h has the other two). */
MH_HIDDEN extern mh_dlsym_fn mh_real_dlsym;
/* At load (the core's startup order, first): the mh_real_dl* pointers take
 * libc's loader entry points, before any step can look a symbol up. */
MH_HIDDEN void mh_registry_at_load(void);
MH_HIDDEN extern mh_dlopen_fn mh_real_dlopen;
MH_HIDDEN extern mh_dlclose_fn mh_real_dlclose;

/* Set while a thread runs memhook's own reloc code (no interposition then). */
MH_HIDDEN extern __thread int mh_reloc_inside __attribute__((tls_model("initial-exec")));

/* True while at least one symbol is installed. */
MH_HIDDEN bool mh_reloc_active(void);
/* fork(): the lock is held across it; the child makes it afresh (held as
 * deep as the forking thread held it).  Registered at load, in
 * the one registration csrc/core/mh_lock_order.h describes. */
MH_HIDDEN void mh_reloc_fork_prepare(void);
MH_HIDDEN void mh_reloc_fork_parent(void);
MH_HIDDEN void mh_reloc_fork_child(void);

/* ---- for the layers above (lock-free) ---- */

/* Interpose `name` (a plain name) for a layer's own lookups, as the engine
 * does dlsym: while any symbol is installed, every GOT slot of it in the
 * base namespace points at `replacement`, and *real receives the
 * definition the loader binds (learned at install, or from
 * mh_reloc_note_definition).  Kept across uninstall; not counted by
 * memhook_reloc_patched_slots.  Only in the core's load step (before the
 * first install): EINVAL for a bad name, ENOSPC when too late or full. */
MH_HIDDEN int mh_reloc_interpose(const char *name, void *replacement, void **real);
/* The replacement to hand out for a lookup of `name` that found
 * `definition`: NULL when that is another library's definition of the name
 * than the one the replacement calls (two versions loaded side by side). */
MH_HIDDEN void *mh_reloc_replacement_for(const char *name, void *definition);
/* Tell the registry that `name` is defined at `definition` (learned from a
 * dlsym or an interposer's answer): fills the original if still unknown. */
MH_HIDDEN void mh_reloc_note_definition(const char *name, void *definition);
/* Call gone() from the dlclose wrapper when a dlclose takes the object
 * named soname out of the process (it was loaded before the call, and is
 * not after).  Only at load; 0, or ENOSPC when full. */
MH_HIDDEN int mh_reloc_watch_unload(const char *soname, void (*gone)(void));
/* Call arrived(handle) after every successful dlopen/dlmopen the wrapper
 * made (outside the loader's lock and memhook's, not from a constructor's
 * nested dlopen), for a layer that looks for a library of its own among
 * what the handle brought in (a dlsym on it searches its dependencies too).
 * Only from a constructor; 0, or ENOSPC when full. */
MH_HIDDEN int mh_reloc_watch_load(void (*arrived)(void *handle));

#endif
