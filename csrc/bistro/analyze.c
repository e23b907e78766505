/*
 * analyze.c - the public face of the x86-64 layer: instruction lengths for
 * tests, and "can this function entry be patched?" for the patch engine,
 * the census tool and `memhook info`.
 *
 * The analysis is the patch engine's own planner (plan.c) run on a copy of
 * the bytes: its verdict is the one install honours.
 */
#include <stdio.h>
#include <string.h>

#include "memhook/memhook.h"
#include "plan.h"


int memhook_x86_insn_length(const void *code, size_t avail)
{
    mh_x86_insn in;
    mh_x86_status st = mh_x86_decode(code, avail, &in);
    return st == MH_X86_OK ? in.length : (int)st;
}

size_t memhook_x86_lengths(const void *buf, size_t stride, size_t count, int8_t *out_lengths)
{
    size_t ok = 0;
    if (buf == NULL || out_lengths == NULL)
        return 0;
    const uint8_t *p = buf;
    for (size_t i = 0; i < count; i++) {
        mh_x86_insn in;
        mh_x86_status st = mh_x86_decode(p + i * stride, stride, &in);
        out_lengths[i] = (int8_t)(st == MH_X86_OK ? in.length : st);
        ok += st == MH_X86_OK;
    }
    return ok;
}

int memhook_x86_relocate(const void *src, uint64_t src_addr, size_t avail, size_t need, void *dst,
                         uint64_t dst_addr, size_t dst_cap, size_t *consumed, size_t *written,
                         char *reason, size_t reason_cap)
{
    mh_reloc_result rr;
    bool ok = mh_x86_relocate(src, src_addr, avail, need, dst, dst_addr, dst_cap, &rr);
    if (consumed)
        *consumed = ok ? rr.consumed : 0;
    if (written)
        *written = ok ? rr.written : 0;
    if (reason && reason_cap)
        snprintf(reason, reason_cap, "%s", ok ? "" : rr.reason);
    return ok ? MH_RELOC_OK : (int)rr.refusal;
}

int memhook_bistro_analyze(const void *code_v, size_t avail, uint64_t address, size_t symbol_size,
                           int jump_size, uint64_t trampoline_address, const char *name,
                           const char *library, memhook_bistro_analysis *out)
{
    const uint8_t *code = code_v;
    if (code == NULL || out == NULL || (jump_size != 5 && jump_size != 12))
        return -1;
    memset(out, 0, sizeof(*out));
    mh_plan plan;
    mh_plan_entry(code, address, avail, symbol_size, jump_size, trampoline_address, NULL, &plan);
    out->jump_size = jump_size;
    out->patch_offset = plan.skip;
    out->consumed = plan.ok ? plan.consumed : 0;
    out->patchable = plan.ok;
    out->refusal = plan.refusal;
    if (plan.ok) {
        snprintf(out->reason, sizeof(out->reason), "%s in %s: patchable", name ? name : "?",
                 library ? library : "?");
        return 0;
    }
    size_t limit = symbol_size != 0 && symbol_size < avail ? symbol_size : avail;
    mh_plan_explain(out->reason, sizeof(out->reason), name, library, address + plan.skip,
                    code + plan.skip, limit - plan.skip, plan.why);
    return 0;
}
