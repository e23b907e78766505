/*
 * x86.h - the x86-64 instruction decoder and relocator bistro is built on.
 *
 * Architecture-specific and free of side effects: nothing here patches,
 * maps or allocates.  bistro's patch engine (patch.c) asks this layer three
 * questions about a function entry:
 *   1. how long is each instruction, and what does it reference
 *      (mh_x86_decode);
 *   2. can the first N bytes be moved to a trampoline at another address,
 *      and what are the moved bytes (mh_x86_relocate);
 *   3. does any later branch of the function land inside those N bytes
 *      (mh_x86_find_branch_into).
 * Unknown opcodes are refused, never guessed.
 */
#ifndef MEMHOOK_BISTRO_X86_H
#define MEMHOOK_BISTRO_X86_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mh_visibility.h"

#define MH_X86_MAX_INSN 15

typedef enum mh_x86_status {
    MH_X86_OK = 0,
    MH_X86_TRUNCATED = -1,      /* the bytes end inside the instruction */
    MH_X86_UNKNOWN_OPCODE = -2, /* not an opcode the decoder knows: refused */
    MH_X86_INVALID = -3,        /* invalid in 64-bit mode (e.g. 0x06, 0x27) */
} mh_x86_status;

typedef enum mh_x86_flow {
    MH_FLOW_NONE = 0,           /* falls through */
    MH_FLOW_JMP_REL,            /* jmp rel8/rel32 */
    MH_FLOW_JCC_REL,            /* jcc rel8/rel32, also loop/jrcxz (rel8 only) */
    MH_FLOW_CALL_REL,           /* call rel32 */
    MH_FLOW_RET,                /* ret, ret imm16 */
    MH_FLOW_JMP_INDIRECT,       /* jmp r/m */
    MH_FLOW_CALL_INDIRECT,      /* call r/m */
    MH_FLOW_OTHER,              /* int3, ud2, hlt, syscall...: no fallthrough
                                   assumptions are made */
} mh_x86_flow;

typedef struct mh_x86_insn {
    uint8_t length;
    uint8_t prefix_count;       /* legacy prefixes, excluding REX/VEX/EVEX */
    uint8_t rex;                /* 0 if none */
    uint8_t map;                /* 0: one-byte, 1: 0F, 2: 0F38, 3: 0F3A */
    uint8_t opcode;             /* within the map */
    uint8_t opcode_offset;      /* offset of the opcode byte */
    bool vex;                   /* VEX (C4/C5) or EVEX (62) encoded */
    bool has_modrm;
    uint8_t modrm;
    uint8_t modrm_offset;
    bool rip_relative;          /* ModRM mod=00 rm=101 in 64-bit mode */
    uint8_t disp_offset;        /* offset of the displacement, if any */
    uint8_t disp_size;          /* 0, 1, 4 */
    int32_t disp;
    uint8_t imm_offset;
    uint8_t imm_size;           /* 0, 1, 2, 4, 8 */
    mh_x86_flow flow;
    uint8_t rel_size;           /* 1 or 4 for *_REL flows, else 0 */
    int64_t rel;                /* branch displacement (sign-extended) */
    bool endbr64;               /* F3 0F 1E FA */
} mh_x86_insn;

/* Decode one instruction at code[0 .. avail).  Returns MH_X86_OK and fills
 * *out, or a negative mh_x86_status. */
MH_HIDDEN mh_x86_status mh_x86_decode(const uint8_t *code, size_t avail, mh_x86_insn *out);

/* Why a relocation was refused (a stable code and a human-readable reason). */
typedef enum mh_reloc_refusal {
    MH_RELOC_OK = 0,
    MH_RELOC_DECODE_FAILED,     /* an instruction in the window did not decode */
    MH_RELOC_RIP_OUT_OF_RANGE,  /* a RIP-relative target is > +-2 GiB from dst */
    MH_RELOC_BRANCH_OUT_OF_RANGE,
    MH_RELOC_UNSUPPORTED,       /* e.g. loop/jrcxz (no rel32 form) to outside */
    MH_RELOC_TOO_SHORT,         /* the function (symbol size) ends before N */
    MH_RELOC_BRANCH_INTO_WINDOW,/* a later branch lands inside the window */
    MH_RELOC_NO_ROOM,           /* dst_cap too small */
} mh_reloc_refusal;

#define MH_RELOC_MAP_MAX 16

typedef struct mh_reloc_result {
    mh_reloc_refusal refusal;
    size_t consumed;            /* source bytes moved: whole instructions >= need */
    size_t written;             /* bytes written to dst, excluding the jump back */
    size_t insn_count;
    size_t failed_offset;       /* where the refusal happened, from src */
    /* Instruction boundaries old -> new: the i-th moved instruction starts
     * at src+map_src[i] and its relocated copy at dst+map_dst[i] (the first
     * MH_RELOC_MAP_MAX instructions).  A thread stopped on a boundary of the
     * old bytes continues at the same boundary of the copy. */
    size_t map_n;
    uint8_t map_src[16];
    uint8_t map_dst[16];
    char reason[160];           /* e.g. "rip-relative lea at +7 reaches
                                   0x7f.. which is 3.1 GiB from the trampoline" */
} mh_reloc_result;

/*
 * Relocate the whole instructions that cover src[0 .. need) (src_addr is
 * the address src will run at) so that they run correctly at dst_addr:
 * RIP-relative displacements are re-encoded, rel8/rel32 jmp/jcc/call are
 * re-targeted (short jumps widened to rel32), a branch whose target lies
 * inside the moved window stays relative to the moved copy.  `avail` bytes
 * of src are readable (the function's size when known).  Writes to dst (at
 * most dst_cap bytes); does NOT append the jump back to src_addr+consumed.
 * Returns true on success; on refusal fills res->refusal and res->reason.
 */
MH_HIDDEN bool mh_x86_relocate(const uint8_t *src, uint64_t src_addr, size_t avail, size_t need,
                               uint8_t *dst, uint64_t dst_addr, size_t dst_cap,
                               mh_reloc_result *res);

/*
 * Sweep a function body linearly (code[0 .. size), running at addr) and
 * report whether any relative branch at or after offset `from` lands in
 * [addr+lo, addr+hi).  Returns 1 if one does (its offset in *where), 0 if
 * none does, and -1 if the sweep could not decode the whole body (the
 * offset where it stopped in *where).
 */
MH_HIDDEN int mh_x86_find_branch_into(const uint8_t *code, uint64_t addr, size_t size,
                                      size_t from, size_t lo, size_t hi, size_t *where);

/*
 * mh_x86_find_branch_into with the reason a sweep stopped: on -1, *stop is
 * the decoder's status at *where (MH_X86_TRUNCATED when the body's bytes
 * end inside an instruction, e.g. when only its first bytes are known).
 * stop may be NULL.
 */
MH_HIDDEN int mh_x86_sweep_branches(const uint8_t *code, uint64_t addr, size_t size, size_t from,
                                    size_t lo, size_t hi, size_t *where, mh_x86_status *stop);

#endif
