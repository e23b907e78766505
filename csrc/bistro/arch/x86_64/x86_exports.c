/*
 * x86_exports.c - the decoder's and the relocator's exported entry points
 * (memhook_internal/api.h), which the tests hold against capstone.
 */
#include <stdio.h>

#include "memhook/memhook.h"
#include "memhook_internal/api.h"
#include "x86.h"

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
