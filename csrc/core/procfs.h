/*
 * procfs.h - memhook's readers of /proc/self: the maps, and where a
 * parked thread will resume (/proc/self/task/<tid>/syscall).
 *
 * reloc (the protection of each GOT page it writes), bistro's text_poke.c
 * (the protection of each page it patches) and bistro's islands (the free
 * gaps near a target) all walk the same lines; this is the one parser.
 *
 * Malloc-free and async-signal-safe: open, read and close on a stack
 * buffer, no stdio, no locks.  text_poke.c calls it while other threads may
 * be stopped inside malloc or be probed by signals; a caller that wants a
 * snapshot (reloc) builds its own from the callback.
 *
 * Not atomic: the kernel produces the file a read(2) at a time, so a mapping
 * changed by another thread while the walk runs can be missed or seen twice.
 * Every caller copes (reloc and text_poke fall back to what they know of the
 * page; an island placement that loses a race fails its MAP_FIXED_NOREPLACE
 * and tries the next gap).
 */
#ifndef MEMHOOK_CORE_PROCFS_H
#define MEMHOOK_CORE_PROCFS_H

#include <stdbool.h>
#include <stdint.h>

#include "mh_visibility.h"

/* One line of /proc/self/maps. */
typedef struct mh_map_entry {
    uintptr_t start, end;  /* [start, end) */
    int prot;              /* PROT_READ | PROT_WRITE | PROT_EXEC as listed */
    /* The path or pseudo-name ("[heap]", "[stack]"), "" for an anonymous
     * mapping; NUL-terminated, valid during the callback only, truncated
     * for a line longer than the reader's buffer (MH_MAPS_LINE_MAX). */
    const char *name;
} mh_map_entry;

/* Lines longer than this (a path near PATH_MAX) still give their range and
 * protection; only their name is cut short. */
#ifndef MH_MAPS_LINE_MAX  /* overridable only so a test can make every line "long" */
#define MH_MAPS_LINE_MAX 8192
#endif

/* Called for every line in the kernel's order (ascending addresses);
 * returns false to stop the walk. */
typedef bool (*mh_maps_fn)(const mh_map_entry *entry, void *ctx);

/* Walk /proc/self/maps.  Returns 0 (also when fn stopped the walk), or the
 * errno of the open or a read that failed; lines seen before a failed read
 * were passed to fn. */
MH_HIDDEN int mh_maps_each(mh_maps_fn fn, void *ctx);

/* Where thread `tid` of this process resumes in user mode, when the kernel
 * can say: the thread is off its CPU and has not run between the kernel's
 * two looks at it (task_current_syscall); *pc is the user instruction
 * pointer it returns to (after the syscall instruction when it sleeps in
 * one, the faulting instruction when it waits in a page fault), *sp its
 * user stack pointer (sp may be NULL).  Returns 0, EAGAIN when the file
 * says "running" (on a CPU or runnable: anywhere), ESRCH when the thread is
 * gone, or the errno of the open/read (no such file on a kernel or sandbox
 * without it).  Malloc-free, like the maps walk: text_poke.c calls it
 * while other threads are held at barriers. */
MH_HIDDEN int mh_task_resume_pc(int tid, uint64_t *pc, uint64_t *sp);

/* The thread's context switches so far (voluntary + involuntary, from
 * /proc/self/task/<tid>/status), or -1 when it cannot be read.  Equal
 * counts around two looks that found it off its CPU mean it did not run
 * in between. */
MH_HIDDEN long long mh_task_switches(int tid);

#endif
