/*
 * analyze.c - the public face of the x86-64 layer: instruction lengths for
 * tests, and "can this function entry be patched?" for the patch engine,
 * the census tool and `memhook info`.
 *
 * The analysis is the same sequence the patch engine follows, without
 * touching memory: keep an endbr64 at the entry, relocate the whole
 * instructions under the jump to the trampoline address, then sweep the
 * rest of the function for a branch back into the moved bytes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "memhook/memhook.h"
#include "x86.h"

/* Enough for the largest relocation of a 12-byte window. */
#define TRAMPOLINE_SCRATCH 128
#define ENDBR64_SIZE 4
#define REASON_BYTES 16

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

/* "<library>: <name>: <why> [bytes: 55 48 89 e5 ...]".  The bytes always
 * fit: a long (mangled C++) name is shortened first. */
static void explain(memhook_bistro_analysis *out, const uint8_t *code, size_t avail,
                    const char *name, const char *library, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static void explain(memhook_bistro_analysis *out, const uint8_t *code, size_t avail,
                    const char *name, const char *library, const char *fmt, ...)
{
    char why[160], bytes[3 * REASON_BYTES + 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);

    size_t n = avail < REASON_BYTES ? avail : REASON_BYTES, used = 0;
    bytes[0] = '\0';
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(bytes + used, sizeof(bytes) - used, i ? " %02x" : "%02x",
                                 code[i]);

    const char *lib = library ? library : "?";
    const char *fn = name ? name : "?";
    /* Room left for the name once everything else is in. */
    size_t fixed = strlen(lib) + strlen(why) + strlen(bytes) + 16;
    int name_room = fixed >= sizeof(out->reason) ? 24 : (int)(sizeof(out->reason) - fixed);
    snprintf(out->reason, sizeof(out->reason), "%s: %.*s: %s [bytes: %s]", lib, name_room, fn,
             why, bytes);
}

int memhook_bistro_analyze(const void *code_v, size_t avail, uint64_t address, size_t symbol_size,
                           int jump_size, uint64_t trampoline_address, const char *name,
                           const char *library, memhook_bistro_analysis *out)
{
    const uint8_t *code = code_v;
    if (code == NULL || out == NULL || (jump_size != 5 && jump_size != 12))
        return -1;
    memset(out, 0, sizeof(*out));
    out->jump_size = jump_size;

    /* The function's bytes: all readable ones, but never past its end. */
    size_t limit = avail;
    if (symbol_size != 0 && symbol_size < limit)
        limit = symbol_size;

    /* endbr64 stays at the entry (indirect calls under CET/IBT land on it);
     * the jump goes right after it. */
    mh_x86_insn first;
    if (mh_x86_decode(code, limit, &first) == MH_X86_OK && first.endbr64)
        out->patch_offset = ENDBR64_SIZE;
    const size_t po = out->patch_offset;
    const size_t need = po + (size_t)jump_size;

    if (symbol_size != 0 && symbol_size < need) {
        out->refusal = MH_RELOC_TOO_SHORT;
        explain(out, code, limit, name, library,
                "function is %zu bytes, the %d-byte patch%s needs %zu", symbol_size, jump_size,
                po ? " after endbr64" : "", need);
        return 0;
    }

    uint8_t scratch[TRAMPOLINE_SCRATCH];
    mh_reloc_result rr;
    if (!mh_x86_relocate(code + po, address + po, limit - po, (size_t)jump_size, scratch,
                         trampoline_address, sizeof(scratch), &rr)) {
        out->refusal = rr.refusal;
        /* Offsets in the relocator's reason are from the patch point. */
        explain(out, code, limit, name, library, "%s%s", rr.reason,
                po ? " (offsets after endbr64)" : "");
        return 0;
    }
    out->consumed = rr.consumed;

    /* A later branch into the moved bytes would execute half of the jump.
     * Landing exactly on the patch point is fine (self tail call).  */
    size_t where = 0;
    mh_x86_status stop = MH_X86_OK;
    const size_t end = po + rr.consumed;
    int hit = mh_x86_sweep_branches(code, address, limit, end, po + 1, end, &where, &stop);
    if (hit == 1) {
        mh_x86_insn br;
        mh_x86_decode(code + where, limit - where, &br);
        out->refusal = MH_RELOC_BRANCH_INTO_WINDOW;
        explain(out, code, limit, name, library,
                "the branch at +%zu jumps back to +%lld, inside the patched bytes [%zu, %zu)",
                where, (long long)((int64_t)(where + br.length) + br.rel), po, end);
        return 0;
    }
    /* Known bytes that end mid-instruction are only the end of what we
     * know when the function is longer than them. */
    bool partial = symbol_size == 0 || avail < symbol_size;
    if (hit < 0 && !(stop == MH_X86_TRUNCATED && partial)) {
        out->refusal = MH_RELOC_DECODE_FAILED;
        explain(out, code, limit, name, library,
                "back-branch sweep cannot decode the instruction at +%zu (%s: %02x %02x %02x)",
                where,
                stop == MH_X86_TRUNCATED ? "truncated"
                : stop == MH_X86_INVALID ? "invalid"
                                         : "unknown opcode",
                code[where], where + 1 < limit ? code[where + 1] : 0,
                where + 2 < limit ? code[where + 2] : 0);
        return 0;
    }
    out->patchable = 1;
    out->refusal = MH_RELOC_OK;
    snprintf(out->reason, sizeof(out->reason), "%s: %s: patchable", library ? library : "?",
             name ? name : "?");
    return 0;
}
