/*
 * cuda_hooks.h - internal API of the CUDA hook layer.
 *
 *   hook_table.def   the hooked functions, in event-ABI order
 *   table.c          the table itself: names, wrappers, what each calls
 *   event_lane.[ch]  the event queue's producer side: one lane per thread
 *   event_drain.c    its consumer side: the lanes merged into one order
 *   live_table.c     address -> (size, type, device) of live allocations,
 *                    so a FREE knows its size without asking the driver
 *   emit.c           building events: pid/tid/clock, the ALLOC and FREE paths
 *   driver_calls.c   the few driver queries the wrappers make themselves
 *   wrap_driver.c    wrappers of the driver API
 *   wrap_runtime.c   wrappers of the runtime API
 *   install.c        install/uninstall/switch modes with bistro and reloc,
 *                    per-function status, coverage
 *   mode.c           MEMHOOK_CUDA_MODE parsing
 *
 * A wrapper runs in the caller's thread with no lock held by memhook; it
 * never calls into Python, never takes a lock Python may hold, and records
 * nothing when reached from inside another wrapper (the runtime calling the
 * driver, or memhook's own driver queries): mh_hook_depth.
 */
#ifndef MEMHOOK_CUDA_HOOKS_H
#define MEMHOOK_CUDA_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/cuda_abi.h"
#include "memhook/memhook.h"

#include "mh_visibility.h"

typedef enum mh_fn {
#define MH_HOOK(name, api, kind, type, fallback) MH_FN_##name,
#include "hook_table.def"
#undef MH_HOOK
    MH_FN_COUNT
} mh_fn;

/* One hooked function.  The wrapper calls, in order of preference: bistro's
 * trampoline (the entry itself is patched), the definition found at install,
 * or the definition reloc learned (possibly later, when the library that
 * defines the name is loaded).  Each is published with a release store
 * before anything can route a call to the wrapper. */
typedef struct mh_hook {
    const char *name;
    const char *fallback;      /* same-ABI older spelling, or NULL */
    void *wrapper;
    int api;                   /* MEMHOOK_API_* */
    int kind;                  /* MEMHOOK_EVENT_* */
    int mem_type;              /* MEMHOOK_MEM_* */
    bool tracked;              /* its allocations have a matching free */
    void *trampoline;          /* atomic */
    void *resolved;            /* atomic */
    void *reloc_original;      /* atomic; written by reloc */
    memhook_bistro_patch *patch;  /* install lock */
    void *patched_at;          /* install lock: the entry bistro patched */
    int bistro_errno;          /* install lock */
    char reason[320];          /* install lock: why bistro did not patch */
} mh_hook;

/* The table: one row per line of hook_table.def.  Process-wide because the
 * functions it describes are (one driver per process); rows are written by
 * install under its lock and read lock-free by the wrappers. */
MH_HIDDEN extern mh_hook mh_hooks[MH_FN_COUNT];

/* Fill in what the table's initialiser cannot (once, under the install
 * lock). */
MH_HIDDEN void mh_table_init(void);
/* The same-ABI older spelling of a row, or NULL. */
MH_HIDDEN const char *mh_fallback_name(const mh_hook *h);

/* 1 while a mode other than none is installed.  Process-wide: it is the
 * switch every wrapper reads. */
MH_HIDDEN extern int mh_recording;

/* Per thread: >0 while the thread is inside a wrapper (or memhook's own
 * driver query), so nested hooks pass straight through. */
MH_HIDDEN extern __thread int mh_hook_depth __attribute__((tls_model("initial-exec")));

/* The live table's generation (live_table.c): bumped at every uninstall and
 * at every install from mode none.  Process-wide, as the table is. */
MH_HIDDEN extern uint32_t mh_live_gen;
/* Per thread: mh_live_gen as the outermost recording call began. */
MH_HIDDEN extern __thread uint32_t mh_call_gen __attribute__((tls_model("initial-exec")));

static inline void *mh_next(mh_fn f)
{
    const mh_hook *h = &mh_hooks[f];
    void *p = __atomic_load_n(&h->trampoline, __ATOMIC_ACQUIRE);
    if (p == NULL)
        p = __atomic_load_n(&h->resolved, __ATOMIC_ACQUIRE);
    if (p == NULL)
        p = __atomic_load_n(&h->reloc_original, __ATOMIC_ACQUIRE);
    return p;
}

/* Enter a recording call: false (and nothing to undo) when this call must
 * pass straight through - hooks off, or nested inside another wrapper. */
static inline bool mh_record_begin(void)
{
    if (!__atomic_load_n(&mh_recording, __ATOMIC_ACQUIRE) || mh_hook_depth != 0)
        return false;
    mh_hook_depth++;
    /* Before the real call: the allocation it makes is then younger than
     * this generation (live_table.c says why that matters). */
    mh_call_gen = __atomic_load_n(&mh_live_gen, __ATOMIC_ACQUIRE);
    return true;
}

static inline void mh_record_end(void) { mh_hook_depth--; }

/* ---- clock.c ---- */

/* memhook_event.flags bit of an event whose timestamp_ns still holds a raw
 * TSC reading; the drain converts it (mh_clock_convert) and clears it, so
 * no event leaves the core with it. */
#define MH_EVENT_RAW_TSC 0x80000000u

MH_HIDDEN extern bool mh_clock_tsc;  /* true: hooks stamp events with the TSC */
MH_HIDDEN uint64_t mh_clock_monotonic_ns(void);
/* Turn every raw TSC stamp of events[0..count) into CLOCK_MONOTONIC ns.
 * Consumer side: called with the queue's consumer lock held. */
MH_HIDDEN void mh_clock_convert(memhook_event *events, size_t count);

/* A timestamp for an event being recorded, and the flag that says what
 * kind it is.  `after_call`: the stamp of an event that follows the real
 * call (an ALLOC) must be later than anything that call observed - the
 * free that made its address available - because the drain orders the
 * threads' events by stamp (event_drain.c).  rdtsc alone may run ahead of
 * the call's last loads; lfence first waits for them.  An event stamped
 * before the call (a FREE) needs no fence: running ahead only makes its
 * stamp earlier. */
static inline uint64_t mh_clock_stamp(uint32_t *flags, bool after_call)
{
    if (__builtin_expect(mh_clock_tsc, 1)) {
        *flags |= MH_EVENT_RAW_TSC;
        if (after_call)
            __builtin_ia32_lfence();
        return __builtin_ia32_rdtsc();
    }
    return mh_clock_monotonic_ns();
}

/* ---- event_drain.c (the queue's producer side is event_lane.h) ---- */

MH_HIDDEN void mh_queue_note_free_source(bool from_driver, bool unknown);

/* A sink sees every batch memhook_events_drain hands out, called inside the
 * drain under the consumer lock, and every batch mh_queue_tee reads, so it
 * gets each event exactly once and in order whoever takes it out (Python in
 * a traced process that imports memhook, or the trace's own reader).  It must not drain, and it runs in the draining
 * thread; producers never call it.  NULL (the default) turns it off.
 * Set by csrc/trace/. */
typedef void (*mh_queue_sink_fn)(const memhook_event *events, size_t count);
MH_HIDDEN void mh_queue_set_sink(mh_queue_sink_fn sink);
/* The trace's reader: copy up to capacity pending events it has not read
 * yet into out and hand them to the sink, WITHOUT consuming them (the
 * process's own consumer still drains them; the sink does not see them
 * twice).  Returns how many. */
MH_HIDDEN size_t mh_queue_tee(memhook_event *out, size_t capacity);
/* While nothing ever called memhook_events_drain, consume (drop) the
 * events the tee has read except the newest `keep`: a traced process with
 * no consumer of its own holds at most that many.  Once it dropped any,
 * the hooks no longer vouch for coverage (mh_queue_trimmed): a consumer
 * that starts later asks the driver about pointers its cache lacks. */
MH_HIDDEN void mh_queue_trim(uint64_t keep);
/* Whether mh_queue_trim ever dropped an event in this process. */
MH_HIDDEN bool mh_queue_trimmed(void);

/* ---- live_table.c ---- */

typedef struct mh_live {
    uint64_t size;
    int32_t mem_type;
    int32_t device;
    uint32_t gen;  /* mh_call_gen of the call that made the allocation */
} mh_live;

/* Start a new generation: every record made before is stale from now on
 * (a FREE ignores it and asks the driver).  `sweep`: also tombstone the
 * stale records now (install from mode none, so they do not crowd the
 * table).  Called by install.c under its lock. */
MH_HIDDEN void mh_live_new_generation(bool sweep);

/* Remember a live allocation (replacing a stale record of the same
 * address).  False when the table is too crowded near addr: the FREE will
 * ask the driver instead.  True means a CAS succeeded (a locked
 * instruction ran: emit.c counts on it). */
MH_HIDDEN bool mh_live_insert(uint64_t addr, const mh_live *rec);
/* Find the record of addr (and where it is, for mh_live_remove).  A record
 * of an earlier generation is removed and not returned. */
MH_HIDDEN bool mh_live_find(uint64_t addr, mh_live *out, uint32_t *where);
/* Forget the record mh_live_find found, with a CAS (a locked instruction,
 * whether or not it succeeds: emit.c counts on it). */
MH_HIDDEN void mh_live_remove(uint64_t addr, uint32_t where);

/* ---- driver_calls.c ---- */

/* The current context's device ordinal, or -1. */
MH_HIDDEN int mh_current_device(void);
/* The driver's allocation range holding addr: true and base/size, or false. */
MH_HIDDEN bool mh_driver_range(uint64_t addr, uint64_t *base, uint64_t *size);
/* Whether the driver says addr is managed memory (false when it cannot say). */
MH_HIDDEN bool mh_driver_is_managed(uint64_t addr);
/* Where a VMM allocation handle's memory lives: CUDA (and its device),
 * CUDA_MANAGED or CUDA_HOST; false when the driver does not say. */
MH_HIDDEN bool mh_handle_kind(uint64_t handle, int *mem_type, int *device);
/* cudaGetSymbolSize from the runtime that defines `symbol_address_fn`. */
MH_HIDDEN bool mh_runtime_symbol_size(void *cudaGetSymbolAddress_fn, const void *symbol,
                                      uint64_t *size);
/* Look the driver's entry points up now, if the driver is loaded (install
 * calls it, so that hooks need not). */
MH_HIDDEN void mh_driver_calls_prepare(void);
/* Forget cached driver entry points (the driver was unloaded). */
MH_HIDDEN void mh_driver_calls_reset(void);

/* ---- emit.c ---- */

#define MH_DEVICE_CURRENT (-2)  /* ask the driver for the current device */

/* After an allocating call: one ALLOC event (address 0 when it failed);
 * a successful, tracked allocation is remembered for its FREE. */
MH_HIDDEN void mh_emit_alloc(mh_fn f, int result, uint64_t addr, uint64_t size, int mem_type,
                             int device);

/* A FREE is planned before the real call: its size and type come from the
 * live table, else from the driver.  When the allocation is known the
 * event goes out BEFORE the call (no later ALLOC of the address can be
 * ordered before it); when it is not, the call would fail or frees memory
 * nobody saw, and the event goes out after it with the call's result. */
typedef struct mh_free_plan {
    uint64_t addr;
    mh_live rec;
    bool known;
    bool from_table;
    uint32_t table_slot;  /* where mh_live_find found it */
    uint32_t flags;
} mh_free_plan;

MH_HIDDEN void mh_free_begin(mh_fn f, uint64_t addr, uint64_t given_size, mh_free_plan *plan);
MH_HIDDEN void mh_free_end(mh_fn f, const mh_free_plan *plan, int result);

/* The driver was unloaded: reset what pointed into it, and put a
 * MEMHOOK_EVENT_DRIVER_UNLOADED marker in the event order. */
MH_HIDDEN void mh_driver_unloaded(void);

/* Refresh the cached pid and the calling thread's tid (after fork). */
MH_HIDDEN void mh_emit_after_fork_child(void);

/* Called by a wrapper whose real function is not known (cannot happen once
 * install finished; kept so a wrapper never jumps to NULL). */
MH_HIDDEN int mh_unresolved(mh_fn f);

#endif
