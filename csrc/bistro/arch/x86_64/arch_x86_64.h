/*
 * arch_x86_64.h - x86-64's answers to bistro's arch.h: the jump forms,
 * the barriers of the live write, and a signal handler's view of a thread.
 * Included through arch.h only.
 *
 * The patch at a function entry (after an endbr64, which stays) is
 *   e9 rel32                 jmp rel32: the hook, or a far-jump slot in an
 *                            island near the target, is within +-2 GiB;
 *   48 b8 imm64 ff e0        movabs $hook,%rax; jmp *%rax otherwise, or
 *                            when MEMHOOK_BISTRO_FAR_JUMP=1.  A thread can
 *                            stand at +10, between the two.
 * The live write's barrier is int3 (cc), or beside a thread that blocks
 * SIGTRAP "jmp ." (eb fe), one atomic two-byte store.
 */
#ifndef MEMHOOK_BISTRO_ARCH_X86_64_H
#define MEMHOOK_BISTRO_ARCH_X86_64_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/ucontext.h>

#include "x86.h"

#define MH_ARCH_NEAR_JUMP 5      /* e9 rel32 */
#define MH_ARCH_FAR_JUMP 12      /* movabs $dest,%rax; jmp *%rax */
#define MH_ARCH_FAR_JUMP_SECOND 10 /* where the far form's jmp starts */
#define MH_ARCH_TRAP_BYTE 0xCC   /* int3 */
#define MH_ARCH_SPIN_BARRIER 0xFEEB /* eb fe, "jmp .", as a little-endian pair */
#define MH_ARCH_KEPT_AT_ENTRY "endbr64"

#define MH_TRAMP_MAX 160         /* endbr64 + relocated window + jump back */
#define MH_TRAMP_BODY 4          /* the relocated code starts after the endbr64 */
#define MH_FARSLOT_SIZE 14       /* jmp *0(%rip); .quad dest */
/* At most this many one-byte pushes (50+r) are stepped over to place a
 * jump after them (patch.c, docs/design/live-patching.md). */
#define MH_PUSH_RUN_MAX 3
#define MH_UNDO_STUB_MAX (MH_PUSH_RUN_MAX + MH_FARSLOT_SIZE)

/* Reachable by a rel32 displacement from the end of a 5-byte jmp/call. */
static inline bool mh_rel32_reachable(uint64_t insn_end, uint64_t dest)
{
    int64_t d = (int64_t)(dest - insn_end);
    return d >= INT32_MIN && d <= INT32_MAX;
}

/* Whether a near jump written at `at` reaches dest. */
static inline bool mh_arch_near_reaches(uint64_t at, uint64_t dest)
{
    return mh_rel32_reachable(at + MH_ARCH_NEAR_JUMP, dest);
}

/* Whether a jump form has an instruction boundary inside it, where a
 * thread may stand while it is written over (the far form's +10). */
static inline bool mh_arch_jump_has_interior(int size)
{
    return size == MH_ARCH_FAR_JUMP;
}

/* push %r (50+r): the one-byte instructions an undo stub can undo. */
static inline bool mh_arch_is_one_byte_push(uint8_t b)
{
    return b >= 0x50 && b <= 0x57;
}

/* ---- a signal handler's view of the interrupted thread ------------------ */

static inline uint64_t mh_arch_pc(const ucontext_t *uc)
{
    return (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
}

static inline void mh_arch_set_pc(ucontext_t *uc, uint64_t pc)
{
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)pc;
}

/* The address of the trap instruction that raised this SIGTRAP, 0 when
 * it was no trap instruction (int3 reports the pc after it). */
static inline uint64_t mh_arch_trap_address(const siginfo_t *si, const ucontext_t *uc)
{
    return si->si_code == SI_KERNEL ? mh_arch_pc(uc) - 1 : 0;
}

/* A thread at `off` of a far jump of `len` bytes to dest stands between
 * its two instructions with the first one done (%rax holds dest, which
 * tells it from an old instruction that starts at +10): its next step is
 * the jump to dest. */
static inline bool mh_arch_far_jump_midway(const ucontext_t *uc, int len, size_t off,
                                           uint64_t dest)
{
    return len == MH_ARCH_FAR_JUMP && off == MH_ARCH_FAR_JUMP_SECOND && dest != 0 &&
           (uint64_t)uc->uc_mcontext.gregs[REG_RAX] == dest;
}

/* ---- the live write's stores -------------------------------------------- */

/* One atomic 2-byte store (atomic for cacheable memory when it fits in
 * one cache line: mh_arch_spin_barrier_fits). */
static inline void mh_arch_store_pair(uint64_t at, uint16_t v)
{
    __asm__ volatile("movw %1, (%0)" : : "r"((uintptr_t)at), "r"(v) : "memory");
}

/* Whether bytes at..at+1 lie in one cache line. */
static inline bool mh_arch_spin_barrier_fits(uint64_t at)
{
    return (at & 63) != 63;
}

/* A spin-wait hint. */
static inline void mh_arch_cpu_relax(void)
{
    __builtin_ia32_pause();
}

#endif /* MEMHOOK_BISTRO_ARCH_X86_64_H */
