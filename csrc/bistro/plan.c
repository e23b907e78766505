/*
 * plan.c - decide whether and how a function entry is patched (see plan.h).
 *
 * The order is the engine's: keep an endbr64 at the entry (indirect calls
 * under CET/IBT land on it), check the symbol covers the jump, relocate the
 * whole instructions under the jump into the trampoline, refuse a call in
 * the window whose return address falls strictly inside the jump (a thread
 * inside that callee during the install would return into the middle of
 * it), then sweep the rest of the function for a branch back into the
 * moved bytes.  Landing exactly on the patch point is a (tail) call: it
 * runs the patch, as a call would.
 */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool refuse(mh_plan *out, int refusal, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool refuse(mh_plan *out, int refusal, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->why, sizeof out->why, fmt, ap);
    va_end(ap);
    out->ok = false;
    out->refusal = refusal;
    return false;
}

/* An entry that opens with a jump is, as often as not, another patcher's
 * work: the bytes after its jump are the tail of the instructions it
 * displaced, and its trampoline jumps back to the first whole instruction
 * after them.  A patch longer than that jump would put that return in the
 * middle of our bytes (two patchers corrupting each other), so the window
 * may cover the jump and nothing after it. */
static bool jumps_away(mh_x86_flow flow)
{
    return flow == MH_FLOW_JMP_REL || flow == MH_FLOW_JMP_INDIRECT;
}

static const char *flow_name(mh_x86_flow flow)
{
    return flow == MH_FLOW_JMP_REL ? "jump" : "indirect jump";
}

static const char *status_text(mh_x86_status st)
{
    return st == MH_X86_TRUNCATED ? "truncated" : st == MH_X86_INVALID ? "invalid" : "unknown opcode";
}

bool mh_plan_entry(const uint8_t *code, uint64_t address, size_t avail, size_t symbol_size,
                   int jump_size, uint64_t tramp_addr, uint8_t *tramp, mh_plan *out)
{
    memset(out, 0, sizeof *out);
    memset(out->map, MH_PLAN_NO_BOUNDARY, sizeof out->map);
    out->jump_size = jump_size;
    /* Never read past the function's end. */
    size_t limit = avail;
    if (symbol_size != 0 && symbol_size < limit)
        limit = symbol_size;

    mh_x86_insn first;
    if (mh_x86_decode(code, limit, &first) == MH_X86_OK && first.endbr64)
        out->skip = MH_PLAN_ENDBR64;
    const size_t po = out->skip;
    const size_t need = po + (size_t)jump_size;
    if (symbol_size == 0 && limit < need)
        return refuse(out, MH_RELOC_TOO_SHORT, "only %zu bytes of the function are known, "
                      "the %d-byte patch needs %zu", limit, jump_size, need);
    if (limit < need)
        return refuse(out, MH_RELOC_TOO_SHORT,
                      "the function is %zu bytes long%s, shorter than the %d-byte patch",
                      limit, po ? " (4 of them an endbr64 kept at the entry)" : "", jump_size);

    uint8_t scratch[MH_TRAMP_MAX];
    uint8_t *buf = tramp ? tramp : scratch;
    mh_reloc_result rr;
    size_t n = mh_tramp_build(code + po, address + po, limit - po, (size_t)jump_size, tramp_addr,
                              buf, &rr);
    if (n == 0)
        return refuse(out, (int)rr.refusal, "cannot relocate the prologue: %s%s",
                      rr.reason[0] ? rr.reason : "refused by the relocator",
                      po ? " (offsets after the endbr64)" : "");
    out->consumed = rr.consumed;
    out->tramp_len = n;
    for (size_t i = 0; i < rr.map_n; i++) {
        if (rr.map_src[i] < MH_PLAN_MAP)
            out->map[rr.map_src[i]] = (uint8_t)(MH_TRAMP_BODY + rr.map_dst[i]);
        if (rr.map_src[i] > 0 && rr.map_src[i] < (size_t)jump_size)
            out->interior = true;
    }

    for (size_t off = 0; off < (size_t)jump_size;) {
        mh_x86_insn in;
        if (mh_x86_decode(code + po + off, limit - po - off, &in) != MH_X86_OK)
            break; /* the relocator accepted it, so this cannot happen */
        if ((in.flow == MH_FLOW_CALL_REL || in.flow == MH_FLOW_CALL_INDIRECT) &&
            off + in.length < (size_t)jump_size)
            return refuse(out, MH_RELOC_UNSUPPORTED,
                          "the call at +%zu returns to +%zu, inside the %d-byte patch", off,
                          off + in.length, jump_size);
        if (off == 0 && jumps_away(in.flow) && in.length < (size_t)jump_size)
            return refuse(out, MH_RELOC_UNSUPPORTED, "the entry opens with a %d-byte %s "
                          "(another patcher's?): a %d-byte patch would cover where its "
                          "trampoline returns",
                          (int)in.length, flow_name(in.flow), jump_size);
        off += in.length;
    }

    size_t where = 0;
    mh_x86_status stop = MH_X86_OK;
    const size_t end = po + rr.consumed;
    int hit = mh_x86_sweep_branches(code, address, limit, end, po + 1, end, &where, &stop);
    if (hit == 1) {
        mh_x86_insn br;
        mh_x86_decode(code + where, limit - where, &br);
        return refuse(out, MH_RELOC_BRANCH_INTO_WINDOW,
                      "the branch at +%zu jumps back into the %zu bytes the patch displaces "
                      "(to +%lld, inside [%zu, %zu))", where, rr.consumed,
                      (long long)((int64_t)(where + br.length) + br.rel), po, end);
    }
    bool partial = symbol_size == 0 || avail < symbol_size;
    if (hit < 0 && !(stop == MH_X86_TRUNCATED && partial))
        return refuse(out, MH_RELOC_DECODE_FAILED,
                      "cannot decode the function body at +%zu (%s: %02x %02x %02x) to rule "
                      "out branches back into the prologue", where, status_text(stop),
                      code[where], where + 1 < limit ? code[where + 1] : 0,
                      where + 2 < limit ? code[where + 2] : 0);
    out->ok = true;
    out->refusal = MH_RELOC_OK;
    return true;
}

void mh_plan_explain(char *buf, size_t len, const char *name, const char *library, uint64_t at,
                     const uint8_t *bytes, size_t n, const char *reason)
{
    char hex[3 * 16 + 1] = "";
    size_t used = 0;
    if (n > 16)
        n = 16;
    for (size_t i = 0; i < n && bytes; i++)
        used += (size_t)snprintf(hex + used, sizeof hex - used, i ? " %02x" : "%02x", bytes[i]);
    const char *lib = library ? library : "?";
    const char *fn = name ? name : "?";
    size_t fixed = strlen(lib) + strlen(reason) + strlen(hex) + 48;
    int room = fixed >= len ? 24 : (int)(len - fixed);
    snprintf(buf, len, "%.*s in %s at %#llx: %s; bytes: %s", room, fn, lib,
             (unsigned long long)at, reason, used ? hex : "(none)");
}
