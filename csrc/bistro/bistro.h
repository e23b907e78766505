/*
 * bistro.h - internal API of the bistro patch engine (binary instrumentation
 * of function entries).  Layers, bottom up:
 *
 *   arch.h       the instruction set: jump forms, trampolines, decoding,
 *                relocation, a signal handler's view of a thread
 *                (arch/x86_64/; no side effects but the stores it names)
 *   island.c     executable memory near a target (never writable+executable)
 *   plan.c       the one decision whether and how an entry is patched
 *   text_poke.c  the live-write protocol (int3, core sync, moving threads out)
 *   patch.c      install/remove and the exported memhook_bistro_* entry
 *                points (memhook_internal/api.h)
 *
 * Everything here is called with the bistro mutex held (patch.c owns it;
 * its place in the lock order: csrc/core/mh_lock_order.h), except the
 * SIGTRAP handler, which only reads atomics.
 */
#ifndef MEMHOOK_BISTRO_H
#define MEMHOOK_BISTRO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "arch.h"

/* ---- island.c: executable memory within +-2 GiB of a target ------------ */

/* Islands are placed this close to a target (leaves room for RIP-relative
 * operands of the relocated prologue that point elsewhere in the library). */
#define MH_ISLAND_NEAR ((uint64_t)1 << 30)

typedef struct mh_island_chunk {
    uint64_t addr;       /* where the code will run (the R+X view) */
    size_t size;
    struct mh_island_page *page;
} mh_island_chunk;

/* Reserve `size` bytes of executable memory (16-byte aligned) within
 * MH_ISLAND_NEAR of `near` (or anywhere when near == 0).  Returns 0, or an
 * errno (ENOMEM when nothing could be mapped there).  The bytes are not
 * executable content yet: fill them with mh_island_commit. */
MH_HIDDEN int mh_island_reserve(uint64_t near, size_t size, mh_island_chunk *out);
/* Shrink a reservation to `size` (gives the tail back if nothing followed). */
MH_HIDDEN void mh_island_shrink(mh_island_chunk *chunk, size_t size);
/* Write `len` bytes at chunk->addr and make them executable.  The R+X view
 * is never writable: the bytes go through a transient RW alias of the same
 * memfd page, or (fallback: no memfd) into a page that has never been
 * executable and is then sealed R+X for good.  Returns 0 or an errno (e.g.
 * EACCES when the host forbids making anything executable). */
MH_HIDDEN int mh_island_commit(mh_island_chunk *chunk, const void *bytes, size_t len);
/* Give back an uncommitted reservation (best effort: the tail of a page). */
MH_HIDDEN void mh_island_release(mh_island_chunk *chunk);
/* After fork: the child must not append to pages it shares with its parent. */
MH_HIDDEN void mh_island_atfork_child(void);

/* ---- patch.c: fork ------------------------------------------------------ */

/* The patch mutex is held across fork() (prepare/parent); the child keeps
 * its patches and stops appending to island pages it shares with its
 * parent.  Registered at load by csrc/cuda/fork_order.c, in the order of
 * csrc/core/mh_lock_order.h. */
MH_HIDDEN void mh_bistro_fork_prepare(void);
MH_HIDDEN void mh_bistro_fork_parent(void);
MH_HIDDEN void mh_bistro_fork_child(void);

/* ---- text_poke.c: the live-write protocol ------------------------------- */

/* Serializing event on every CPU that runs a thread of this process. */
MH_HIDDEN void mh_sync_cores(void);

/* One patch window known to the signal handlers: [at, at+len) (len: a
 * jump form's size) with its trampoline at `tramp`.  A thread that hits
 * the trap at `at` continues at tramp + map[0] (the trampoline's copy:
 * "original behaviour"); one the probe finds at an old instruction
 * boundary at+k (k < 16) continues at tramp + map[k] (0xFF: no boundary);
 * one found midway through the far jump to dest (mh_arch_far_jump_midway)
 * continues at dest (dest 0: keep the one registered before).  Entries are
 * never removed: a trap or probe taken just before a write may be
 * delivered after it. */
MH_HIDDEN int mh_trap_register(uint64_t at, uint64_t tramp, int len, const uint8_t map[16],
                               uint64_t dest);
/* Make sure our SIGTRAP handler is the installed one (chains to others). */
MH_HIDDEN int mh_trap_handler_ensure(void);

/* A thread of the process that blocks SIGTRAP now (past glibc's transient
 * all-blocked masks), 0 when none does: then the next batch uses the spin
 * barrier, which needs windows whose first instruction is longer than a
 * byte.  Pass it to that batch (it is looked at once more, not waited on). */
MH_HIDDEN pid_t mh_text_poke_trap_blocker(void);

/* One window of a batch for mh_text_poke_batch. */
typedef struct mh_poke {
    uint64_t at;
    const uint8_t *bytes;   /* the new bytes, len of them */
    size_t len;
    /* The bytes being replaced have an instruction boundary strictly
     * inside (at, at+len): a thread may stand there. */
    bool interior;
    /* ... one of them at +1 (the first old instruction is 1 byte): no spin
     * barrier (it overwrites byte 1 too) */
    bool boundary1;
    int err;                /* out: 0 written, else an errno (nothing written) */
    char why[200];          /* out: the reason when err != 0 */
    uint8_t old0;           /* scratch */
    uint16_t old01;         /* scratch */
} mh_poke;

/*
 * Replace code[at .. at+len) of every window of the batch with its new
 * bytes while other threads may be executing them, in one pass of the
 * int3 protocol (text_poke.c describes it), in bounded time: threads found
 * inside a window are moved, never waited for.  Every window must be
 * registered with mh_trap_register first.  A window is either fully
 * written or left as it was (err and why say why).  trap_blocker: what
 * mh_text_poke_trap_blocker answered just before, or 0.  Returns how many
 * were written.
 */
MH_HIDDEN size_t mh_text_poke_batch(mh_poke *sites, size_t n, pid_t trap_blocker);
/* One window: returns 0 or the errno, the reason in why. */
MH_HIDDEN int mh_text_poke(uint64_t at, const uint8_t *new_bytes, size_t len, bool interior,
                           char *why, size_t why_len);

#endif /* MEMHOOK_BISTRO_H */
