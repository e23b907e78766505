/*
 * cuda_hooks.h - internal API of the CUDA hook layer.
 *
 *   hook_table.def   the hooked functions, in event-ABI order
 *   table.c          the table itself: names, wrappers, what each calls
 *   live_table.c     address -> (size, type, device) of live allocations,
 *                    so a FREE knows its size without asking the driver
 *   emit.c           building events: pid/tid/clock, markers, the rare paths;
 *   emit_inline.h    the ALLOC and FREE paths, inlined into each wrapper
 *   driver_calls.c   the few driver queries the wrappers make themselves
 *   wrap_driver.c    wrappers of the driver API
 *   wrap_runtime.c   wrappers of the runtime API
 *   install.c        install/uninstall/switch modes with bistro and reloc,
 *                    per-function status, coverage
 *   fork_order.c     every module's fork() handlers, registered at load in
 *                    the lock order (csrc/core/mh_lock_order.h)
 *   mode.c           MEMHOOK_CUDA_MODE parsing
 *   queue_stats.c    memhook_queue_stats_get: the queue's figures and the
 *                    FREE-size counters this layer keeps
 *
 * Events go into the event queue (csrc/queue/queue.h), which knows nothing
 * of this layer.
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
#include "memhook_internal/api.h"

#include "mh_hook_thread.h"
#include "mh_visibility.h"
#include "queue.h"
#include "trace_lane.h"

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
 * driver query), so nested hooks pass straight through.  This and
 * mh_call_gen are fields of the hook path's thread-locals
 * (csrc/core/mh_hook_thread.h: one line), under their own names. */
#define mh_hook_depth (mh_hook_tl.depth)

/* The live table's generation (live_table.c): bumped at every uninstall and
 * at every install from mode none.  Process-wide, as the table is. */
MH_HIDDEN extern uint32_t mh_live_gen;
/* Per thread: mh_live_gen as the outermost recording call began. */
#define mh_call_gen (mh_hook_tl.call_gen)

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

/* ---- live_table.c ---- */

typedef struct mh_live {
    uint64_t size;
    uint64_t stamp;    /* the ALLOC's raw TSC stamp (0 if it had none): its FREE's is later */
    uint64_t id;       /* the ALLOC event's identity: its FREE's link (event_drain.c) */
    uint32_t gen;      /* mh_call_gen of the call that made the allocation */
    int16_t mem_type;
    int16_t device;
} mh_live;
_Static_assert(sizeof(mh_live) == 32, "a live record is 32 bytes (40 with its key)");

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
/* Forget every record: exact sizes go on (exact_sizes.c), and records made
 * before may name memory freed since by FREEs that did not read the table. */
MH_HIDDEN void mh_live_forget_all(void);

/* ---- exact_sizes.c ---- */

/* Subscribers that asked for exact sizes (memhook_events_exact_sizes).
 * Process-wide, on the hooks' line: every hooked ALLOC and FREE reads it. */
MH_HIDDEN extern _Atomic uint32_t mh_exact_wanted;

/* ---- driver_calls.c ---- */

/* The current context's device ordinal, or -1. */
MH_HIDDEN int mh_current_device(void);

/* How many devices the process sees, once the driver said: the devices of
 * an initialised driver are fixed (CUDA_VISIBLE_DEVICES is read at cuInit).
 * Forgotten when the driver unloads and in a fork child. */
enum { MH_DEVICES_UNKNOWN, MH_DEVICES_ONE, MH_DEVICES_SEVERAL };
MH_HIDDEN extern _Atomic int mh_devices;
MH_HIDDEN int mh_alloc_device_slow(void);

/* The device of an allocation that succeeded: the current context's (a
 * context was current, or the call would have failed).  Where the process
 * sees one device that is device 0, and the driver is not asked - asking
 * cost a driver call per ALLOC, more than the rest of the event. */
static inline int mh_alloc_device(void)
{
    if (__builtin_expect(atomic_load_explicit(&mh_devices, memory_order_relaxed) ==
                             MH_DEVICES_ONE,
                         1))
        return 0;
    return mh_alloc_device_slow();
}
/* A fork child's driver is not initialised: it may see other devices. */
MH_HIDDEN void mh_driver_calls_fork_child(void);
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
/* The device of context ctx (cuCtxGetDevice_v2), or -1 when the driver
 * cannot say. */
MH_HIDDEN int mh_context_device(CUcontext ctx);
/* Whether the primary context of dev is active (cuDevicePrimaryCtxGetState);
 * true when the driver cannot say (then no teardown is assumed). */
MH_HIDDEN bool mh_primary_ctx_active(CUdevice dev);
/* Look the driver's entry points up now, if the driver is loaded (install
 * calls it, so that hooks need not). */
MH_HIDDEN void mh_driver_calls_prepare(void);
/* Forget cached driver entry points (the driver was unloaded). */
MH_HIDDEN void mh_driver_calls_reset(void);

/* ---- queue_stats.c ---- */

/* Count a FREE whose size came from the driver (from_driver) or from
 * nobody (unknown); memhook_queue_stats_get reports both. */
MH_HIDDEN void mh_free_source_note(bool from_driver, bool unknown);

/* ---- emit.c ---- */

/* An event's timestamp and the flag that says what kind it is. */
typedef struct mh_stamp {
    uint64_t at;
    uint32_t flags;
} mh_stamp;

/* Whether events get precise stamps now: under `memhook trace` (its
 * timelines need them), or while a subscriber asked
 * (memhook_events_precise_time); coarse otherwise (queue.h).  Two loads
 * of the MH_HOT line. */
static inline bool mh_stamp_precise(void)
{
    return atomic_load_explicit(&mh_trace_on, memory_order_relaxed) != 0 ||
           atomic_load_explicit(&mh_clock_precise_wanted, memory_order_relaxed) != 0;
}

/* A stamp taken now (mh_clock_stamp: `ordered` waits for the loads before
 * it, where the stamp is precise).  An ALLOC's is taken by its wrapper the
 * moment the real call returns, ordered - after everything the call read,
 * the free that made its address available - and before the wrapper's own
 * driver queries, so the fence waits for the call's loads alone. */
static inline mh_stamp mh_stamp_now(bool ordered)
{
    mh_stamp s = {0, 0};
    s.at = mh_clock_stamp(&s.flags, mh_stamp_precise(), ordered);
    return s;
}

#define MH_DEVICE_CURRENT (-2)  /* ask the driver for the current device */

/* After an allocating call, mh_emit_alloc (emit_inline.h, inlined into
 * the wrapper): one ALLOC event (address 0 when it failed), stamped
 * `stamp` (mh_stamp_now(true)); under exact sizes a successful, tracked
 * allocation is remembered for its FREE. */

/* A FREE is planned before the real call (mh_free_begin, then
 * mh_free_end after it: emit_inline.h, inlined into the wrapper).  With exact sizes (emit.c:
 * the trace, a subscriber that asked, UCX fed) its size and type come from
 * the live table, else from the driver: when the allocation is known the
 * event goes out BEFORE the call (no later ALLOC of the address can be
 * ordered before it); when it is not, the call would fail or frees memory
 * nobody saw, and the event goes out after it with the call's result.
 * Otherwise it goes out BEFORE the call with its address only, and its
 * result is exchanged into it when the call returns (queue.h,
 * MH_RESULT_PENDING); the drain fills its size. */
typedef struct mh_free_plan {
    uint64_t addr;
    mh_live rec;
    bool known;
    bool from_table;
    uint32_t table_slot;  /* where mh_live_find found it */
    uint32_t flags;
    memhook_event *pending;  /* recorded with its address only: its slot */
} mh_free_plan;


/* The driver was unloaded: reset what pointed into it, and put a
 * MEMHOOK_EVENT_DRIVER_UNLOADED marker in the event order. */
MH_HIDDEN void mh_driver_unloaded(void);
/* A context teardown (reset, destroy, last release of a primary context)
 * returned `result`, called by its wrapper after the real call: on
 * success a new live-table generation, then one FREE of no address
 * flagged MEMHOOK_EVENT_CONTEXT_RESET for `device` (-1: not known) that is
 * a marker of the event order (mh_emit_marker's epoch), stamped now; a
 * failure is an ordinary event with its result. */
MH_HIDDEN void mh_emit_context_reset(mh_fn f, int result, int device);

/* Put a marker (kind 0, with the public flag `what`, e.g.
 * MEMHOOK_EVENT_DRIVER_UNLOADED) in the event order: the drain hands it
 * out after everything recorded before it and before everything recorded
 * after it, whatever the thread (event_drain.c); the trace never gets it.
 * Not from inside a hook's own driver query (records nothing there). */
MH_HIDDEN void mh_emit_marker(uint32_t what);


/* fork() child: the cached pid is the child's (csrc/cuda/fork_order.c). */
MH_HIDDEN void mh_emit_fork_child(void);

/* ---- install.c: fork() ---- */

/* The install lock is held across fork() (prepare/parent) and made afresh
 * in the child.  Registered by fork_order.c, first in the lock order. */
MH_HIDDEN void mh_install_fork_prepare(void);
MH_HIDDEN void mh_install_fork_parent(void);
MH_HIDDEN void mh_install_fork_child(void);

/* ---- pointer_attributes.c ---- */

/* Memory at [addr, addr + size) may have driver attributes that are not
 * its cache region's (a VMM map, a module global, an IPC mapping): the
 * pointer-attribute answers pass it to the driver.  Called by its
 * wrapper before the ALLOC is published. */
MH_HIDDEN void mh_pointer_attributes_note_irregular(uint64_t addr, uint64_t size);
/* The same for a VMM map at [addr, addr + size), and the whole address
 * reservation it lies in (asked of the driver: RANGE_*). */
MH_HIDDEN void mh_pointer_attributes_note_vmm(uint64_t addr, uint64_t size);
/* Look the driver's entry points up now (install, like
 * mh_driver_calls_prepare); forget them when the driver leaves. */
MH_HIDDEN void mh_pointer_attributes_prepare(void);
MH_HIDDEN void mh_pointer_attributes_driver_unloaded(void);
/* A fork child's driver is not initialised. */
MH_HIDDEN void mh_pointer_attributes_fork_child(void);
/* At load (startup_order.c): on or off as MEMHOOK_POINTER_ATTRIBUTES says. */
MH_HIDDEN void mh_pointer_attributes_at_load(void);

/* ---- run_at_load.c (`memhook run`): load and fork() ---- */

/* With MEMHOOK_INSTALL_AT_LOAD=1 and no trace: the hooks installed in
 * MEMHOOK_CUDA_MODE, the keeper started by the first event. */
MH_HIDDEN void mh_run_at_load(void);
/* A fork child has no keeper thread: its first event starts its own. */
MH_HIDDEN void mh_run_fork_child(void);

/* ---- the other steps of the load (csrc/cuda/startup_order.c) ---- */

/* proc_address.c: cuGetProcAddress(_v2) interposed through reloc, and the
 * driver's unload watched. */
MH_HIDDEN void mh_proc_address_at_load(void);
/* driver_calls.c: the cache's driver question answered by the hooks'
 * driver queries. */
MH_HIDDEN void mh_driver_calls_at_load(void);
/* fork_order.c: every fork() handler of the core, registered once. */
MH_HIDDEN void mh_fork_order_at_load(void);

/* Called by a wrapper whose real function is not known (cannot happen once
 * install finished; kept so a wrapper never jumps to NULL). */
MH_HIDDEN int mh_unresolved(mh_fn f);

#endif
