/*
 * x86_relocate.c - move the first instructions of a function to a
 * trampoline, and sweep the rest of the function for branches back into
 * them.
 *
 * What changes when an instruction runs at another address is everything
 * RIP-relative: ModRM disp32(%rip) operands and rel8/rel32 branches.  Each
 * is re-encoded against the trampoline address; what cannot be (a target
 * beyond +-2 GiB of the trampoline, loop/jrcxz leaving the window, a branch
 * with an operand-size prefix whose meaning differs between Intel and AMD)
 * is refused with a reason, never approximated.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "x86.h"

/* The window is at most a 12-byte patch plus one 15-byte instruction; 64
 * leaves room for callers that ask for more. */
#define MAX_WINDOW_INSNS 64

static bool fits_i32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }
static bool fits_i8(int64_t v) { return v >= INT8_MIN && v <= INT8_MAX; }

static void put_i32(uint8_t *p, int64_t v)
{
    uint32_t u = (uint32_t)(int32_t)v;
    memcpy(p, &u, 4);
}

static void refuse(mh_reloc_result *res, mh_reloc_refusal why, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void refuse(mh_reloc_result *res, mh_reloc_refusal why, size_t offset, const char *fmt, ...)
{
    res->refusal = why;
    res->failed_offset = offset;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->reason, sizeof(res->reason), fmt, ap);
    va_end(ap);
}

static const char *status_text(mh_x86_status st)
{
    switch (st) {
    case MH_X86_TRUNCATED: return "truncated";
    case MH_X86_UNKNOWN_OPCODE: return "unknown opcode";
    case MH_X86_INVALID: return "invalid in 64-bit mode";
    default: return "ok";
    }
}

/* Is this a rel8 loop/loope/loopne/jrcxz?  They have no rel32 form. */
static bool is_loop_family(const mh_x86_insn *in)
{
    return in->map == 0 && in->opcode >= 0xE0 && in->opcode <= 0xE3;
}

/* Size of the relocated form of a rel8 branch (prefixes kept). */
static size_t widened_size(const mh_x86_insn *in)
{
    size_t pre = in->opcode_offset;
    if (in->map == 0 && in->opcode == 0xEB)
        return pre + 5; /* E9 rel32 */
    if (in->map == 0 && in->opcode >= 0x70 && in->opcode <= 0x7F)
        return pre + 6; /* 0F 8x rel32 */
    return in->length;  /* loop family stays rel8 */
}

/* One window on its way to the trampoline: the whole instructions that
 * cover it, where each starts in the old bytes and in the new. */
typedef struct window {
    const uint8_t *src;
    uint64_t src_addr;
    uint8_t *dst;
    uint64_t dst_addr;
    size_t n;
    mh_x86_insn insns[MAX_WINDOW_INSNS];
    size_t src_off[MAX_WINDOW_INSNS + 1], new_off[MAX_WINDOW_INSNS + 1];
} window;

/* Step 1: decode whole instructions until [0, need) is covered. */
static bool window_decode(window *w, size_t avail, size_t need, mh_reloc_result *res)
{
    size_t off = 0;
    while (off < need) {
        if (w->n == MAX_WINDOW_INSNS) {
            refuse(res, MH_RELOC_UNSUPPORTED, off, "more than %d instructions in the window",
                   MAX_WINDOW_INSNS);
            return false;
        }
        mh_x86_status st = mh_x86_decode(w->src + off, avail - off, &w->insns[w->n]);
        if (st == MH_X86_TRUNCATED && avail - off < MH_X86_MAX_INSN) {
            refuse(res, MH_RELOC_TOO_SHORT, off,
                   "the code ends (%zu bytes) inside the instruction at +%zu", avail, off);
            return false;
        }
        if (st != MH_X86_OK) {
            refuse(res, MH_RELOC_DECODE_FAILED, off, "cannot decode the instruction at +%zu (%s)",
                   off, status_text(st));
            return false;
        }
        w->src_off[w->n] = off;
        off += w->insns[w->n].length;
        w->n++;
    }
    w->src_off[w->n] = off;
    return true;
}

/* Step 2, the layout: every instruction keeps its size except rel8
 * jmp/jcc, which become rel32 (whether they leave the window or not: one
 * layout pass, and every internal target still fits).  Returns the bytes
 * the relocated code takes. */
static size_t window_layout(window *w)
{
    w->new_off[0] = 0;
    for (size_t i = 0; i < w->n; i++) {
        const mh_x86_insn *in = &w->insns[i];
        w->new_off[i + 1] = w->new_off[i] + (in->rel_size == 1 ? widened_size(in) : in->length);
    }
    return w->new_off[w->n];
}

static bool has_prefix(const mh_x86_insn *in, const uint8_t *s, uint8_t prefix)
{
    for (size_t k = 0; k < in->prefix_count; k++)
        if (s[k] == prefix)
            return true;
    return false;
}

/* Where the i-th instruction's branch goes once moved: a target inside
 * the moved window is aimed at the moved copy, and must hit an instruction
 * boundary there, or the code overlaps.  *target is the old target. */
static bool branch_new_target(const window *w, size_t i, const char *what, uint64_t *target,
                              uint64_t *new_target, mh_reloc_result *res)
{
    const mh_x86_insn *in = &w->insns[i];
    const uint64_t win_lo = w->src_addr, win_hi = w->src_addr + w->src_off[w->n];
    *target = w->src_addr + w->src_off[i] + in->length + (uint64_t)in->rel;
    *new_target = *target;
    if (*target < win_lo || *target >= win_hi)
        return true;
    size_t t = (size_t)(*target - win_lo), k = 0;
    while (k < w->n && w->src_off[k] < t)
        k++;
    if (w->src_off[k] != t) {
        refuse(res, MH_RELOC_UNSUPPORTED, w->src_off[i],
               "%s at +%zu lands inside the instruction at +%zu", what, w->src_off[i],
               w->src_off[k - 1]);
        return false;
    }
    *new_target = w->dst_addr + w->new_off[k];
    return true;
}

/* A relative branch (jmp, jcc, call, loop family) re-aimed from its new
 * place; a rel8 jmp/jcc is widened to rel32. */
static bool emit_branch(const window *w, size_t i, mh_reloc_result *res)
{
    const mh_x86_insn *in = &w->insns[i];
    const uint8_t *s = w->src + w->src_off[i];
    uint8_t *d = w->dst + w->new_off[i];
    const char *what = in->flow == MH_FLOW_CALL_REL ? "call" :
                       in->flow == MH_FLOW_JMP_REL ? "jmp" : "conditional branch";
    /* 66-prefixed rel8 branches: Intel ignores the prefix, AMD truncates
     * the target to 16 bits.  No compiler emits them.  (The decoder
     * already refuses 66 on rel32 without REX.W.) */
    if ((has_prefix(in, s, 0x66) && !(in->rex & 8)) || in->rel_size == 2) {
        refuse(res, MH_RELOC_UNSUPPORTED, w->src_off[i],
               "%s at +%zu has an operand-size prefix (CPU-dependent target)", what,
               w->src_off[i]);
        return false;
    }
    uint64_t target, new_target;
    if (!branch_new_target(w, i, what, &target, &new_target, res))
        return false;
    int64_t rel = (int64_t)(new_target - (w->dst_addr + w->new_off[i + 1]));
    if (is_loop_family(in)) {
        bool inside = target >= w->src_addr && target < w->src_addr + w->src_off[w->n];
        if (!inside || !fits_i8(rel)) {
            refuse(res, MH_RELOC_UNSUPPORTED, w->src_off[i],
                   "loop/jrcxz at +%zu leaves the window (it has no rel32 form)", w->src_off[i]);
            return false;
        }
        memcpy(d, s, in->length);
        d[in->imm_offset] = (uint8_t)(int8_t)rel;
        return true;
    }
    if (!fits_i32(rel)) {
        refuse(res, MH_RELOC_BRANCH_OUT_OF_RANGE, w->src_off[i],
               "%s at +%zu targets 0x%" PRIx64 ", %.1f GiB from the trampoline", what,
               w->src_off[i], new_target, (double)(rel < 0 ? -rel : rel) / (1 << 30));
        return false;
    }
    if (in->rel_size != 1) {
        memcpy(d, s, in->length);
        put_i32(d + in->imm_offset, rel);
        return true;
    }
    size_t pre = in->opcode_offset;
    memcpy(d, s, pre); /* keep prefixes (e.g. 3E notrack/hint) */
    if (in->opcode == 0xEB) {
        d[pre] = 0xE9;
        put_i32(d + pre + 1, rel);
    } else { /* 7x rel8 -> 0F 8x rel32, same condition code */
        d[pre] = 0x0F;
        d[pre + 1] = (uint8_t)(0x80 | (in->opcode & 0x0F));
        put_i32(d + pre + 2, rel);
    }
    return true;
}

/* Any other instruction is copied; a disp32(%rip) operand is re-encoded
 * against the copy's address. */
static bool emit_other(const window *w, size_t i, mh_reloc_result *res)
{
    const mh_x86_insn *in = &w->insns[i];
    const uint8_t *s = w->src + w->src_off[i];
    uint8_t *d = w->dst + w->new_off[i];
    memcpy(d, s, in->length);
    if (!in->rip_relative)
        return true;
    if (has_prefix(in, s, 0x67)) { /* disp32(%eip): the result wraps to 32 bits */
        refuse(res, MH_RELOC_UNSUPPORTED, w->src_off[i],
               "eip-relative operand (67 prefix) at +%zu", w->src_off[i]);
        return false;
    }
    uint64_t target = w->src_addr + w->src_off[i] + in->length + (uint64_t)(int64_t)in->disp;
    int64_t disp = (int64_t)(target - (w->dst_addr + w->new_off[i + 1]));
    if (!fits_i32(disp)) {
        refuse(res, MH_RELOC_RIP_OUT_OF_RANGE, w->src_off[i],
               "rip-relative operand at +%zu reaches 0x%" PRIx64 ", %.1f GiB from the trampoline",
               w->src_off[i], target, (double)(disp < 0 ? -disp : disp) / (1 << 30));
        return false;
    }
    put_i32(d + in->disp_offset, disp);
    return true;
}

/* The result of a relocation that succeeded, with its boundary map. */
static void result_fill(const window *w, size_t written, mh_reloc_result *res)
{
    res->refusal = MH_RELOC_OK;
    res->consumed = w->src_off[w->n];
    res->written = written;
    res->insn_count = w->n;
    for (size_t i = 0; i < w->n && i < MH_RELOC_MAP_MAX && w->new_off[i] <= UINT8_MAX &&
                       w->src_off[i] <= UINT8_MAX; i++) {
        res->map_src[i] = (uint8_t)w->src_off[i];
        res->map_dst[i] = (uint8_t)w->new_off[i];
        res->map_n = i + 1;
    }
}

bool mh_x86_relocate(const uint8_t *src, uint64_t src_addr, size_t avail, size_t need,
                     uint8_t *dst, uint64_t dst_addr, size_t dst_cap, mh_reloc_result *res)
{
    if (res == NULL)
        return false;
    memset(res, 0, sizeof(*res));
    if (src == NULL || (dst == NULL && dst_cap != 0)) {
        refuse(res, MH_RELOC_DECODE_FAILED, 0, "bad arguments");
        return false;
    }
    if (avail < need) {
        refuse(res, MH_RELOC_TOO_SHORT, avail,
               "only %zu bytes of code, the patch needs %zu", avail, need);
        return false;
    }
    window w = {.src = src, .src_addr = src_addr, .dst = dst, .dst_addr = dst_addr};
    if (!window_decode(&w, avail, need, res))
        return false;
    const size_t written = window_layout(&w);
    if (written > dst_cap) {
        refuse(res, MH_RELOC_NO_ROOM, 0, "the relocated code needs %zu bytes, room for %zu",
               written, dst_cap);
        return false;
    }
    /* Step 3: emit, each instruction at its new place. */
    for (size_t i = 0; i < w.n; i++) {
        bool ok = w.insns[i].rel_size ? emit_branch(&w, i, res) : emit_other(&w, i, res);
        if (!ok)
            return false;
    }
    result_fill(&w, written, res);
    return true;
}

/* Linear sweep; returns 1/0/-1 like mh_x86_find_branch_into and, on -1,
 * the decoder's status in *stop. */
int mh_x86_sweep_branches(const uint8_t *code, uint64_t addr, size_t size, size_t from, size_t lo,
                          size_t hi, size_t *where, mh_x86_status *stop)
{
    size_t off = from;
    (void)addr; /* offsets suffice: relative targets do not depend on it */
    if (stop)
        *stop = MH_X86_OK;
    while (off < size) {
        mh_x86_insn in;
        mh_x86_status st = mh_x86_decode(code + off, size - off, &in);
        if (st != MH_X86_OK) {
            if (where)
                *where = off;
            if (stop)
                *stop = st;
            return -1;
        }
        if (in.rel_size) {
            int64_t target = (int64_t)(off + in.length) + in.rel;
            if (target >= (int64_t)lo && target < (int64_t)hi) {
                if (where)
                    *where = off;
                return 1;
            }
        }
        off += in.length;
    }
    return 0;
}

int mh_x86_find_branch_into(const uint8_t *code, uint64_t addr, size_t size, size_t from,
                            size_t lo, size_t hi, size_t *where)
{
    if (code == NULL)
        return -1;
    return mh_x86_sweep_branches(code, addr, size, from, lo, hi, where, NULL);
}
