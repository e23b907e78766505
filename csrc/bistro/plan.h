/*
 * plan.h - the one decision of whether and how a function entry is patched.
 *
 * The patch engine (patch.c) and the analysis (analyze.c, behind the census
 * tool and `memhook info`) both ask mh_plan_entry, so a verdict printed by
 * the tools is the verdict install honours.  The planner is pure: it reads
 * the bytes it is given and writes only *out and the trampoline buffer.
 */
#ifndef MEMHOOK_BISTRO_PLAN_H
#define MEMHOOK_BISTRO_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bistro.h"

#define MH_PLAN_NO_BOUNDARY 0xFF
#define MH_PLAN_MAP 16

typedef struct mh_plan {
    bool ok;
    int refusal;            /* mh_reloc_refusal (MH_RELOC_OK when ok) */
    size_t skip;            /* bytes kept at the entry (mh_arch_entry_skip) */
    int jump_size;          /* 5 or 12 */
    size_t consumed;        /* old bytes moved to the trampoline */
    size_t tramp_len;       /* endbr64 + relocated body + jump back */
    /* An old instruction boundary strictly inside (0, jump_size): a thread
     * can stand there while the jump is written. */
    bool interior;
    /* map[k], k < MH_PLAN_MAP: where a thread stopped at old offset k (from
     * the patch point) continues, as an offset into the trampoline;
     * MH_PLAN_NO_BOUNDARY when k is not an instruction boundary. */
    uint8_t map[MH_PLAN_MAP];
    char why[200];          /* the refusal, without name/library/bytes */
} mh_plan;

/*
 * Plan a patch of jump_size bytes at the function entry `code` (it runs at
 * `address`; avail readable bytes; symbol_size 0 = unknown), its trampoline
 * to run at tramp_addr (written into tramp when not NULL).  Decides: the
 * endbr64 kept at the entry, the symbol is long enough, the window
 * relocates, no call in the window returns strictly inside the jump, no
 * later branch lands inside the moved bytes.  When only the first bytes of
 * a longer function are known (avail < symbol_size), an instruction cut off
 * by their end stops the back-branch sweep without a refusal.
 * Returns out->ok.
 */
MH_HIDDEN bool mh_plan_entry(const uint8_t *code, uint64_t address, size_t avail,
                             size_t symbol_size, int jump_size, uint64_t tramp_addr,
                             uint8_t *tramp, mh_plan *out);

/* The one refusal formatter: "<name> in <library> at <at>: <reason>;
 * bytes: 55 48 ..." (up to 16 bytes), shortening a long name so the bytes
 * always fit. */
MH_HIDDEN void mh_plan_explain(char *buf, size_t len, const char *name, const char *library,
                               uint64_t at, const uint8_t *bytes, size_t n, const char *reason);

#endif
