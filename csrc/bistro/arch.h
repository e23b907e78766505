/*
 * arch.h - what bistro's generic patcher asks of the instruction set.
 *
 * The generic files (plan.c, text_poke.c, patch.c, island.c, analyze.c)
 * hold the protocol: plan an entry, build its trampoline in an island,
 * write the jump live beside running threads, publish the original,
 * restore.  Everything that knows an encoding, a register or an
 * instruction length sits under arch/<isa>/ and is reached through this
 * header only (tests/test_layering.py holds it).  An instruction set
 * provides, in arch/<isa>/arch_<isa>.h:
 *
 *   MH_ARCH_NEAR_JUMP, MH_ARCH_FAR_JUMP   the two jump forms' sizes (the
 *                          near one reaches +-2 GiB, the far one anywhere)
 *   MH_ARCH_TRAP_BYTE      the one-byte trap the live write stores first
 *   MH_ARCH_SPIN_BARRIER   a two-byte jump to itself (little-endian pair)
 *   MH_TRAMP_MAX, MH_TRAMP_BODY, MH_FARSLOT_SIZE, MH_PUSH_RUN_MAX,
 *   MH_UNDO_STUB_MAX, MH_ARCH_KEPT_AT_ENTRY   the code bistro writes, and
 *                          the instruction an entry keeps (CET's marker)
 *   mh_arch_near_reaches   whether a near jump at `at` reaches `dest`
 *   mh_arch_pc, mh_arch_set_pc, mh_arch_trap_address,
 *   mh_arch_far_jump_midway   a signal handler's view of a thread
 *   mh_arch_store_pair, mh_arch_spin_barrier_fits, mh_arch_cpu_relax
 *   mh_arch_is_one_byte_push, mh_arch_jump_has_interior
 *
 * and the functions declared below.
 */
#ifndef MEMHOOK_BISTRO_ARCH_H
#define MEMHOOK_BISTRO_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mh_visibility.h"

#if defined(__x86_64__)
#include "arch/x86_64/arch_x86_64.h"
#else
#error "bistro patches x86-64 code only: a port adds csrc/bistro/arch/<isa>/ (see arch.h)"
#endif

/* ---- the entry (arch/<isa>/entry_<isa>.c) -------------------------------- */

/* Bytes of code[0 .. limit) that stay at the entry, unpatched (an
 * endbr64 on x86-64, which indirect calls under CET land on): 0 or more. */
MH_HIDDEN size_t mh_arch_entry_skip(const uint8_t *code, size_t limit);

/* A call among the whole instructions of code[0 .. window) whose return
 * address falls strictly inside the window: true, with the call's offset
 * and its return's.  A thread inside that callee during the install
 * would return into the middle of the new jump. */
MH_HIDDEN bool mh_arch_call_returns_inside(const uint8_t *code, size_t limit, size_t window,
                                           size_t *call_at, size_t *return_at);

/* The length of the unconditional jump code[0 ..) opens with (direct or
 * indirect), or 0: the planner lets no window run past one (plan.c). */
MH_HIDDEN size_t mh_arch_entry_jump(const uint8_t *code, size_t limit);

/* A linear sweep of code[from .. size) (running at addr) for a relative
 * branch landing in [lo, hi). */
typedef struct mh_arch_sweep {
    int hit;             /* 1: one lands there; 0: none does; -1: stopped */
    size_t where;        /* the branch's offset, or where the sweep stopped */
    int64_t target;      /* hit: the branch's target, from code */
    bool truncated;      /* stopped: the bytes end inside an instruction */
    const char *stop;    /* stopped: the decoder's reason, e.g. "invalid" */
} mh_arch_sweep;
MH_HIDDEN void mh_arch_sweep_branches_into(const uint8_t *code, uint64_t addr, size_t size,
                                           size_t from, size_t lo, size_t hi,
                                           mh_arch_sweep *out);

/* ---- the code bistro writes (arch/<isa>/trampoline_<isa>.c) -------------- */

/* Build the trampoline for the window src[0 .. need) of a function at
 * src_addr (avail readable bytes), to run at tramp_addr: the kept entry
 * instruction, the window's whole instructions relocated, a jump back to
 * src_addr+consumed.  Returns the trampoline length (0 on refusal: res
 * says why). */
MH_HIDDEN size_t mh_tramp_build(const uint8_t *src, uint64_t src_addr, size_t avail, size_t need,
                                uint64_t tramp_addr, uint8_t out[MH_TRAMP_MAX],
                                mh_reloc_result *res);
/* A jump slot to dest that reaches anywhere, placed near a target so that
 * its near jump reaches the slot. */
MH_HIDDEN void mh_farslot_build(uint64_t dest, uint8_t out[MH_FARSLOT_SIZE]);
/* The undo of the one-byte pushes pushes[0 .. n) in reverse order, then a
 * jump to dest.  Returns the length, 0 when n is too large or a byte is
 * no one-byte push. */
MH_HIDDEN size_t mh_undo_stub_build(const uint8_t *pushes, size_t n, uint64_t stub_addr,
                                    uint64_t dest, uint8_t out[MH_UNDO_STUB_MAX]);
/* The patch bytes at `at`: the near (MH_ARCH_NEAR_JUMP) or the far
 * (MH_ARCH_FAR_JUMP) jump to dest.  Returns their length. */
MH_HIDDEN size_t mh_patch_jump_build(uint64_t at, uint64_t dest, int size, uint8_t out[16]);

#endif /* MEMHOOK_BISTRO_ARCH_H */
