/*
 * memhook.h - the C API of libmemhook.so, the one native core that holds all
 * of memhook's hook state.  The Python extension links to this library and
 * `memhook trace` LD_PRELOADs it, so a process always has exactly one copy.
 *
 * The one header a program includes (installed with the package; memhook.pc
 * and `memhook config --cflags` name its folder): the version, the log
 * level, the hooks and their status, the events and their drain, and the
 * memory-type queries.  The library also exports entry points for
 * memhook's own Python binding, tests and benches (the patch engines, a
 * cache fed by hand), declared in csrc/include/memhook_internal/api.h,
 * which is not installed and promises nothing.  Everything else is hidden.
 */
#ifndef MEMHOOK_H
#define MEMHOOK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEMHOOK_API __attribute__((visibility("default")))

/* Kept equal to memhook/_version.py (a test checks). */
#define MEMHOOK_VERSION_MAJOR 0
#define MEMHOOK_VERSION_MINOR 1
#define MEMHOOK_VERSION_PATCH 0
#define MEMHOOK_VERSION_STRING "0.1.0"

/* "MAJOR.MINOR.PATCH" of the loaded library (may differ from the header's). */
MEMHOOK_API const char *memhook_version(void);
/* MAJOR * 10000 + MINOR * 100 + PATCH */
MEMHOOK_API int memhook_version_number(void);
/* Absolute path of the libmemhook.so this process has loaded: the file to
 * LD_PRELOAD so that children share the same core. */
MEMHOOK_API const char *memhook_library_path(void);

/* Log levels, most severe first.  The level starts from the environment
 * variable MEMHOOK_LOG_LEVEL (error|warn|info|debug, default warn). */
typedef enum memhook_log_level {
    MEMHOOK_LOG_ERROR = 0,
    MEMHOOK_LOG_WARN = 1,
    MEMHOOK_LOG_INFO = 2,
    MEMHOOK_LOG_DEBUG = 3,
} memhook_log_level;

MEMHOOK_API int memhook_log_level_get(void);
/* Returns the previous level, or -1 (and changes nothing) if out of range. */
MEMHOOK_API int memhook_log_level_set(int level);
/* "error"/"warn"/"info"/"debug" (case-insensitive) -> level; -1 if invalid. */
MEMHOOK_API int memhook_log_level_parse(const char *name);
/* The lowercase name of a level, or NULL if out of range. */
MEMHOOK_API const char *memhook_log_level_name(int level);

/* ---- the CUDA hook layer (csrc/cuda/) ----
 *
 * The functions of csrc/cuda/hook_table.def, each with a wrapper that turns one
 * user call into one event.  bistro patches the driver's exported entries;
 * reloc points GOT slots, dlsym and cuGetProcAddress answers at the same
 * wrappers.  Events go into one lock-free multi-producer queue that grows
 * instead of dropping; memhook_events_drain takes them out in order. */

/* Mechanism bits: the MEMHOOK_CUDA_MODE bitmask. */
#define MEMHOOK_MODE_NONE   0u
#define MEMHOOK_MODE_BISTRO 1u
#define MEMHOOK_MODE_RELOC  2u
#define MEMHOOK_MODE_ALL    3u
#define MEMHOOK_MODE_DEFAULT (MEMHOOK_MODE_BISTRO | MEMHOOK_MODE_RELOC)

/* Event kinds: the bits of Python's memhook.EventKind. */
#define MEMHOOK_EVENT_ALLOC 1
#define MEMHOOK_EVENT_FREE  2
/* memhook_hook_info.kind of a hooked function that records no event (the
 * pointer-attribute calls, answered from the cache). */
#define MEMHOOK_EVENT_NONE  0

/* Memory types: the codes of Python's memhook.MemoryType.  The
 * MEMHOOK_MEMORY_* spelling is the query API's (memhook_query); the
 * MEMHOOK_MEM_* one is the events' (memhook_event.mem_type): equal values. */
#define MEMHOOK_MEM_HOST         0
#define MEMHOOK_MEM_CUDA         1
#define MEMHOOK_MEM_CUDA_MANAGED 2
#define MEMHOOK_MEM_CUDA_HOST    3
#define MEMHOOK_MEM_UNKNOWN      4
#define MEMHOOK_MEMORY_HOST         0  /* not CUDA's (pageable host memory) */
#define MEMHOOK_MEMORY_CUDA         1  /* device memory */
#define MEMHOOK_MEMORY_CUDA_MANAGED 2  /* managed (unified) memory */
#define MEMHOOK_MEMORY_CUDA_HOST    3  /* page-locked host memory CUDA knows */
#define MEMHOOK_MEMORY_UNKNOWN      4  /* nobody could tell */

/* Which API a hooked function belongs to. */
#define MEMHOOK_API_DRIVER  0
#define MEMHOOK_API_RUNTIME 1

/* memhook_event.flags */
#define MEMHOOK_EVENT_SIZE_UNKNOWN 0x1u  /* FREE whose size nobody knew: 0 */
#define MEMHOOK_EVENT_SKIPPED      0x2u  /* a slot whose producer vanished in
                                            fork(); never handed out */
#define MEMHOOK_EVENT_DRIVER_UNLOADED 0x4u  /* kind 0, no call: libcuda.so.1
                                               was unloaded here; every region
                                               before it is gone.  Drained, never
                                               sent to a trace (memhook trace) */
#define MEMHOOK_EVENT_CONTEXT_RESET 0x8u  /* a FREE of no address: the call
                                             (cuDevicePrimaryCtxReset,
                                             cuCtxDestroy, the last
                                             cuDevicePrimaryCtxRelease) freed
                                             every allocation of a context on
                                             `device` (-1: not known which);
                                             address and size 0.  Reaches the
                                             cache, subscribers and the trace */
#define MEMHOOK_EVENT_HOOKS_GAP 0x10u  /* kind 0, no call: the hooks stopped
                                          recording here (uninstall, or mode
                                          none), or started again after such
                                          a stop, or an ALLOC just before it
                                          was in flight across one (or a
                                          context teardown, or an unload).
                                          Calls made meanwhile were
                                          not seen, so nothing known of the
                                          memory before it can be vouched
                                          for: the cache marks every region
                                          UNKNOWN (the driver decides).  Not
                                          sent to subscribers or a trace */

/* One completed user call.  64 bytes: one cache line (the queue's and the
 * trace area's slots are lines), so kind/function/mem_type/device are 16
 * bits each to make room for `caller`. */
typedef struct memhook_event {
    uint64_t seq;            /* position in this process's event order */
    uint64_t address;        /* 0 for a failed ALLOC */
    uint64_t size;           /* requested bytes; pitch*height; global size;
                                the allocation's size for a FREE */
    uint64_t timestamp_ns;   /* CLOCK_MONOTONIC; coarse (its last tick)
                                unless precise time was asked for
                                (memhook_events_precise_time) or the
                                TSC is the cheaper read (MEMHOOK_CLOCK) */
    uint64_t caller;         /* the code that called into CUDA: the return
                                address of the outermost hooked call, or,
                                where that is inside CUDA's own libraries,
                                the first frame-pointer frame outside them;
                                0 unknown.  Consumers name it from the
                                process's mappings (memhook.Event.caller,
                                memhook trace's module records) */
    int16_t kind;            /* MEMHOOK_EVENT_ALLOC or _FREE */
    int16_t function;        /* index in the hook table (memhook_hook_get) */
    int16_t mem_type;        /* MEMHOOK_MEM_* */
    int16_t device;          /* device ordinal, -1 unknown */
    int32_t pid;
    int32_t tid;
    int32_t result;          /* CUresult or cudaError_t of the call */
    uint32_t flags;          /* MEMHOOK_EVENT_* flags */
} memhook_event;

/* Parse a MEMHOOK_CUDA_MODE value: "none", "bistro", "reloc", a comma list
 * of those, or an integer 0-3 (surrounding blanks allowed, case-insensitive).
 * NULL or "" gives the default.  Returns 0 and sets *mode, or EINVAL with a
 * reason naming the bad token and the valid values. */
MEMHOOK_API int memhook_mode_parse(const char *text, unsigned *mode, char *why, size_t why_len);

/* Install the hooks with the mechanisms in mode (MEMHOOK_MODE_* bits),
 * replacing whatever mode is installed: idempotent for the same mode, a
 * switch for another.  bistro loads libcuda.so.1 if it is not loaded yet.
 * Per-function failures (a refused prologue, a W^X host) are not errors:
 * memhook_hook_get says which function is covered by what, and why not.
 * Returns 0, or EINVAL for bits outside MEMHOOK_MODE_ALL (nothing changed),
 * or the errno of a whole-mechanism failure with a reason in why (bistro
 * alone patching nothing: the previous mode stays installed, and
 * memhook_hook_get gives each function bistro's reason). */
MEMHOOK_API int memhook_hooks_install(unsigned mode, char *why, size_t why_len);
/* Restore every byte and GOT slot the hooks changed.  Wrappers a caller
 * still holds (from dlsym or cuGetProcAddress) keep working and record
 * nothing. */
MEMHOOK_API int memhook_hooks_uninstall(void);
/* The installed mode (MEMHOOK_MODE_* bits). */
MEMHOOK_API unsigned memhook_hooks_mode(void);
/* Pointer attributes (off unless MEMHOOK_POINTER_ATTRIBUTES=1 at load):
 * with on = 1, the next memhook_hooks_install also routes
 * cuPointerGetAttribute(s) and cudaPointerGetAttributes to memhook, which
 * answers from the cache what it knows exactly and passes the rest to the
 * driver (docs/design/pointer-attributes.md); 0 turns the answers off at
 * once, and the next install takes bistro's patches of them out.  Returns
 * 0, or EINVAL for any other value. */
MEMHOOK_API int memhook_hooks_set_pointer_attributes(int on);
/* 1 while pointer attributes are on, else 0. */
MEMHOOK_API int memhook_hooks_pointer_attributes(void);
/* 1 while the installed hooks see every allocation the loaded driver can
 * make (so a pointer in no known region is host memory); 0 when some
 * present entry point is uncovered, or the driver was initialised before
 * the hooks went in (it may hold allocations no hook saw: pinned host
 * memory cannot be told from other host memory in /proc/self/maps), or
 * reloc alone came after the driver was loaded (objects may hold driver
 * pointers resolved before). */
MEMHOOK_API int memhook_hooks_coverage_complete(void);
/* A value that changes whenever memhook_hooks_coverage_complete()'s answer
 * may have changed (the mode, an object loaded, the queue's first trim):
 * callers remember the answer under it. */
MEMHOOK_API unsigned long long memhook_coverage_token(void);

typedef struct memhook_hook_info {
    const char *name;        /* "cuMemAlloc_v2", "cudaMalloc", ... */
    int api;                 /* MEMHOOK_API_DRIVER or _RUNTIME */
    int kind;                /* MEMHOOK_EVENT_ALLOC, _FREE or _NONE */
    int present;             /* 1: the loaded library exports it */
    unsigned mechanisms;     /* MEMHOOK_MODE_* bits covering it now */
    int bistro_jump;         /* 5 or 12 when bistro patched it, else 0 */
    char reason[320];        /* why not covered (or why bistro refused) */
    int bistro_overwritten;  /* 1: another patcher wrote its jump over memhook's
                                after memhook patched the entry; memhook's jump
                                and trampoline stay under it, never taken out */
} memhook_hook_info;

/* The number of functions in the hook table. */
MEMHOOK_API size_t memhook_hook_count(void);
/* Fill *out for table entry index.  Returns 0, or EINVAL past the end. */
MEMHOOK_API int memhook_hook_get(size_t index, memhook_hook_info *out);
/* Fill out[0 .. count) with entries first .. first+count-1 (cut at the end
 * of the table), as memhook_hook_get would, in one call.  Returns how many
 * were filled (0 when first is past the end or out is NULL). */
MEMHOOK_API size_t memhook_hook_get_range(size_t first, size_t count, memhook_hook_info *out);
/* The table index of a function name, or -1. */
MEMHOOK_API int memhook_hook_index(const char *name);

/* Move up to capacity pending events, in event order, into out.  Returns
 * how many.  Never blocks producers; consumers serialise on an internal
 * lock that no hook takes.  Each thread records into a lane of its own; the
 * drain merges the lanes in an order causal per address range (a FREE
 * after the ALLOC that made its range and before any later ALLOC
 * overlapping it; markers after what was recorded before them) and numbers
 * the events (seq) - an event recorded while the drain runs may wait for
 * the next one.  Events of unrelated ranges from different threads within
 * one coarse clock tick may come in either order (memhook_events_precise_time). */
MEMHOOK_API size_t memhook_events_drain(memhook_event *out, size_t capacity);

/* memhook_events_drain as one step of a bounded run: the run hands out
 * only what was pending when its first call began (plus what producers
 * stamped during that call's first look at the queue), however fast other
 * threads record meanwhile.  *mark is the run's state: 0 before its first
 * call; pass the same mark to each call of the run, which ends when a call
 * returns fewer than capacity events.  (memhook_events_drain is a run of
 * one call.)  Runs may interleave, each with its own mark: a run called
 * again after a later run began goes on as that later run (a longer cut),
 * so it still ends only once everything pending when it began is out. */
MEMHOOK_API size_t memhook_events_drain_bounded(memhook_event *out, size_t capacity,
                                                uint64_t *mark);

/* memhook_events_drain_bounded into out[*filled, capacity), adding what it
 * took to *filled before it returns: a caller whose thread may be
 * interrupted between two of its own steps (a Python signal handler's
 * exception lands after any call returns) never holds events that nothing
 * but a return value counts.  Returns how many it took (0 when *filled is
 * capacity already). */
MEMHOOK_API size_t memhook_events_drain_into(memhook_event *out, size_t capacity, uint64_t *mark,
                                             uint64_t *filled);

/* A background drainer's step (a thread that drains every so often, as
 * Python's feeder does): memhook_events_drain's order, but it promises
 * nothing about what was pending when it was called - it hands out what
 * the previous call (any drain's) saw published, and of a lane whose
 * thread recorded since, only events some way behind the newest (so the
 * cache lines that thread writes next stay in its core).  It reads
 * each thread's count once.  What it leaves, a later call or any
 * memhook_events_drain / _bounded run takes (those hand out everything
 * recorded before they began: use them for a flush or before a query).
 * May return fewer than capacity, or 0, while events are pending. */
MEMHOOK_API size_t memhook_events_drain_background(memhook_event *out, size_t capacity);

/* Precise timestamps.  Events carry CLOCK_MONOTONIC_COARSE (the clock as
 * of its last tick, 1-4 ms) unless reading the TSC costs less (then every
 * stamp is precise) or something needs precise time: the trace
 * (memhook trace) always does, and a consumer may ask with want 1 (counted:
 * each ask is given back with want 0).  Asking changes the events recorded
 * from then on.  Returns 0, or EINVAL for a give-back nobody asked for. */
MEMHOOK_API int memhook_events_precise_time(int want);

/* Exact sizes.  Outside the trace a FREE is recorded with its address
 * only, and the drain fills its size, type and device from the allocation
 * it frees (the ALLOC it pairs with); a FREE of memory allocated before
 * install carries size 0 and MEMHOOK_EVENT_SIZE_UNKNOWN.  want 1 (counted,
 * given back with want 0) asks for what the trace gets instead: each FREE
 * sized in the hook (as the driver knows it, before the free) and precise
 * timestamps, for the FREEs of calls that begin after it returned.
 * Returns 0, or EINVAL for a give-back nobody asked for. */
MEMHOOK_API int memhook_events_exact_sizes(int want);

/* A flag a drainer may read without calling in (Python reads it through
 * cffi before each query): nonzero when events may be pending, 0 when a
 * drain would find none.  Read it with a plain 32-bit load. */
MEMHOOK_API const volatile uint32_t *memhook_events_pending_flag(void);

/* Block until at least `threshold` events are waiting to be drained (1),
 * or timeout_ms passed (0).  Polls (every 5 ms): producers make no system
 * call to wake it.  Python's background feeder (memhook/_events/feeder.py) waits
 * here, the GIL released. */
MEMHOOK_API int memhook_events_wait_backlog(uint64_t threshold, unsigned timeout_ms);

typedef struct memhook_queue_stats {
    uint64_t produced;        /* events recorded (published) so far */
    uint64_t consumed;        /* events taken out (drained, or dropped by a trace's trim) */
    uint64_t segments_live;   /* segments mapped now (queue + awaiting reuse) */
    uint64_t segments_peak;   /* most segments mapped at once */
    uint64_t segment_bytes;   /* bytes of one segment */
    uint64_t free_size_from_driver; /* FREEs whose size came from the driver */
    uint64_t free_size_unknown;     /* FREEs whose size nobody knew */
    uint64_t lanes;           /* per-thread lanes made so far (an exited thread's is reused) */
} memhook_queue_stats;

MEMHOOK_API void memhook_queue_stats_get(memhook_queue_stats *out);

/* Record an event as a hook would (for tests and for a native transport's
 * own bookkeeping); same path, same guarantees.  Returns 0, or EBUSY (and
 * records nothing) when called from a signal handler that interrupted this
 * thread inside a hook or another record: its seq is given by the drain. */
MEMHOOK_API int memhook_events_record(int kind, int function, uint64_t address,
                                           uint64_t size, int mem_type, int device,
                                           int result);

/* ---- the memory-type cache: queries (csrc/cache/) ----
 *
 * One cache per process, in this library, fed by the core's own drain: every
 * memhook_events_drain* call and the trace's reader apply the events they
 * hand out to it, in event order, before returning; a query applies what is
 * pending first.  So a program with no Python in it (this library in
 * LD_PRELOAD, hooks installed with memhook_hooks_install) has it too, and a
 * C transport, Python and `memhook trace` all read the same one.
 */

#define MEMHOOK_ORIGIN_UNKNOWN 0  /* neither hooks nor driver vouched */
#define MEMHOOK_ORIGIN_HOOKS   1  /* the hooks saw it: no driver call made */
#define MEMHOOK_ORIGIN_DRIVER  2  /* the driver was asked */

typedef struct memhook_region {
    size_t struct_size;   /* in: sizeof(memhook_region) as the caller knows it */
    int mem_type;         /* MEMHOOK_MEMORY_* */
    int device;           /* device ordinal, -1 unknown / not one device */
    uint64_t base;        /* the allocation's first byte */
    uint64_t size;        /* its size in bytes */
    uint64_t alloc_id;    /* unique per allocation for the process's life; 0: none */
    int origin;           /* MEMHOOK_ORIGIN_* */
    int reserved0;        /* 0 (room; fields are only ever added after this) */
} memhook_region;

/* The smallest struct_size accepted: every field above. */
#define MEMHOOK_REGION_MIN_SIZE sizeof(memhook_region)

/* memhook_query(ptr, len, out): what [ptr, ptr + len) is (len 0: the byte
 * at ptr).  Python's memhook.MemtypeCache has the same semantics and is the
 * reference the cache is tested against.
 *  - Wholly inside one allocation: its type, device, base, size, alloc_id.
 *    Covered by touching allocations of one type: that type, base/size span
 *    them, device -1 unless they share one, alloc_id 0.  Running from an
 *    allocation into a gap or another type, or from a gap into one:
 *    MEMHOOK_MEMORY_UNKNOWN.  In no allocation: MEMHOOK_MEMORY_HOST.  For
 *    HOST or UNKNOWN, base/size are ptr/len and alloc_id is 0.
 *  - alloc_id: unique per allocation for the life of the process (never
 *    reused, never 0 for an allocation): a registration cache keys on it as
 *    on CU_POINTER_ATTRIBUTE_BUFFER_ID.  A part of an allocation that
 *    outlives a partial unmap keeps its id.
 *  - origin: HOOKS when the hooks vouch (no driver call): a region learned
 *    from hook events since the hooks were last installed, or host memory
 *    while they cover every allocation entry point of the loaded driver
 *    (memhook_hooks_coverage_complete).  DRIVER when the driver was asked,
 *    the only way an answer is made where the hooks do not vouch (no hooks,
 *    memory learned before an uninstall, a region remembered from a driver
 *    answer while the frees are not covered, UNKNOWN regions: a context
 *    reset, VA reserved before install).  UNKNOWN when neither could (no
 *    driver loaded or initialised): the cache's answer, unverified.  The
 *    driver is asked only if this process has loaded and initialised it
 *    already: memhook never loads or initialises a driver for a query.
 *  - A driver answer is remembered as a region (origin DRIVER) when no event
 *    was applied meanwhile; vouched for only while the hooks cover every
 *    entry point, else re-verified with the driver.
 *  - Returns 0 with *out filled; -EINVAL for out NULL or out->struct_size
 *    below MEMHOOK_REGION_MIN_SIZE (nothing written); -EOVERFLOW when
 *    ptr + len runs past the end of the address space.
 *  - Any thread; waits for no lock and no writer, makes no malloc.  Pending
 *    events are applied first if the queue's consumer lock and the cache's
 *    writer seat are free; if another thread holds them, the caller's own
 *    pending events are still seen (from its lane: its own allocation is
 *    answered by the hooks, with the alloc_id it keeps), and the driver is
 *    asked only when another thread's events are pending too.  Not
 *    async-signal-safe (it may drain and call the driver): the _cached
 *    forms are. */
MEMHOOK_API int memhook_query(const void *ptr, size_t len, memhook_region *out);
/* memhook_query without a drain or a driver call: what the cache holds now
 * (its published map: on a map of 2,048 regions or more, the events a drain
 * applied are published by the next memhook_query, or by a later drain
 * once they are as many as twice the map's regions).
 * Where memhook_query would ask the driver, answers what the cache has with
 * origin MEMHOOK_ORIGIN_UNKNOWN.  Async-signal-safe: no drain, no driver
 * call, no lock (it reads the published snapshot; a nested reader in a
 * handler keeps the interrupted one's protection). */
MEMHOOK_API int memhook_query_cached(const void *ptr, size_t len, memhook_region *out);
/* memhook_query of the byte at each of ptrs[0 .. count), one drain for all:
 * out is an array of count regions of out[0].struct_size bytes each (the
 * stride; each element is filled with it).  Returns 0, or the first error. */
MEMHOOK_API int memhook_query_batch(const void *const *ptrs, size_t count, memhook_region *out);
/* The type alone of the byte at each address (MEMHOOK_MEMORY_* codes, one
 * byte each), as memhook_query would answer it; the batch form Python's
 * memory_types binds.  Returns 0, or -EINVAL for a NULL array with count
 * nonzero. */
MEMHOOK_API int memhook_query_types(const uint64_t *ptrs, size_t count, uint8_t *types);
/* memhook_query_types from the cache alone (as memhook_query_cached;
 * async-signal-safe).  memhook_query_batch and memhook_query_types are not:
 * like memhook_query they may drain and call the driver. */
MEMHOOK_API int memhook_query_types_cached(const uint64_t *ptrs, size_t count,
                                            uint8_t *types);

/* ---- the process cache by hand (csrc/cache/cache_hand.c) ----
 * For a transport that knows of memory the hooks cannot see, and for
 * Python's memhook.cache.process_cache(), a view of this cache.  Writes
 * are queued after every event published before the call (event order),
 * stamped with the current install period, origin MEMHOOK_ORIGIN_HOOKS:
 *  - memhook_cache_update: [base, base + size) becomes one region of
 *    mem_type (MEMHOOK_MEMORY_*) on device (-1: none known);
 *  - memhook_cache_remove: a hole over [base, base + size);
 *  - memhook_cache_clear: every region goes.
 * They return 0, -EINVAL (size 0, a type or device out of range),
 * -EOVERFLOW (past the end of the address space) or -ENOMEM.
 * memhook_cache_lookup: what the cache alone holds for [ptr, ptr + len)
 * (no driver call): 0 in no region, 1 inside one, 2 covered by touching
 * regions of one type, 3 mixed, with *out as memhook_query fills it (origin
 * HOOKS where vouched, else UNKNOWN); -EINVAL/-EOVERFLOW as memhook_query.
 * memhook_cache_regions: the regions in address order (up to capacity into
 * out, each sizeof(memhook_region)); returns how many there are.
 * Any thread; not async-signal-safe (a write waits for the writer's seat,
 * the listing mallocs). */
MEMHOOK_API int memhook_cache_update(uint64_t base, uint64_t size, int mem_type, int device);
MEMHOOK_API int memhook_cache_remove(uint64_t base, uint64_t size);
MEMHOOK_API int memhook_cache_clear(void);
MEMHOOK_API int memhook_cache_lookup(const void *ptr, size_t len, memhook_region *out);
MEMHOOK_API size_t memhook_cache_regions(memhook_region *out, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* MEMHOOK_H */
