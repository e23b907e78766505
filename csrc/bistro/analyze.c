/*
 * analyze.c - "can this function entry be patched?" for the census tool
 * and `memhook info`.
 *
 * The analysis is the patch engine's own planner (plan.c) run on a copy of
 * the bytes: its verdict is the one install honours.  The decoder's and
 * relocator's own entry points, for tests, are x86-64's
 * (arch/x86_64/x86_exports.c).
 */
#include <stdio.h>
#include <string.h>

#include "memhook/memhook.h"
#include "memhook_internal/api.h"
#include "plan.h"

int memhook_bistro_analyze(const void *code_v, size_t avail, uint64_t address, size_t symbol_size,
                           int jump_size, uint64_t trampoline_address, const char *name,
                           const char *library, memhook_bistro_analysis *out)
{
    const uint8_t *code = code_v;
    if (code == NULL || out == NULL ||
        (jump_size != MH_ARCH_NEAR_JUMP && jump_size != MH_ARCH_FAR_JUMP))
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
