/*
 * patch.c - install and remove bistro patches: the public memhook_bistro_*
 * API.
 *
 * A patch replaces the first bytes of a function (after an endbr64, which
 * stays at the entry) with
 *   e9 rel32                      when the hook, or a far-jump slot in an
 *                                 island near the target, is within rel32;
 *   48 b8 imm64 ff e0             movabs $hook,%rax; jmp *%rax otherwise,
 *                                 or when MEMHOOK_BISTRO_FAR_JUMP=1.
 * The displaced whole instructions are relocated into a trampoline (an
 * island within +-2 GiB of the target) that the caller gets back as
 * "original".
 *
 * Refused (ENOEXEC, with a reason naming the function, its library and the
 * bytes): an unknown symbol size, a function shorter than the patch, an
 * instruction the relocator cannot move, a later branch of the function
 * into the moved bytes, and a call in the window whose return address would
 * land inside the new jump (a thread inside the callee during the install
 * would return into the middle of it).
 *
 * Per target we keep a site record for the life of the process: the
 * original bytes, and the trampolines already built (a re-install reuses
 * them, so install/remove cycles do not consume island memory).  The int3
 * handler's table (text_poke.c) points at the site's trampoline.
 *
 * One mutex serializes installs and removes; nothing here runs on the call
 * path.  fork(): patches are memory and survive in the child; the atfork
 * handlers keep the mutex consistent and stop the child from appending to
 * island pages it shares with the parent.
 */
#include "bistro.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memhook/memhook.h"

#define ENDBR64_SIZE 4
#define WHY_BYTES 16

typedef struct mh_site {
    struct mh_site *next;
    uint64_t target;         /* the function entry as given */
    uint64_t at;             /* first patched byte (after endbr64) */
    uint8_t orig[16];        /* the bytes at `at` before any patch */
    uint64_t tramp[2];       /* trampolines for the 5- and 12-byte windows */
    size_t consumed[2];
    struct memhook_bistro_patch *live; /* the installed patch, or NULL */
} mh_site;

struct memhook_bistro_patch {
    mh_site *site;
    uint64_t hook;
    int jump_size;
    uint8_t bytes[16];       /* what we wrote at site->at */
};

/* Process-wide: the code being patched is shared by every thread, so the
 * record of what was patched, and the lock that serializes patching, must
 * be too. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static mh_site *g_sites;

static void atfork_prepare(void) { pthread_mutex_lock(&g_lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g_lock); }
static void atfork_child(void)
{
    mh_island_atfork_child();
    pthread_mutex_unlock(&g_lock);
}
static void init_once(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* ---- describing the target ---------------------------------------------- */

typedef struct target_info {
    const char *name;     /* symbol, or "?" */
    const char *library;  /* path of the object, or "?" */
    uint64_t sym_addr;
    size_t sym_size;      /* 0 when unknown */
} target_info;

static void describe(uint64_t target, target_info *ti)
{
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    memset(ti, 0, sizeof *ti);
    ti->name = "?";
    ti->library = "?";
    if (dladdr1((void *)(uintptr_t)target, &info, (void **)&sym, RTLD_DL_SYMENT) == 0)
        return;
    if (info.dli_fname && info.dli_fname[0])
        ti->library = info.dli_fname;
    if (info.dli_sname && sym) {
        ti->name = info.dli_sname;
        ti->sym_addr = (uint64_t)(uintptr_t)info.dli_saddr;
        ti->sym_size = (size_t)sym->st_size;
    }
}

__attribute__((format(printf, 6, 7)))
static int refuse(char *why, size_t why_len, const target_info *ti, uint64_t at, size_t avail,
                  const char *fmt, ...)
{
    if (!why || why_len == 0)
        return 0;
    char reason[256], bytes[3 * WHY_BYTES + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    size_t n = avail < WHY_BYTES ? avail : WHY_BYTES, used = 0;
    bytes[0] = '\0';
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(bytes + used, sizeof bytes - used, "%s%02x", i ? " " : "",
                                 ((const uint8_t *)(uintptr_t)at)[i]);
    snprintf(why, why_len, "bistro: cannot patch %s in %s at %#llx: %s; bytes: %s", ti->name,
             ti->library, (unsigned long long)at, reason, n ? bytes : "(none)");
    return 0;
}

static mh_site *find_site(uint64_t target)
{
    for (mh_site *s = g_sites; s; s = s->next)
        if (s->target == target)
            return s;
    return NULL;
}

static bool far_jump_forced(void)
{
    const char *v = getenv("MEMHOOK_BISTRO_FAR_JUMP");
    return v && v[0] == '1' && v[1] == '\0';
}

/* Any object of ours: dladdr on it names the library memhook lives in. */
static int self_anchor;

/* ---- install -------------------------------------------------------------- */

static int install_locked(uint64_t target, uint64_t hook, int jump_size, void **original,
                          memhook_bistro_patch **out, char *why, size_t why_len)
{
    target_info ti;
    describe(target, &ti);
    const uint8_t *code = (const uint8_t *)(uintptr_t)target;

    Dl_info self;
    if (dladdr(&self_anchor, &self) && ti.library && self.dli_fname &&
        strcmp(ti.library, self.dli_fname) == 0) {
        refuse(why, why_len, &ti, target, 0, "memhook does not patch its own library");
        return EINVAL;
    }
    if (ti.sym_size == 0 || target < ti.sym_addr || target >= ti.sym_addr + ti.sym_size) {
        refuse(why, why_len, &ti, target, 0,
               "no symbol with a size covers this address, so the end of the function "
               "is unknown");
        return ENOEXEC;
    }
    size_t total = (size_t)(ti.sym_addr + ti.sym_size - target);

    mh_site *site = find_site(target);
    if (site && site->live) {
        refuse(why, why_len, &ti, site->at, 0, "already patched by memhook");
        return EEXIST;
    }

    size_t skip = 0;
    if (total >= ENDBR64_SIZE && code[0] == 0xF3 && code[1] == 0x0F && code[2] == 0x1E &&
        code[3] == 0xFA)
        skip = ENDBR64_SIZE;
    uint64_t at = target + skip;
    size_t avail = total - skip;

    int size = jump_size;
    if (size == 0)
        size = far_jump_forced() ? 12 : 5;

    if (avail < (size_t)size) {
        refuse(why, why_len, &ti, at, avail,
               "the function is %zu bytes long%s, shorter than the %d-byte patch",
               total, skip ? " (4 of them an endbr64 kept at the entry)" : "", size);
        return ENOEXEC;
    }

    /* Where the code goes: an island near the target, or (no room near it)
     * anywhere, which only works for a 12-byte patch and a prologue without
     * RIP-relative operands (the relocator says). */
    mh_island_chunk chunk;
    int err = mh_island_reserve(at, MH_TRAMP_MAX, &chunk);
    bool near = (err == 0);
    if (!near) {
        if (jump_size == 5 && !mh_rel32_reachable(at + 5, hook)) {
            refuse(why, why_len, &ti, at, avail,
                   "a 5-byte jump was demanded but the hook is beyond +-2 GiB and no "
                   "memory could be mapped near the function (%s)", strerror(err));
            return EINVAL;
        }
        if (!mh_rel32_reachable(at + 5, hook) && size == 5)
            size = 12;
        if (avail < (size_t)size) {
            refuse(why, why_len, &ti, at, avail,
                   "the function is %zu bytes long, shorter than the %d-byte patch needed "
                   "because nothing could be mapped near it", total, size);
            return ENOEXEC;
        }
        err = mh_island_reserve(0, MH_TRAMP_MAX, &chunk);
        if (err) {
            refuse(why, why_len, &ti, at, avail, "cannot map a trampoline page: %s",
                   strerror(err));
            return err;
        }
    }
    int form = size == 12;

    /* A call inside the window whose return address falls strictly inside
     * the new jump: a thread in that callee while we install would return
     * into the middle of the jump. */
    for (size_t off = 0; off < (size_t)size;) {
        mh_x86_insn in;
        if (mh_x86_decode(code + skip + off, avail - off, &in) != MH_X86_OK)
            break; /* the relocator reports it */
        if ((in.flow == MH_FLOW_CALL_REL || in.flow == MH_FLOW_CALL_INDIRECT) &&
            off + in.length < (size_t)size) {
            mh_island_release(&chunk);
            refuse(why, why_len, &ti, at, avail,
                   "the call at +%zu returns to +%zu, inside the %d-byte patch", off,
                   off + in.length, size);
            return ENOEXEC;
        }
        off += in.length;
    }

    /* Original bytes: if they changed since we first saw this site (someone
     * else patched it), forget the cached trampolines. */
    if (site && memcmp(site->orig, code + skip, (size_t)size) != 0) {
        site->tramp[0] = site->tramp[1] = 0;
        memcpy(site->orig, code + skip, avail < sizeof site->orig ? avail : sizeof site->orig);
    }

    uint64_t tramp;
    size_t consumed;
    if (site && site->tramp[form]) {
        mh_island_release(&chunk);
        tramp = site->tramp[form];
        consumed = site->consumed[form];
    } else {
        uint8_t buf[MH_TRAMP_MAX];
        mh_reloc_result res;
        size_t n = mh_tramp_build(code + skip, at, avail, (size_t)size, chunk.addr, buf, &res);
        if (n == 0) {
            mh_island_release(&chunk);
            refuse(why, why_len, &ti, at, avail, "cannot relocate the prologue: %s",
                   res.reason[0] ? res.reason : "refused by the relocator");
            return ENOEXEC;
        }
        consumed = res.consumed;
        /* A later branch that lands inside the moved bytes would run the
         * middle of our jump.  Landing exactly on the first patched byte is
         * a (tail) call: it runs the patch, as a call would. */
        size_t where = 0;
        size_t base = (size_t)(at - ti.sym_addr);
        int r = mh_x86_find_branch_into((const uint8_t *)(uintptr_t)ti.sym_addr, ti.sym_addr,
                                        ti.sym_size, base + consumed, base + 1, base + consumed,
                                        &where);
        if (r != 0) {
            mh_island_release(&chunk);
            if (r > 0)
                refuse(why, why_len, &ti, at, avail,
                       "the branch at +%zu of the function jumps back into the %zu bytes the "
                       "patch displaces", where, consumed);
            else
                refuse(why, why_len, &ti, at, avail,
                       "cannot decode the function body at +%zu to rule out branches back "
                       "into the prologue", where);
            return ENOEXEC;
        }
        mh_island_shrink(&chunk, n);
        err = mh_island_commit(&chunk, buf, n);
        if (err) {
            mh_island_release(&chunk);
            refuse(why, why_len, &ti, at, avail, "cannot make the trampoline executable: %s",
                   strerror(err));
            return err;
        }
        tramp = chunk.addr;
        if (!site) {
            site = calloc(1, sizeof *site);
            if (!site)
                return ENOMEM; /* the trampoline stays unused */
            site->target = target;
            site->at = at;
            memcpy(site->orig, code + skip, avail < sizeof site->orig ? avail : sizeof site->orig);
            site->next = g_sites;
            g_sites = site;
        }
        site->tramp[form] = tramp;
        site->consumed[form] = consumed;
    }

    /* The jump: straight to the hook, through a far-jump slot near the
     * target, or the 12-byte absolute form. */
    uint64_t dest = hook;
    if (size == 5 && !mh_rel32_reachable(at + 5, hook)) {
        mh_island_chunk slot;
        err = mh_island_reserve(at, MH_FARSLOT_SIZE, &slot);
        uint8_t sb[MH_FARSLOT_SIZE];
        mh_farslot_build(hook, sb);
        if (!err && !mh_rel32_reachable(at + 5, slot.addr)) {
            mh_island_release(&slot);
            err = ENOMEM;
        }
        if (!err) {
            err = mh_island_commit(&slot, sb, sizeof sb);
            if (err)
                mh_island_release(&slot);
        }
        if (err) {
            refuse(why, why_len, &ti, at, avail, "cannot map a jump slot near the function: %s",
                   strerror(err));
            return err;
        }
        dest = slot.addr;
    }

    memhook_bistro_patch *p = calloc(1, sizeof *p);
    if (!p) {
        refuse(why, why_len, &ti, at, avail, "out of memory");
        return ENOMEM;
    }
    p->site = site;
    p->hook = hook;
    p->jump_size = size;
    mh_patch_jump_build(at, dest, size, p->bytes);

    err = mh_trap_register(at, tramp + MH_TRAMP_BODY);
    if (err) {
        free(p);
        refuse(why, why_len, &ti, at, avail, "too many patch sites");
        return err;
    }
    /* Threads can stand inside the old bytes if an instruction boundary
     * falls strictly inside the window. */
    mh_x86_insn first;
    bool interior = !(mh_x86_decode(code + skip, avail, &first) == MH_X86_OK &&
                      first.length >= (size_t)size);
    /* *original is published before the jump goes live: a hook that calls
     * through the very variable passed as `original` never sees it unset. */
    void *previous = __atomic_load_n(original, __ATOMIC_RELAXED);
    __atomic_store_n(original, (void *)(uintptr_t)tramp, __ATOMIC_RELEASE);
    char poke_why[200] = "";
    err = mh_text_poke(at, p->bytes, (size_t)size, interior, poke_why, sizeof poke_why);
    if (err) {
        __atomic_store_n(original, previous, __ATOMIC_RELEASE);
        free(p);
        refuse(why, why_len, &ti, at, avail, "%s", poke_why);
        return err;
    }
    site->live = p;
    *out = p;
    return 0;
}

int memhook_bistro_install(void *target, void *hook, int jump_size, void **original,
                           memhook_bistro_patch **out, char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = '\0';
    if (!target || !hook || !original || !out ||
        (jump_size != 0 && jump_size != 5 && jump_size != 12)) {
        if (why && why_len)
            snprintf(why, why_len, "bistro: bad argument (target %p, hook %p, jump_size %d)",
                     target, hook, jump_size);
        return EINVAL;
    }
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_lock);
    int err = install_locked((uint64_t)(uintptr_t)target, (uint64_t)(uintptr_t)hook, jump_size,
                             original, out, why, why_len);
    pthread_mutex_unlock(&g_lock);
    return err;
}

/* ---- remove ---------------------------------------------------------------- */

int memhook_bistro_remove(memhook_bistro_patch *patch)
{
    if (!patch)
        return EINVAL;
    pthread_mutex_lock(&g_lock);
    mh_site *site = patch->site;
    int err = 0;
    if (!site || site->live != patch) {
        err = EINVAL;
    } else if (memcmp((const void *)(uintptr_t)site->at, patch->bytes,
                      (size_t)patch->jump_size) != 0) {
        /* Someone wrote over our jump (another hooking library): restoring
         * would break theirs. */
        err = EBUSY;
    } else {
        char why[200];
        int form = patch->jump_size == 12;
        mh_trap_register(site->at, site->tramp[form] + MH_TRAMP_BODY);
        /* movabs+jmp has a boundary at +10 where a thread may stand. */
        err = mh_text_poke(site->at, site->orig, (size_t)patch->jump_size,
                           patch->jump_size == 12, why, sizeof why);
        if (err == 0) {
            site->live = NULL;
            free(patch);
        }
    }
    pthread_mutex_unlock(&g_lock);
    return err;
}

int memhook_bistro_patch_jump_size(const memhook_bistro_patch *patch)
{
    return patch ? patch->jump_size : 0;
}
