/*
 * mh_objects.h - "the set of loaded objects may have changed".
 *
 * Several layers keep something derived from the loaded objects (the
 * hooks: CUDA's text ranges, for events' callers; the trace: module
 * records, so a dlclosed library is still named).  Those who see the set
 * change (install, reloc's dlopen/dlclose wrappers, the trace's poll) call
 * mh_objects_changed; those who care register an observer at load.  So a
 * lower layer tells a higher one without knowing it.
 */
#ifndef MEMHOOK_MH_OBJECTS_H
#define MEMHOOK_MH_OBJECTS_H

#include "mh_visibility.h"

typedef void (*mh_objects_observer)(void);

/* At load only (csrc/cuda/startup_order.c: single-threaded, before any
 * change is told);
 * at most MH_OBJECTS_OBSERVERS_MAX. */
#define MH_OBJECTS_OBSERVERS_MAX 8
MH_HIDDEN void mh_objects_observe(mh_objects_observer fn);

/* Run every observer, in registration order.  Observers take locks of
 * their own and walk the loader's list: never from a hook. */
MH_HIDDEN void mh_objects_changed(void);

/* A dlopen/dlclose reloc's wrappers saw: mh_objects_changed, but only once
 * mh_objects_watch_dl was called (a traced process, whose module records
 * must be written before dlopen returns).  Otherwise left out: every
 * dl_iterate_phdr holds glibc's dl_load_write_lock, which a fork child does
 * not get back (glibc 2.36), so each one is a window in which a fork by
 * another thread leaves the child hanging in its next dlopen
 * (tests/hooks/test_fork_churn.py). */
MH_HIDDEN void mh_objects_changed_by_dl(void);
MH_HIDDEN void mh_objects_watch_dl(void);

#endif
