/*
 * x86_decode.c - a table-driven x86-64 instruction length decoder.
 *
 * Scope: what compilers emit in user-space function bodies - the legacy
 * prefixes, REX, the one-byte / 0F / 0F38 / 0F3A maps, x87, and the LENGTHS
 * of VEX (C4/C5) and EVEX (62) instructions.  bistro needs exact lengths
 * (to move whole instructions), the location of every displacement and
 * immediate (to re-encode RIP-relative operands and branches), and the
 * control flow kind (for the back-branch sweep).  It does not need operand
 * semantics, so none are decoded.
 *
 * Policy: an opcode that is not in the tables below is refused with
 * MH_X86_UNKNOWN_OPCODE; one the SDM defines as #UD in 64-bit mode is refused
 * with MH_X86_INVALID.  Guessing a length would let the relocator split an
 * instruction, which corrupts the target silently - refusing costs one
 * unpatched function and a clear reason.
 *
 * Deliberately refused although some disassemblers accept them (the test
 * tests/bistro/test_decoder.py keeps the same list):
 *   - AMD 3DNow! (0F 0F, 0F 0E femms): removed from AMD CPUs in 2010 and
 *     never emitted by the toolchains that build the libraries we patch;
 *   - AMD XOP (8F with map >= 8): same;
 *   - a 66/F2/F3 prefix before VEX/EVEX: #UD per SDM vol. 2 section 2.3.2;
 *   - a 66 prefix (without REX.W) on a rel32 jmp/jcc/call/xbegin: Intel
 *     ignores it, AMD makes the branch rel16, disassemblers disagree, no
 *     compiler emits it.
 * And one deliberate length difference: UD0 (0F FF) and UD1 (0F B9) take a
 * ModRM as the SDM has said since 2017 (LLVM emits `ud1l disp(%eax),%eax`
 * for traps); older references, capstone among them, say they take none.
 */
#include <string.h>

#include "x86.h"

/* ------------------------------------------------------------------ */
/* Opcode attribute tables                                             */
/* ------------------------------------------------------------------ */

/* Per-opcode attributes.  The immediate kinds are mutually exclusive. */
enum {
    A_UNK = 0,          /* not known: refuse */
    A_NONE = 1u << 0,   /* valid, no ModRM, no immediate */
    A_M = 1u << 1,      /* ModRM (and SIB / displacement) follows */
    A_I8 = 1u << 2,     /* imm8 */
    A_I16 = 1u << 3,    /* imm16 (ret imm16) */
    A_IZ = 1u << 4,     /* imm16 with 66, else imm32 (imm32 with REX.W too) */
    A_IV = 1u << 5,     /* mov r, imm: imm64 with REX.W, imm16 with 66, else imm32 */
    A_ENTER = 1u << 6,  /* imm16 + imm8 */
    A_MOFFS = 1u << 7,  /* 64-bit absolute address (32-bit with 67) */
    A_R8 = 1u << 8,     /* rel8 branch */
    A_R32 = 1u << 9,    /* rel32 branch */
    A_INV = 1u << 10,   /* invalid in 64-bit mode (#UD) */
    A_GRP = 1u << 11,   /* validity / immediate depends on ModRM.reg: see group_check() */
    A_MREG = 1u << 12,  /* ModRM always names registers (mov cr/dr): no SIB/disp */
};

#define U A_UNK
#define N A_NONE
#define M A_M
#define MI8 (A_M | A_I8)
#define MIZ (A_M | A_IZ)
#define I8 A_I8
#define IZ A_IZ
#define X A_INV
#define G (A_M | A_GRP)
#define P A_UNK /* prefixes and escapes: consumed before the table is consulted */

/* The one-byte map, rows of 16 (SDM vol. 2 table A-2). */
static const uint16_t map0[256] = {
    /*        0    1    2    3    4    5    6    7    8    9    A    B    C    D    E    F */
    /* 0 */   M,   M,   M,   M,   I8,  IZ,  X,   X,   M,   M,   M,   M,   I8,  IZ,  X,   P,
    /* 1 */   M,   M,   M,   M,   I8,  IZ,  X,   X,   M,   M,   M,   M,   I8,  IZ,  X,   X,
    /* 2 */   M,   M,   M,   M,   I8,  IZ,  P,   X,   M,   M,   M,   M,   I8,  IZ,  P,   X,
    /* 3 */   M,   M,   M,   M,   I8,  IZ,  P,   X,   M,   M,   M,   M,   I8,  IZ,  P,   X,
    /* 4 */   P,   P,   P,   P,   P,   P,   P,   P,   P,   P,   P,   P,   P,   P,   P,   P, /* REX */
    /* 5 */   N,   N,   N,   N,   N,   N,   N,   N,   N,   N,   N,   N,   N,   N,   N,   N,
    /* 6: 60/61 pusha/popa invalid, 62 EVEX, 63 movsxd, 64-67 prefixes */
    /* 6 */   X,   X,   P,   M,   P,   P,   P,   P,   IZ,  MIZ, I8,  MI8, N,   N,   N,   N,
    /* 7 */   A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,A_R8,
    /* 8: 82 is an invalid alias of 80; 8F is pop r/m (group 1A) or XOP */
    /* 8 */   MI8, MIZ, X,   MI8, M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   G,
    /* 9: 9A call far invalid */
    /* 9 */   N,   N,   N,   N,   N,   N,   N,   N,   N,   N,   X,   N,   N,   N,   N,   N,
    /* A */   A_MOFFS, A_MOFFS, A_MOFFS, A_MOFFS, N, N, N, N, I8, IZ, N, N, N, N, N, N,
    /* B */   I8,  I8,  I8,  I8,  I8,  I8,  I8,  I8,
              A_IV,A_IV,A_IV,A_IV,A_IV,A_IV,A_IV,A_IV,
    /* C: C4/C5 VEX; C6/C7 group 11 (mov, xabort, xbegin); CE into invalid */
    /* C */   MI8, MI8, A_I16, N, P,  P,   G,   G,   A_ENTER, N, A_I16, N, N, I8, X,   N,
    /* D: D4/D5 aam/aad and D6 salc invalid; D8-DF x87 */
    /* D */   M,   M,   M,   M,   X,   X,   X,   N,   M,   M,   M,   M,   M,   M,   M,   M,
    /* E: EA jmp far invalid */
    /* E */   A_R8,A_R8,A_R8,A_R8,I8,  I8,  I8,  I8,  A_R32,A_R32,X, A_R8,N,   N,   N,   N,
    /* F: F6/F7 group 3 (test takes an immediate), FE/FF groups 4/5 */
    /* F */   P,   N,   P,   P,   N,   N,   G,   G,   N,   N,   N,   N,   N,   N,   G,   G,
};

/* The 0F map (SDM vol. 2 table A-3). */
static const uint16_t map1[256] = {
    /*        0    1    2    3    4    5    6    7    8    9    A    B    C    D    E    F */
    /* 0: 0E femms / 0F 3DNow! deliberately unknown */
    /* 0 */   G,   M,   M,   M,   U,   N,   N,   N,   N,   N,   U,   N,   U,   M,   U,   U,
    /* 1: SSE moves, 18-1F prefetch / hint-nop space (endbr64 is F3 0F 1E FA) */
    /* 1 */   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,
    /* 2: 20-23 mov to/from control and debug registers */
    /* 2 */   A_M|A_MREG, A_M|A_MREG, A_M|A_MREG, A_M|A_MREG, U, U, U, U, M, M, M, M, M, M, M, M,
    /* 3: 38 / 3A are escapes */
    /* 3 */   N,   N,   N,   N,   N,   N,   U,   N,   P,   U,   P,   U,   U,   U,   U,   U,
    /* 4 */   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,
    /* 5 */   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,
    /* 6 */   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,
    /* 7: 70-73 take imm8; 78/79 vmread/vmwrite or SSE4a (see below) */
    /* 7 */   MI8, MI8, MI8, MI8, M,   M,   M,   N,   G,   G,   U,   U,   M,   M,   M,   M,
    /* 8 */   A_R32,A_R32,A_R32,A_R32,A_R32,A_R32,A_R32,A_R32,
              A_R32,A_R32,A_R32,A_R32,A_R32,A_R32,A_R32,A_R32,
    /* 9 */   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,
    /* A: A6/A7 VIA PadLock (fixed ModRM) */
    /* A */   N,   N,   N,   M,   MI8, M,   G,   G,   N,   N,   N,   M,   MI8, M,   M,   M,
    /* B: B8 is popcnt only with F3; BA group 8 */
    /* B */   M,   M,   M,   M,   M,   M,   M,   M,   G,   M,   G,   M,   M,   M,   M,   M,
    /* C: C8-CF bswap */
    /* C */   M,   M,   MI8, M,   MI8, MI8, MI8, G,   N,   N,   N,   N,   N,   N,   N,   N,
    /* D */   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,
    /* E */   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,
    /* F */   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,   M,
};

#undef U
#undef N
#undef M
#undef MI8
#undef MIZ
#undef I8
#undef IZ
#undef X
#undef G
#undef P

/* The 0F38 and 0F3A maps are sparse: every defined opcode has a ModRM, and
 * every 0F3A opcode an imm8, so a list of defined ranges is all we need
 * (SDM vol. 2 tables; non-VEX encodings only). */
typedef struct {
    uint8_t lo, hi;
    bool needs_66; /* SSE4/AES/...: only defined with the 66 prefix */
} op_range;

static const op_range map2_defined[] = {
    {0x00, 0x0B, false}, /* SSSE3: pshufb .. pmulhrsw (MMX or 66 xmm) */
    {0x10, 0x10, true}, {0x14, 0x15, true}, {0x17, 0x17, true}, /* blendv*, ptest */
    {0x1C, 0x1E, false}, /* pabsb/w/d */
    {0x20, 0x25, true}, {0x28, 0x2B, true}, {0x30, 0x35, true}, {0x37, 0x41, true}, /* SSE4 */
    {0x80, 0x82, true},  /* invept, invvpid, invpcid */
    {0xC8, 0xCD, false}, /* SHA */
    {0xCF, 0xCF, true},  /* gf2p8mulb */
    {0xDB, 0xDF, true},  /* AES-NI */
    {0xF0, 0xF1, false}, /* movbe, crc32 */
    {0xF5, 0xF6, false}, /* wruss, adcx/adox/wrss */
    {0xF8, 0xF9, false}, /* movdir64b/enqcmd, movdiri */
};

static const op_range map3_defined[] = {
    {0x08, 0x0E, true},  /* round*, blend* */
    {0x0F, 0x0F, false}, /* palignr (MMX or 66 xmm) */
    {0x14, 0x17, true},  /* pextr*, extractps */
    {0x20, 0x22, true},  /* pinsr*, insertps */
    {0x40, 0x42, true},  /* dpps, dppd, mpsadbw */
    {0x44, 0x44, true},  /* pclmulqdq */
    {0x60, 0x63, true},  /* pcmpestr*, pcmpistr* */
    {0xCC, 0xCC, false}, /* sha1rnds4 */
    {0xCE, 0xCF, true},  /* gf2p8affine* */
    {0xDF, 0xDF, true},  /* aeskeygenassist */
};

/* 1: defined, 0: not defined, -1: defined only with a 66 prefix. */
static int in_ranges(const op_range *r, size_t n, uint8_t op, bool opsize)
{
    for (size_t i = 0; i < n; i++)
        if (op >= r[i].lo && op <= r[i].hi)
            return r[i].needs_66 && !opsize ? -1 : 1;
    return 0;
}

/* VEX/EVEX map-1 opcodes that carry an imm8 (shifts by immediate, shuffles,
 * compares, pinsrw/pextrw, shufps).  Every map-3 opcode carries one. */
static bool vex_map1_has_imm8(uint8_t op)
{
    return (op >= 0x70 && op <= 0x73) || op == 0xC2 || op == 0xC4 || op == 0xC5 || op == 0xC6;
}

/* ------------------------------------------------------------------ */
/* Decoding                                                            */
/* ------------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *code;
    size_t avail;
    size_t pos;
} cursor;

/* Can n more bytes be read?  The architectural limit (15) wins over the
 * buffer end: an over-long instruction is invalid however much is readable. */
static mh_x86_status need(const cursor *c, size_t n)
{
    if (c->pos + n > MH_X86_MAX_INSN)
        return MH_X86_INVALID;
    if (c->pos + n > c->avail)
        return MH_X86_TRUNCATED;
    return MH_X86_OK;
}

static bool is_legacy_prefix(uint8_t b)
{
    switch (b) {
    case 0x26: case 0x2E: case 0x36: case 0x3E: case 0x64: case 0x65: /* segment */
    case 0x66: case 0x67: case 0xF0: case 0xF2: case 0xF3:
        return true;
    default:
        return false;
    }
}

/* ModRM, then SIB and displacement as the ModRM asks.  In 64-bit mode the
 * 67 prefix selects 32-bit addressing, which has the same ModRM/SIB layout,
 * so it does not change the length. */
static mh_x86_status decode_modrm(cursor *c, mh_x86_insn *in, bool registers_only)
{
    mh_x86_status st = need(c, 1);
    if (st != MH_X86_OK)
        return st;
    in->has_modrm = true;
    in->modrm_offset = (uint8_t)c->pos;
    in->modrm = c->code[c->pos++];
    unsigned mod = in->modrm >> 6, rm = in->modrm & 7;
    if (registers_only || mod == 3)
        return MH_X86_OK;

    size_t disp = 0;
    if (rm == 4) { /* SIB */
        if ((st = need(c, 1)) != MH_X86_OK)
            return st;
        uint8_t sib = c->code[c->pos++];
        if (mod == 0 && (sib & 7) == 5)
            disp = 4; /* no base: disp32 */
    } else if (mod == 0 && rm == 5) {
        in->rip_relative = true; /* 64-bit mode: disp32(%rip), not absolute */
        disp = 4;
    }
    if (mod == 1)
        disp = 1;
    else if (mod == 2)
        disp = 4;
    if (disp) {
        if ((st = need(c, disp)) != MH_X86_OK)
            return st;
        in->disp_offset = (uint8_t)c->pos;
        in->disp_size = (uint8_t)disp;
        if (disp == 1) {
            in->disp = (int8_t)c->code[c->pos];
        } else {
            uint32_t v;
            memcpy(&v, c->code + c->pos, 4);
            in->disp = (int32_t)v;
        }
        c->pos += disp;
    }
    return MH_X86_OK;
}

static mh_x86_status take_imm(cursor *c, mh_x86_insn *in, size_t size)
{
    if (size == 0)
        return MH_X86_OK;
    mh_x86_status st = need(c, size);
    if (st != MH_X86_OK)
        return st;
    /* A second immediate (enter, extrq) only adds length: imm_offset keeps
     * pointing at the first. */
    if (in->imm_size == 0)
        in->imm_offset = (uint8_t)c->pos;
    in->imm_size = (uint8_t)(in->imm_size + size);
    c->pos += size;
    return MH_X86_OK;
}

static int64_t read_signed(const uint8_t *p, size_t size)
{
    switch (size) {
    case 1: return (int8_t)p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2); return (int16_t)v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return (int32_t)v; }
    default: return 0;
    }
}

/* VEX (C4 3-byte, C5 2-byte) and EVEX (62): only what the length needs.
 * Opcodes inside these maps are not validated individually; the map, the
 * mandatory payload bits and the ModRM/imm8 rules are. */
static mh_x86_status decode_vex(cursor *c, mh_x86_insn *in, uint8_t lead)
{
    mh_x86_status st;
    unsigned map;
    size_t payload = lead == 0xC5 ? 1 : lead == 0xC4 ? 2 : 3;
    if ((st = need(c, 1 + payload + 1)) != MH_X86_OK) /* lead, payload, opcode */
        return st;
    const uint8_t *p = c->code + c->pos + 1;
    if (lead == 0xC5) {
        map = 1;
    } else if (lead == 0xC4) {
        map = p[0] & 0x1F;
        if (map == 0)
            return MH_X86_INVALID;
        if (map > 3)
            return MH_X86_UNKNOWN_OPCODE; /* maps 4+ (e.g. AMX / APX) not known */
    } else {
        /* EVEX P0: R X B R' 0 m m m; P1: W vvvv 1 pp; P2: z L'L b V' aaa.
         * Maps 5/6 (AVX512-FP16) and APX extensions are not decoded. */
        if ((p[0] & 0x08) != 0 || (p[1] & 0x04) == 0)
            return MH_X86_INVALID;
        map = p[0] & 0x07;
        if (map == 0)
            return MH_X86_INVALID;
        if (map > 3)
            return MH_X86_UNKNOWN_OPCODE;
    }
    in->vex = true;
    in->map = (uint8_t)map;
    c->pos += 1 + payload;
    in->opcode_offset = (uint8_t)c->pos;
    in->opcode = c->code[c->pos++];

    /* vzeroupper/vzeroall (VEX 0F 77) is the one VEX opcode without ModRM. */
    if (!(lead != 0x62 && map == 1 && in->opcode == 0x77)) {
        if ((st = decode_modrm(c, in, false)) != MH_X86_OK)
            return st;
    }
    if (map == 3 || (map == 1 && vex_map1_has_imm8(in->opcode)))
        return take_imm(c, in, 1);
    return MH_X86_OK;
}

/* Opcodes whose validity or immediate depends on ModRM.reg (or on the
 * whole ModRM byte).  Called after the ModRM has been read; returns the
 * extra immediate size through *imm, or an error. */
static mh_x86_status group_check(const cursor *c, mh_x86_insn *in, uint8_t rep, bool opsize,
                                 size_t *imm)
{
    unsigned reg = (in->modrm >> 3) & 7, mod = in->modrm >> 6;
    *imm = 0;
    if (in->map == 0) {
        switch (in->opcode) {
        case 0x8F: /* group 1A: only /0 (pop r/m) - reg != 0 is AMD XOP, refused */
            return reg == 0 ? MH_X86_OK : MH_X86_UNKNOWN_OPCODE;
        case 0xC6: /* group 11: mov r/m8, imm8; C6 F8 ib = xabort */
            if (reg == 0 || in->modrm == 0xF8) {
                *imm = 1;
                return MH_X86_OK;
            }
            return MH_X86_INVALID;
        case 0xC7: /* mov r/m, imm32; C7 F8 = xbegin rel16/rel32 */
            if (reg == 0) {
                *imm = opsize && !(in->rex & 8) ? 2 : 4;
                return MH_X86_OK;
            }
            if (in->modrm == 0xF8) {
                if (opsize && !(in->rex & 8))
                    return MH_X86_UNKNOWN_OPCODE; /* xbegin rel16: see A_R32 */
                *imm = 4;
                in->flow = MH_FLOW_JCC_REL; /* the abort path is a branch target */
                in->rel_size = (uint8_t)*imm;
                return MH_X86_OK;
            }
            return MH_X86_INVALID;
        case 0xF6: /* group 3: test r/m, imm (reg 0, and its alias 1) */
        case 0xF7:
            if (reg <= 1)
                *imm = in->opcode == 0xF6 ? 1 : (opsize && !(in->rex & 8) ? 2 : 4);
            return MH_X86_OK;
        case 0xFE: /* group 4: inc/dec r/m8 only */
            return reg <= 1 ? MH_X86_OK : MH_X86_INVALID;
        case 0xFF: /* group 5 */
            if (reg == 7)
                return MH_X86_INVALID;
            if ((reg == 3 || reg == 5) && mod == 3)
                return MH_X86_INVALID; /* far call/jmp need a memory operand */
            if (reg == 2)
                in->flow = MH_FLOW_CALL_INDIRECT;
            else if (reg == 4)
                in->flow = MH_FLOW_JMP_INDIRECT;
            else if (reg == 3 || reg == 5)
                in->flow = MH_FLOW_OTHER;
            return MH_X86_OK;
        }
    } else if (in->map == 1) {
        switch (in->opcode) {
        case 0x00: /* group 6: sldt str lldt ltr verr verw */
            return reg <= 5 ? MH_X86_OK : MH_X86_INVALID;
        case 0x78: /* vmread; with a register operand and 66 (/0) or F2 it is
                    * SSE4a extrq/insertq, which add two imm8 (extrq is /0, but
                    * the reg field is not checked by decoders or CPUs) */
            if (mod == 3 && (opsize || rep == 0xF2))
                *imm = 2;
            return MH_X86_OK;
        case 0x79: /* vmwrite, or SSE4a extrq/insertq xmm, xmm: ModRM only */
            return MH_X86_OK;
        case 0xA6: /* VIA PadLock: montmul, xsha1, xsha256 (fixed ModRM) */
            return (in->modrm == 0xC0 || in->modrm == 0xC8 || in->modrm == 0xD0)
                       ? MH_X86_OK : MH_X86_UNKNOWN_OPCODE;
        case 0xA7: /* VIA PadLock: xstore, xcrypt-ecb/cbc/ctr/cfb/ofb */
            return (mod == 3 && reg <= 5 && (in->modrm & 7) == 0) ? MH_X86_OK
                                                                   : MH_X86_UNKNOWN_OPCODE;
        case 0xB8: /* popcnt needs F3; bare 0F B8 is IA-64's jmpe */
            return rep == 0xF3 ? MH_X86_OK : MH_X86_INVALID;
        case 0xBA: /* group 8: bt bts btr btc r/m, imm8 (reg 4-7) */
            if (reg < 4)
                return MH_X86_INVALID;
            *imm = 1;
            return MH_X86_OK;
        case 0xC7: /* group 9: cmpxchg8b/16b, xrstors, xsavec, xsaves, vmptr*, rdrand, rdseed */
            if (mod == 3 ? reg < 6 : (reg == 0 || reg == 2))
                return MH_X86_INVALID;
            return MH_X86_OK;
        }
    }
    (void)c;
    return MH_X86_OK;
}

/* What the legacy prefixes said (REX goes straight into the insn). */
typedef struct prefixes {
    bool opsize, addrsize;
    bool vex_forbidden;   /* 66/F2/F3/F0 seen: a VEX/EVEX after them is #UD */
    uint8_t rep;          /* F2, F3 or 0 */
} prefixes;

/* Legacy prefixes in any order, then at most one effective REX: a REX
 * that is followed by a legacy prefix is ignored by the CPU, so the last
 * one before the opcode is the one that counts. */
static mh_x86_status decode_prefixes(cursor *c, mh_x86_insn *in, prefixes *p)
{
    for (;;) {
        mh_x86_status st = need(c, 1);
        if (st != MH_X86_OK)
            return st;
        uint8_t b = c->code[c->pos];
        if (is_legacy_prefix(b)) {
            in->prefix_count++;
            in->rex = 0;
            if (b == 0x66)
                p->opsize = true;
            else if (b == 0x67)
                p->addrsize = true;
            else if (b == 0xF2 || b == 0xF3)
                p->rep = b;
            if (b == 0x66 || b == 0xF2 || b == 0xF3 || b == 0xF0)
                p->vex_forbidden = true;
            c->pos++;
            continue;
        }
        if ((b & 0xF0) == 0x40) {
            in->rex = b;
            c->pos++;
            continue;
        }
        return MH_X86_OK;
    }
}

/* The opcode in its map (one-byte, 0F, 0F38, 0F3A) and its attributes. */
static mh_x86_status decode_opcode(cursor *c, mh_x86_insn *in, bool opsize, uint16_t *attr)
{
    const uint8_t *code = c->code;
    uint8_t b = code[c->pos];
    mh_x86_status st;
    if (b != 0x0F) {
        in->map = 0;
        in->opcode = b;
        c->pos += 1;
        *attr = map0[b];
    } else if ((st = need(c, 2)) != MH_X86_OK) {
        return st;
    } else if (code[c->pos + 1] != 0x38 && code[c->pos + 1] != 0x3A) {
        in->map = 1;
        in->opcode = code[c->pos + 1];
        c->pos += 2;
        *attr = map1[in->opcode];
    } else {
        if ((st = need(c, 3)) != MH_X86_OK)
            return st;
        in->map = code[c->pos + 1] == 0x38 ? 2 : 3;
        in->opcode = code[c->pos + 2];
        c->pos += 3;
        int known = in->map == 2
            ? in_ranges(map2_defined, sizeof(map2_defined) / sizeof(map2_defined[0]),
                        in->opcode, opsize)
            : in_ranges(map3_defined, sizeof(map3_defined) / sizeof(map3_defined[0]),
                        in->opcode, opsize);
        if (known == 0)
            return MH_X86_UNKNOWN_OPCODE;
        if (known < 0)
            return MH_X86_INVALID;
        *attr = in->map == 2 ? A_M : (A_M | A_I8);
    }
    /* The opcode byte proper (the last escape byte is not it). */
    in->opcode_offset = (uint8_t)(c->pos - 1);
    if (*attr == A_UNK)
        return MH_X86_UNKNOWN_OPCODE;
    if (*attr & A_INV)
        return MH_X86_INVALID;
    return MH_X86_OK;
}

/* The immediate's size an opcode's attributes (and, for a group, its
 * ModRM) give; a relative branch's displacement counts as one. */
static mh_x86_status immediate_size(const cursor *c, mh_x86_insn *in, uint16_t attr,
                                    const prefixes *p, size_t *imm)
{
    *imm = 0;
    if (attr & A_GRP)
        return group_check(c, in, p->rep, p->opsize, imm);
    if (attr & A_I8) {
        *imm = 1;
    } else if (attr & A_I16) {
        *imm = 2;
    } else if (attr & A_IZ) {
        *imm = p->opsize && !(in->rex & 8) ? 2 : 4;
    } else if (attr & A_IV) {
        *imm = (in->rex & 8) ? 8 : p->opsize ? 2 : 4;
    } else if (attr & A_ENTER) {
        *imm = 3;
    } else if (attr & A_MOFFS) {
        *imm = p->addrsize ? 4 : 8;
    } else if (attr & A_R8) {
        *imm = 1;
        in->rel_size = 1;
    } else if (attr & A_R32) {
        /* Intel ignores 66 on near rel32 branches in 64-bit mode, AMD
         * makes them rel16 (and disassemblers disagree): refused, no
         * compiler emits them.  With REX.W the operand size is 64 on both:
         * `66 66 48 e8` is the TLS general-dynamic call to __tls_get_addr,
         * common in shared libraries. */
        if (p->opsize && !(in->rex & 8))
            return MH_X86_UNKNOWN_OPCODE;
        *imm = 4;
        in->rel_size = 4;
    }
    return MH_X86_OK;
}

/* Where control goes after the instruction (what the sweep and the
 * relocator need; groups set theirs in group_check). */
static void control_flow(mh_x86_insn *in, uint16_t attr)
{
    if (attr & (A_R8 | A_R32)) {
        if (in->map == 1 || (in->opcode >= 0x70 && in->opcode <= 0x7F) ||
            (in->opcode >= 0xE0 && in->opcode <= 0xE3))
            in->flow = MH_FLOW_JCC_REL;
        else if (in->opcode == 0xE8)
            in->flow = MH_FLOW_CALL_REL;
        else
            in->flow = MH_FLOW_JMP_REL;
    } else if (in->map == 0) {
        switch (in->opcode) {
        case 0xC2: case 0xC3:
            in->flow = MH_FLOW_RET;
            break;
        case 0xCA: case 0xCB: case 0xCC: case 0xCD: case 0xCF: case 0xF1: case 0xF4:
            in->flow = MH_FLOW_OTHER; /* far ret, int3, int n, iret, int1, hlt */
            break;
        }
    } else if (in->map == 1) {
        switch (in->opcode) {
        case 0x05: case 0x07: case 0x0B: case 0x34: case 0x35: case 0xB9: case 0xFF:
            in->flow = MH_FLOW_OTHER; /* syscall, sysret, ud2, sysenter, sysexit, ud1, ud0 */
            break;
        }
    }
}

/* A legacy-encoded instruction from its opcode on. */
static mh_x86_status decode_legacy(cursor *c, mh_x86_insn *in, const prefixes *p)
{
    uint16_t attr;
    mh_x86_status st = decode_opcode(c, in, p->opsize, &attr);
    if (st != MH_X86_OK)
        return st;
    if ((attr & A_M) && (st = decode_modrm(c, in, (attr & A_MREG) != 0)) != MH_X86_OK)
        return st;
    size_t imm;
    if ((st = immediate_size(c, in, attr, p, &imm)) != MH_X86_OK)
        return st;
    if ((st = take_imm(c, in, imm)) != MH_X86_OK)
        return st;
    /* LOCK on a non-RMW instruction is #UD, but it does not change the
     * length, and disassemblers do not agree on which forms they accept:
     * not validated. */
    if (in->map == 0 && in->opcode == 0x8D && (in->modrm >> 6) == 3)
        return MH_X86_INVALID; /* lea needs a memory operand */
    control_flow(in, attr);
    if (in->rel_size)
        in->rel = read_signed(c->code + in->imm_offset, in->rel_size);
    in->endbr64 = p->rep == 0xF3 && in->map == 1 && in->opcode == 0x1E && in->modrm == 0xFA &&
                  c->pos == 4;
    return MH_X86_OK;
}

mh_x86_status mh_x86_decode(const uint8_t *code, size_t avail, mh_x86_insn *out)
{
    mh_x86_insn in;
    memset(&in, 0, sizeof(in));
    if (code == NULL || out == NULL)
        return MH_X86_INVALID;
    cursor c = {code, avail, 0};
    prefixes p = {0};
    mh_x86_status st = decode_prefixes(&c, &in, &p);
    if (st != MH_X86_OK)
        return st;
    uint8_t b = code[c.pos];
    if (b == 0xC4 || b == 0xC5 || b == 0x62) {
        /* In 64-bit mode these are always VEX/EVEX (LES/LDS/BOUND are gone).
         * A REX or a 66/F2/F3/F0 prefix in front is #UD (SDM 2.3.2). */
        if (p.vex_forbidden || in.rex)
            return MH_X86_INVALID;
        st = decode_vex(&c, &in, b);
    } else {
        st = decode_legacy(&c, &in, &p);
    }
    if (st != MH_X86_OK)
        return st;
    in.length = (uint8_t)c.pos;
    *out = in;
    return MH_X86_OK;
}
