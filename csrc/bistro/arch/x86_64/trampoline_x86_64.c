/*
 * trampoline_x86_64.c - the code bistro writes: trampolines (the displaced prologue,
 * relocated, then a jump back), far-jump slots, and the patch jumps.
 *
 * Trampoline layout, at tramp_addr (an island within +-2 GiB of the target,
 * so RIP-relative operands can be re-encoded):
 *
 *   +0   f3 0f 1e fa            endbr64  (the hook calls it indirectly; a
 *                                         NOP where CET/IBT is off)
 *   +4   relocated instructions (whole ones covering the patch window)
 *   +n   e9 rel32               jmp target_window+consumed, or when that is
 *        ff 25 00 00 00 00 .quad  out of rel32 range, jmp *0(%rip); .quad
 *
 * The SIGTRAP redirect for a thread caught on the int3 lands on +4
 * (MH_TRAMP_BODY): it already executed the target's own endbr64, if any.
 *
 * An undo stub, for a jump placed after the entry's one-byte pushes (the
 * spin barrier's form, docs/design/live-patching.md): the pops of those
 * pushes in reverse order, then a jump to the hook, so the hook starts
 * with the registers and stack of the function's entry.
 */
#include "arch.h"

#include <string.h>

static size_t put_abs_jmp(uint8_t *out, uint64_t dest)
{
    /* jmp *0(%rip) ; .quad dest */
    out[0] = 0xFF;
    out[1] = 0x25;
    memset(out + 2, 0, 4);
    memcpy(out + 6, &dest, 8);
    return MH_FARSLOT_SIZE;
}

static size_t put_rel_jmp(uint8_t *out, uint64_t at, uint64_t dest)
{
    int32_t rel = (int32_t)(int64_t)(dest - (at + 5));
    out[0] = 0xE9;
    memcpy(out + 1, &rel, 4);
    return 5;
}

size_t mh_tramp_build(const uint8_t *src, uint64_t src_addr, size_t avail, size_t need,
                      uint64_t tramp_addr, uint8_t out[MH_TRAMP_MAX], mh_reloc_result *res)
{
    static const uint8_t endbr64[4] = {0xF3, 0x0F, 0x1E, 0xFA};
    memcpy(out, endbr64, sizeof endbr64);
    size_t cap = MH_TRAMP_MAX - MH_TRAMP_BODY - MH_FARSLOT_SIZE;
    memset(res, 0, sizeof *res);
    if (!mh_x86_relocate(src, src_addr, avail, need, out + MH_TRAMP_BODY,
                         tramp_addr + MH_TRAMP_BODY, cap, res))
        return 0;
    size_t n = MH_TRAMP_BODY + res->written;
    uint64_t back = src_addr + res->consumed;
    if (mh_rel32_reachable(tramp_addr + n + 5, back))
        n += put_rel_jmp(out + n, tramp_addr + n, back);
    else
        n += put_abs_jmp(out + n, back);
    return n;
}

void mh_farslot_build(uint64_t dest, uint8_t out[MH_FARSLOT_SIZE])
{
    put_abs_jmp(out, dest);
}

size_t mh_undo_stub_build(const uint8_t *pushes, size_t n, uint64_t stub_addr, uint64_t dest,
                          uint8_t out[MH_UNDO_STUB_MAX])
{
    if (n > MH_PUSH_RUN_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (pushes[i] < 0x50 || pushes[i] > 0x57)
            return 0;
        out[i] = (uint8_t)(pushes[n - 1 - i] + 8); /* push %r (50+r) -> pop %r (58+r) */
    }
    if (mh_rel32_reachable(stub_addr + n + 5, dest))
        return n + put_rel_jmp(out + n, stub_addr + n, dest);
    return n + put_abs_jmp(out + n, dest);
}

size_t mh_patch_jump_build(uint64_t at, uint64_t dest, int size, uint8_t out[16])
{
    if (size == 5)
        return put_rel_jmp(out, at, dest);
    /* movabs $dest,%rax ; jmp *%rax.  %rax is a scratch register at a
     * function entry in the SysV ABI.  The one caveat: for a variadic
     * function %al carries an upper bound of the vector registers used; the
     * hook then sees a garbage %al, which at worst makes a variadic hook's
     * prologue save all eight XMM argument registers. */
    out[0] = 0x48;
    out[1] = 0xB8;
    memcpy(out + 2, &dest, 8);
    out[10] = 0xFF;
    out[11] = 0xE0;
    return 12;
}
