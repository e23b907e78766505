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

    out->skip = mh_arch_entry_skip(code, limit);
    const size_t po = out->skip;
    const size_t need = po + (size_t)jump_size;
    if (symbol_size == 0 && limit < need)
        return refuse(out, MH_RELOC_TOO_SHORT, "only %zu bytes of the function are known, "
                      "the %d-byte patch needs %zu", limit, jump_size, need);
    if (limit < need) {
        char kept[64] = "";
        if (po)
            snprintf(kept, sizeof kept, " (%zu of them an %s kept at the entry)", po,
                     MH_ARCH_KEPT_AT_ENTRY);
        return refuse(out, MH_RELOC_TOO_SHORT,
                      "the function is %zu bytes long%s, shorter than the %d-byte patch",
                      limit, kept, jump_size);
    }

    uint8_t scratch[MH_TRAMP_MAX];
    uint8_t *buf = tramp ? tramp : scratch;
    mh_reloc_result rr;
    size_t n = mh_tramp_build(code + po, address + po, limit - po, (size_t)jump_size, tramp_addr,
                              buf, &rr);
    if (n == 0)
        return refuse(out, (int)rr.refusal, "cannot relocate the prologue: %s%s",
                      rr.reason[0] ? rr.reason : "refused by the relocator",
                      po ? " (offsets after the " MH_ARCH_KEPT_AT_ENTRY ")" : "");
    out->consumed = rr.consumed;
    out->tramp_len = n;
    for (size_t i = 0; i < rr.map_n; i++) {
        if (rr.map_src[i] < MH_PLAN_MAP)
            out->map[rr.map_src[i]] = (uint8_t)(MH_TRAMP_BODY + rr.map_dst[i]);
        if (rr.map_src[i] > 0 && rr.map_src[i] < (size_t)jump_size)
            out->interior = true;
    }

    size_t call_at, return_at;
    if (mh_arch_call_returns_inside(code + po, limit - po, (size_t)jump_size, &call_at,
                                    &return_at))
        return refuse(out, MH_RELOC_UNSUPPORTED,
                      "the call at +%zu returns to +%zu, inside the %d-byte patch", call_at,
                      return_at, jump_size);
    /* An entry that opens with a jump is, as often as not, another
     * patcher's work: the bytes after its jump are the tail of the
     * instructions it displaced, and its trampoline jumps back to the first
     * whole instruction after them.  A patch longer than that jump would put
     * that return in the middle of ours (two patchers corrupting each
     * other), so the window may cover the jump and nothing after it. */
    size_t opening = mh_arch_entry_jump(code + po, limit - po);
    if (opening != 0 && opening < (size_t)jump_size)
        return refuse(out, MH_RELOC_UNSUPPORTED, "the entry opens with a %zu-byte jump "
                      "(another patcher's?): a %d-byte patch would cover where its "
                      "trampoline returns", opening, jump_size);

    const size_t end = po + rr.consumed;
    mh_arch_sweep sweep;
    mh_arch_sweep_branches_into(code, address, limit, end, po + 1, end, &sweep);
    if (sweep.hit == 1)
        return refuse(out, MH_RELOC_BRANCH_INTO_WINDOW,
                      "the branch at +%zu jumps back into the %zu bytes the patch displaces "
                      "(to +%lld, inside [%zu, %zu))", sweep.where, rr.consumed,
                      (long long)sweep.target, po, end);
    bool partial = symbol_size == 0 || avail < symbol_size;
    size_t where = sweep.where;
    if (sweep.hit < 0 && !(sweep.truncated && partial))
        return refuse(out, MH_RELOC_DECODE_FAILED,
                      "cannot decode the function body at +%zu (%s: %02x %02x %02x) to rule "
                      "out branches back into the prologue", where, sweep.stop,
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
    /* Everything but the name and the library: " in ", " at 0x...: ",
     * "; bytes: ", the reason and the bytes.  What does not fit comes off
     * the library's path first, from its left ("..." and the rest: the
     * file's own name stays), then off the name - never the bytes, which
     * are what the refusal is about. */
    size_t others = strlen(reason) + (used ? strlen(hex) : 6) + 4 + 6 + 18 + 9 + 1;
    size_t room = len > others ? len - others : 0;
    size_t lib_len = strlen(lib), fn_len = strlen(fn);
    size_t fn_room = fn_len < 24 ? fn_len : 24;  /* (kept for the name before the path) */
    const char *lib_cut = "";
    if (fn_len + lib_len > room) {
        size_t lib_room = room > fn_room + 3 ? room - fn_room - 3 : 0;
        if (lib_len > lib_room) {
            lib_cut = "...";
            lib += lib_len - lib_room;
            lib_len = lib_room;
        }
        fn_len = room > lib_len + 3 ? room - lib_len - 3 : 0;
    }
    snprintf(buf, len, "%.*s in %s%s at %#llx: %s; bytes: %s", (int)fn_len, fn, lib_cut, lib,
             (unsigned long long)at, reason, used ? hex : "(none)");
}
