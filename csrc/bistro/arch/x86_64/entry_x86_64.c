/*
 * entry_x86_64.c - the planner's questions about an x86-64 function entry
 * (arch.h): what stays at the entry, whether a call in the window returns
 * inside the jump, whether the entry opens with a jump (another
 * patcher's), and whether a later branch lands in the moved bytes.
 * The answers come from the decoder (x86_decode.c) and its sweep.
 */
#include "arch.h"

size_t mh_arch_entry_skip(const uint8_t *code, size_t limit)
{
    mh_x86_insn first;
    if (mh_x86_decode(code, limit, &first) == MH_X86_OK && first.endbr64)
        return first.length;
    return 0;
}

bool mh_arch_call_returns_inside(const uint8_t *code, size_t limit, size_t window,
                                 size_t *call_at, size_t *return_at)
{
    for (size_t off = 0; off < window;) {
        mh_x86_insn in;
        if (mh_x86_decode(code + off, limit - off, &in) != MH_X86_OK)
            return false; /* the relocator accepted the window: cannot happen */
        if ((in.flow == MH_FLOW_CALL_REL || in.flow == MH_FLOW_CALL_INDIRECT) &&
            off + in.length < window) {
            *call_at = off;
            *return_at = off + in.length;
            return true;
        }
        off += in.length;
    }
    return false;
}

size_t mh_arch_entry_jump(const uint8_t *code, size_t limit)
{
    mh_x86_insn in;
    if (mh_x86_decode(code, limit, &in) != MH_X86_OK)
        return 0;
    return in.flow == MH_FLOW_JMP_REL || in.flow == MH_FLOW_JMP_INDIRECT ? in.length : 0;
}

static const char *stop_text(mh_x86_status st)
{
    return st == MH_X86_TRUNCATED ? "truncated" : st == MH_X86_INVALID ? "invalid" : "unknown opcode";
}

void mh_arch_sweep_branches_into(const uint8_t *code, uint64_t addr, size_t size, size_t from,
                                 size_t lo, size_t hi, mh_arch_sweep *out)
{
    mh_x86_status stop = MH_X86_OK;
    *out = (mh_arch_sweep){0};
    out->hit = mh_x86_sweep_branches(code, addr, size, from, lo, hi, &out->where, &stop);
    if (out->hit == 1) {
        mh_x86_insn br;
        mh_x86_decode(code + out->where, size - out->where, &br);
        out->target = (int64_t)(out->where + br.length) + br.rel;
    } else if (out->hit < 0) {
        out->truncated = stop == MH_X86_TRUNCATED;
        out->stop = stop_text(stop);
    }
}
