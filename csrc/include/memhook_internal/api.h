/*
 * memhook_internal/api.h - what libmemhook.so exports beyond its C API, for
 * memhook's own Python binding, its tests and its benches: the patch
 * engines' entry points (the x86-64 decoder and relocator, bistro, reloc),
 * a hook's bypass, a private cache fed by hand, a log line written from
 * outside, and two questions only the Python binding asks (the loader's
 * generation, the VA CUDA reserved before install).  Exported (MEMHOOK_API) because those callers live outside the
 * library; declared here, not in memhook/memhook.h, because no program
 * should build on them: this header is never installed (csrc/build_native.py
 * copies memhook.h and cuda_abi.h only), and what it declares may change
 * with any release.  The core's own files include it where they define or
 * call these (the hook layer drives bistro and reloc through them).
 */
#ifndef MEMHOOK_INTERNAL_API_H
#define MEMHOOK_INTERNAL_API_H

#include <stddef.h>
#include <stdint.h>

#include "memhook/memhook.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the loader (csrc/core/loader.c): memhook/_binding/driver.py's question ---- */

/* The dynamic loader's count of objects ever loaded (dl_iterate_phdr's
 * dlpi_adds): it changes exactly when an object was loaded since. */
MEMHOOK_API unsigned long long memhook_loader_generation(void);

/* ---- log ---- */

/* Write one line to stderr at the given level (if enabled).  For the Python
 * layer's own diagnostics that must interleave with the native ones. */
MEMHOOK_API void memhook_log_write(int level, const char *message);

/* ---- bistro: the x86-64 decoder and relocator (csrc/bistro/arch/x86_64/x86_exports.c) ---- */

/* Length of the x86-64 instruction at code (at most avail bytes), or a
 * negative mh_x86_status (-1 truncated, -2 unknown opcode, -3 invalid). */
MEMHOOK_API int memhook_x86_insn_length(const void *code, size_t avail);

/* Bulk form of memhook_x86_insn_length, for differential tests: decodes the
 * first instruction of each of `count` sequences laid out `stride` bytes
 * apart in buf (each sequence has stride readable bytes) and stores its
 * length or negative status in out_lengths[i].  Returns how many decoded. */
MEMHOOK_API size_t memhook_x86_lengths(const void *buf, size_t stride, size_t count,
                                       int8_t *out_lengths);

/* Relocate the whole instructions covering src[0 .. need) (running at
 * src_addr; avail readable bytes) to run at dst_addr, writing at most
 * dst_cap bytes to dst (no jump back is appended).  Returns 0 (an
 * mh_reloc_refusal code otherwise, with reason filled), and the bytes moved
 * and written.  A diagnostic and test entry to the relocator the patch
 * engine uses; it writes only to dst. */
MEMHOOK_API int memhook_x86_relocate(const void *src, uint64_t src_addr, size_t avail, size_t need,
                                     void *dst, uint64_t dst_addr, size_t dst_cap,
                                     size_t *consumed, size_t *written, char *reason,
                                     size_t reason_cap);

typedef struct memhook_bistro_analysis {
    int patchable;           /* 1: the entry can be patched with jump_size */
    int jump_size;           /* 5 (jmp rel32) or 12 (movabs rax; jmp rax) */
    size_t patch_offset;     /* 4 when an endbr64 is kept at the entry, else 0 */
    size_t consumed;         /* bytes moved to the trampoline (whole insns) */
    int refusal;             /* 0 or an mh_reloc_refusal code */
    char reason[256];        /* names the function, library and the bytes */
} memhook_bistro_analysis;

/* Judge whether the function at code (avail readable bytes; it runs at
 * `address`; symbol_size 0 = unknown) can be patched with a jump of
 * jump_size bytes and its displaced instructions relocated to a trampoline
 * at trampoline_address.  name/library only feed the reason text.  Returns
 * 0 and fills *out (even when not patchable), or -1 on a bad argument.
 *
 * The back-branch sweep decodes the body from the end of the moved window
 * to min(avail, symbol_size).  When only the first bytes of a longer
 * function are known (avail < symbol_size), an instruction cut off by the
 * end of those bytes ends the sweep without a refusal.  A branch that lands
 * exactly at the patch's first byte (a tail call to the function itself) is
 * allowed: it runs the patch, which is what a call would do. */
MEMHOOK_API int memhook_bistro_analyze(const void *code, size_t avail, uint64_t address,
                                       size_t symbol_size, int jump_size,
                                       uint64_t trampoline_address, const char *name,
                                       const char *library, memhook_bistro_analysis *out);

/* ---- bistro: the patch engine (csrc/bistro/patch.c) ---- */

typedef struct memhook_bistro_patch memhook_bistro_patch; /* opaque */

/* Patch `target` to jump to `hook`.  On success returns 0, sets *original to
 * a callable that behaves like the unpatched function (the trampoline) and
 * *out to the patch record.  On failure returns a positive errno (EPERM/EACCES
 * from a W^X host, ENOEXEC for a refusal by the planner, ENOMEM, EINVAL,
 * EEXIST if already patched, EAGAIN when a thread blocks SIGTRAP or cannot be
 * probed, EBUSY if a thread stands inside the window off any boundary) and
 * writes a one-line reason into why[why_len] naming the function, its library
 * and the prologue bytes; nothing is written to the target then.
 * jump_size: 0 = automatic (5 when the hook or a jump slot near the target is
 * reachable, else 12; MEMHOOK_BISTRO_FAR_JUMP=1 forces 12), 5 or 12 to demand
 * one.  Safe while other threads call `target`.  *original is written
 * before the patch goes live (and put back on failure), so a hook that calls
 * through the variable passed as `original` never sees it unset. */
MEMHOOK_API int memhook_bistro_install(void *target, void *hook, int jump_size, void **original,
                                       memhook_bistro_patch **out, char *why, size_t why_len);
/* Restore every byte and the page protection; frees the record (the
 * trampoline memory stays mapped, because a thread may still be inside it).
 * Returns 0, EINVAL (not a live patch) or EBUSY (our jump was overwritten by
 * someone else: nothing restored), or the errno of a refused mprotect. */
MEMHOOK_API int memhook_bistro_remove(memhook_bistro_patch *patch);
/* Many patches in one pass of the live-write protocol (one set of core
 * syncs and one probe of the threads for the whole batch, instead of one per
 * function): what install("bistro") uses.  Each request is answered as
 * memhook_bistro_install would (err, why, patch); returns how many were
 * installed. */
typedef struct memhook_bistro_request {
    void *target;
    void *hook;
    int jump_size;                 /* 0, 5 or 12 as for memhook_bistro_install */
    void **original;
    memhook_bistro_patch *patch;   /* out: the patch, or NULL */
    int err;                       /* out: 0 or an errno */
    char why[256];                 /* out: the reason when err != 0 */
} memhook_bistro_request;
MEMHOOK_API size_t memhook_bistro_install_batch(memhook_bistro_request *req, size_t n);
/* Remove many patches in one pass; errs[i] is what memhook_bistro_remove
 * would return for patches[i] (plus EAGAIN: a thread blocks SIGTRAP or the
 * probe signal, so the patch stays in place).  Returns how many were
 * removed. */
MEMHOOK_API size_t memhook_bistro_remove_batch(memhook_bistro_patch **patches, int *errs,
                                               size_t n);
/* 5 or 12: the size of the jump the patch wrote. */
MEMHOOK_API int memhook_bistro_patch_jump_size(const memhook_bistro_patch *patch);
/* 1 while the patch's jump is still at its site, 0 once another patcher has
 * written over it (memhook_bistro_remove then answers EBUSY and restores
 * nothing) or for NULL. */
MEMHOOK_API int memhook_bistro_patch_intact(const memhook_bistro_patch *patch);

/* ---- reloc: GOT/PLT rewriting (csrc/reloc/) ---- */

typedef struct memhook_reloc_symbol {
    const char *name;     /* symbol name, e.g. "cuMemAlloc_v2"; "name@VERSION"
                             matches only objects that need that version */
    void *replacement;    /* what every GOT slot of `name` will point to */
    void **original;      /* receives the definition the loader binds for name
                             (RTLD_DEFAULT lookup by the real dlsym; filled in
                             later, before any slot or lookup hands out the
                             replacement, when the name is not loaded yet), or
                             NULL */
} memhook_reloc_symbol;

/* Add these symbols to the hooked set and rewrite every loaded object's
 * slots (and, from now on, those of objects loaded later: dlopen, dlmopen,
 * dlsym, dlvsym and cuGetProcAddress(_v2) are interposed while at least one
 * symbol is installed).  memhook's own object and the dynamic linker are
 * never patched.  Idempotent; a name installed again takes the new
 * replacement.  Returns 0 or a positive errno with a one-line reason in why
 * (why may be NULL). */
MEMHOOK_API int memhook_reloc_install(const memhook_reloc_symbol *symbols, size_t count,
                                      char *why, size_t why_len);
/* Restore every slot ever changed (still mapped and still holding memhook's
 * pointer) and stop interposing; forgets the installed symbols. */
MEMHOOK_API int memhook_reloc_uninstall(void);
/* How many GOT slots currently point at the replacements of installed
 * symbols (the engine's own dl and cuGetProcAddress slots not counted). */
MEMHOOK_API size_t memhook_reloc_patched_slots(void);

/* ---- the CUDA hook layer (csrc/cuda/) ---- */

/* The VA ranges of this process where CUDA may hold memory (anonymous
 * no-access mappings, /dev/nvidia* mappings, the simulator's device-memory
 * memfd; touching ones merged), from /proc/self/maps: start/end pairs into
 * pairs[0 .. 2*capacity).  Returns how many ranges there are (more than
 * capacity: call again with room for them), or -1 when the maps cannot be
 * read.  install() marks those no cache region covers UNKNOWN. */
MEMHOOK_API long long memhook_cuda_reserved_ranges(uint64_t *pairs, size_t capacity);
/* What the wrapper of hook-table function `name` calls: bistro's trampoline
 * when the entry is patched (the original code, relocated), else the real
 * definition; NULL when unknown.  Calling it bypasses the hook - no event,
 * no bookkeeping (bench/hooks/hook_bench.c times it against the hooked entry). */
MEMHOOK_API void *memhook_hooks_original(const char *name);

/* ---- testing: pointer attributes (csrc/cuda/pointer_attributes.c) ---- */
/* How many pointer-attribute calls memhook answered itself in the calling
 * thread (the rest went to the driver): for differential tests. */
MEMHOOK_API unsigned long long memhook_testing_pointer_attributes_answered(void);

/* ---- testing: an ALLOC's device (csrc/cuda/driver_calls.c) ---- */
/* How many times the calling thread's hooks asked the driver for the
 * current device (an ALLOC's, where the process sees several devices or
 * does not know yet how many). */
MEMHOOK_API unsigned long long memhook_testing_device_queries(void);

/* ---- testing: the clock (csrc/queue/clock.c) ---- */
/* 1 when every event stamp is a TSC reading (the cheaper read here, or
 * MEMHOOK_CLOCK=tsc); 0 when stamps nobody asked to be precise are read
 * from CLOCK_MONOTONIC_COARSE. */
MEMHOOK_API int memhook_testing_clock_tsc_always(void);
/* The TSC's rate, ns a tick, measured in this process from its load to now
 * (over 4 ms at least: just after load the call waits for the rest, once);
 * 0 where stamps are no TSC readings.  Every process of the machine reads
 * one TSC (clock.c uses it only where it is invariant and Linux's clock),
 * so `memhook trace`'s collector sizes a young process's raw stamps with
 * it before that process's own anchors are far enough apart. */
MEMHOOK_API double memhook_clock_ns_per_tick(void);

/* Take (hold nonzero) or let go (hold 0) the event queue's consumer lock in
 * the calling thread, as a drain in progress holds it - for tests that show
 * a query neither waits for a drain nor misses its own thread's events
 * meanwhile.  Returns 0, or -EINVAL when the calling thread does not hold it
 * (let go) or holds it already (take). */
MEMHOOK_API int memhook_testing_drain_hold(int hold);

/* Whether the calling thread's lane's span summary (csrc/queue/lane_span.c)
 * says that one of its newest `back` events may touch [lo, hi): 1 or 0;
 * -EINVAL for no lane, back 0 or past its events, lo >= hi. */
MEMHOOK_API int memhook_testing_span_touches(uint64_t back, uint64_t lo, uint64_t hi);

/* ---- testing: a private cache, fed by hand (csrc/cache/cache_query.c) ----
 * For the property test that replays event streams into this cache and into
 * memhook.MemtypeCache; not for production use (no drain, no driver). */
typedef struct memhook_testing_cache memhook_testing_cache;
MEMHOOK_API memhook_testing_cache *memhook_testing_cache_new(void);
MEMHOOK_API void memhook_testing_cache_free(memhook_testing_cache *cache);
/* Apply events as the drain would, in order, and publish. */
MEMHOOK_API void memhook_testing_cache_apply(memhook_testing_cache *cache,
                                             const memhook_event *events, size_t count);
/* Remember a driver answer as a query would (origin DRIVER). */
MEMHOOK_API void memhook_testing_cache_remember(memhook_testing_cache *cache, uint64_t base,
                                                uint64_t size, int mem_type, int device);
/* The hooks' state as the cache sees it: installed (a new install period
 * when it changes) and whether they cover every entry point. */
MEMHOOK_API void memhook_testing_cache_hooks(memhook_testing_cache *cache, int installed,
                                             int coverage);
/* What the cache says of [ptr, ptr + len): 0 in no region, 1 inside one,
 * 2 covered by touching regions of one type, 3 mixed; *out as memhook_query
 * would fill it from the cache alone (origin HOOKS when vouched, else
 * UNKNOWN).  -EINVAL/-EOVERFLOW as memhook_query. */
MEMHOOK_API int memhook_testing_cache_lookup(memhook_testing_cache *cache, uint64_t ptr,
                                             uint64_t len, memhook_region *out);
/* The regions in address order (up to capacity into out, each
 * sizeof(memhook_region)); returns how many there are. */
MEMHOOK_API size_t memhook_testing_cache_regions(memhook_testing_cache *cache,
                                                 memhook_region *out, size_t capacity);
/* Types of single bytes: MEMHOOK_MEMORY_* (HOST in no region). */
MEMHOOK_API void memhook_testing_cache_types(memhook_testing_cache *cache, const uint64_t *ptrs,
                                             size_t count, uint8_t *types);
/* The queue's feed by hand: stage events (not applied), then commit what
 * was staged as a drain's commit does (`deferrable`: a short batch over a
 * large map may stay queued, unpublished, as memhook_testing_cache_deferred
 * counts; else everything queued is published). */
MEMHOOK_API void memhook_testing_cache_stage(memhook_testing_cache *cache,
                                             const memhook_event *events, size_t count);
MEMHOOK_API void memhook_testing_cache_commit(memhook_testing_cache *cache, int deferrable);
MEMHOOK_API size_t memhook_testing_cache_deferred(memhook_testing_cache *cache);
/* The binary steps a search of the cache's published map takes: those its
 * guide leaves (csrc/cache/region_map.c), else log2 of its keys' padded
 * length (a power of two). */
MEMHOOK_API int memhook_testing_cache_search_steps(memhook_testing_cache *cache);
/* The drain's question for a FREE it cannot size (mh_cache_driver_alloc_at):
 * 1 with *out filled (origin DRIVER), or 0. */
MEMHOOK_API int memhook_testing_cache_driver_alloc_at(memhook_testing_cache *cache, uint64_t addr,
                                                      memhook_region *out);

#ifdef __cplusplus
}
#endif

#endif /* MEMHOOK_INTERNAL_API_H */
