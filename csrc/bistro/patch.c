/*
 * patch.c - install and remove bistro patches: the exported
 * memhook_bistro_* entry points (memhook_internal/api.h).
 *
 * A patch replaces the first bytes of a function (after what the
 * instruction set keeps at the entry: mh_arch_entry_skip) with the near
 * jump when the hook, or a far-jump slot in an island near the target, is
 * within its reach; with the far jump otherwise, or when
 * MEMHOOK_BISTRO_FAR_JUMP=1 (the forms: arch.h).
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
 * Beside a thread that blocks SIGTRAP the live write cannot use int3 and
 * spins threads at a two-byte "jmp ." instead, which must not cut an
 * instruction; an entry that starts with one-byte pushes (55: push %rbp,
 * as every libcuda entry does) then gets its 5-byte jump placed after
 * them, jumping to an undo stub (the pops, then the hook), with the
 * 12-byte window's trampoline as "original".  docs/design/live-patching.md
 * argues why that write is safe beside a thread that cannot take a signal.
 *
 * Per target we keep a site record for the life of the process: the
 * original bytes, and the trampolines and undo stub already built (a
 * re-install reuses them, so install/remove cycles do not consume island
 * memory).  The int3 handler's table (text_poke.c) points at the site's
 * trampoline.
 *
 * One mutex serializes installs and removes; nothing here runs on the call
 * path.  fork(): patches are memory and survive in the child; the atfork
 * handlers keep the mutex consistent and stop the child from appending to
 * island pages it shares with the parent.
 */
#include "bistro.h"
#include "mh_options.h"
#include "plan.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memhook/memhook.h"
#include "memhook_internal/api.h"

#define WHY_BYTES 16

typedef struct mh_site {
    struct mh_site *next;
    uint64_t target;         /* the function entry as given */
    uint64_t at;             /* first patched byte (after endbr64) */
    uint8_t orig[16];        /* the bytes at `at` before any patch */
    uint64_t tramp[2];       /* trampolines for the 5- and 12-byte windows */
    uint8_t map[2][MH_PLAN_MAP]; /* their old -> trampoline boundary maps */
    bool wide_tried;         /* ensure_wide ran (the 12-byte plan may refuse) */
    uint64_t stub, stub_hook; /* the undo stub, and the hook it jumps to */
    struct memhook_bistro_patch *live; /* the installed patch, or NULL */
} mh_site;

struct memhook_bistro_patch {
    mh_site *site;
    uint64_t hook;
    uint64_t dest;           /* where the jump goes (the hook, a far slot, a stub) */
    int jump_size;
    uint64_t at;             /* where it is written: site->at, or after the pushes */
    uint64_t tramp;          /* the trampoline the signal handlers use for it */
    uint8_t map[MH_PLAN_MAP]; /* its boundary map, relative to `at` */
    uint8_t bytes[16];       /* what we wrote at `at` */
};
/* Process-wide: the code being patched is shared by every thread, so the
 * record of what was patched, and the lock that serializes patching, must
 * be too. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static mh_site *g_sites;

/* Registered at load by csrc/cuda/fork_order.c, in the lock order. */
void mh_bistro_fork_prepare(void) { pthread_mutex_lock(&g_lock); }
void mh_bistro_fork_parent(void) { pthread_mutex_unlock(&g_lock); }
void mh_bistro_fork_child(void)
{
    mh_island_atfork_child();
    pthread_mutex_unlock(&g_lock);
}

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

/* "bistro: cannot patch " + the planner's one formatter. */
__attribute__((format(printf, 6, 7)))
static int refuse(char *why, size_t why_len, const target_info *ti, uint64_t at, size_t avail,
                  const char *fmt, ...)
{
    if (!why || why_len == 0)
        return 0;
    char reason[256], text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    static const char lead[] = "bistro: cannot patch ";
    size_t pre = sizeof lead - 1;
    /* (the explanation fits what is left after the lead: mh_plan_explain
     * shortens the library's path rather than lose the bytes at the end) */
    size_t room = why_len > pre + 1 ? why_len - pre : 1;
    mh_plan_explain(text, room < sizeof text ? room : sizeof text, ti->name, ti->library, at,
                    (const uint8_t *)(uintptr_t)at, avail, reason);
    snprintf(why, why_len, "%s", lead);
    if (pre + 1 < why_len) { /* the text, cut to what is left */
        size_t len = strnlen(text, why_len - pre - 1);
        memcpy(why + pre, text, len);
        why[pre + len] = '\0';
    }
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
    return mh_opts.bistro_far_jump;  /* MEMHOOK_BISTRO_FAR_JUMP=1 */
}

/* Any object of ours: dladdr on it names the library memhook lives in. */
static int self_anchor;

/* ---- install: plan -> place the trampoline -> place the jump -> publish ----
 *
 * Each step fills in what the next one needs.  A step that fails says why
 * (fail) and returns the errno; give_up is the one way out for a failed
 * entry: it gives back what the entry holds and answers its request. */

/* One entry on its way in. */
typedef struct pending {
    memhook_bistro_request *req;
    target_info ti;
    uint64_t target, hook;
    const uint8_t *code;     /* the function's bytes, from target */
    size_t total;            /* bytes from target to the symbol's end */
    mh_site *site;           /* NULL until the site's first trampoline */
    uint64_t at;             /* first patched byte (after an endbr64) */
    size_t avail;            /* bytes from `at` to the symbol's end */
    size_t keep;             /* bytes of the original kept in the site record */
    int size;                /* the jump: 5 or 12 */
    mh_island_chunk chunk;   /* a fresh trampoline's island, while uncommitted */
    bool chunk_open;
    uint64_t tramp;          /* this window's trampoline */
    mh_plan plan;
    memhook_bistro_patch *p;
    bool spin;               /* a thread blocks SIGTRAP: no window may start
                                with a one-byte instruction */
    bool published;          /* *original holds our trampoline */
    void *previous;          /* *original before we published the trampoline */
    uint64_t fail_at;        /* the failure: where its bytes are shown from, */
    size_t fail_avail;       /* how many there are, */
    char reason[256];        /* and why */
} pending;

__attribute__((format(printf, 5, 6)))
static int fail(pending *e, int err, uint64_t at, size_t avail, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->reason, sizeof e->reason, fmt, ap);
    va_end(ap);
    e->fail_at = at;
    e->fail_avail = avail;
    return err;
}

/* Step 1: which function this is, whether memhook may patch it, where the
 * patch goes and which jump it wants; and whether the site's cached
 * trampolines were built from the bytes that are there now. */
static int plan_target(pending *e)
{
    memhook_bistro_request *r = e->req;
    e->target = (uint64_t)(uintptr_t)r->target;
    e->hook = (uint64_t)(uintptr_t)r->hook;
    e->code = (const uint8_t *)(uintptr_t)e->target;
    describe(e->target, &e->ti);
    const target_info *ti = &e->ti;

    Dl_info self;
    if (dladdr(&self_anchor, &self) && ti->library && self.dli_fname &&
        strcmp(ti->library, self.dli_fname) == 0)
        return fail(e, EINVAL, e->target, 0, "memhook does not patch its own library");
    if (ti->sym_size == 0 || e->target < ti->sym_addr || e->target >= ti->sym_addr + ti->sym_size)
        return fail(e, ENOEXEC, e->target, 0,
                    "no symbol with a size covers this address, so the end of the function "
                    "is unknown");
    e->total = (size_t)(ti->sym_addr + ti->sym_size - e->target);
    e->site = find_site(e->target);
    if (e->site && e->site->live)
        return fail(e, EEXIST, e->site->at, 0, "already patched by memhook");
    e->size = r->jump_size ? r->jump_size
                           : far_jump_forced() ? MH_ARCH_FAR_JUMP : MH_ARCH_NEAR_JUMP;
    /* The planner keeps an endbr64; its verdict on the skip is all we need
     * to place the island near the patch point. */
    mh_plan first;
    mh_plan_entry(e->code, e->target, e->total, e->total, e->size, 0, NULL, &first);
    e->at = e->target + first.skip;
    e->avail = e->total - first.skip;

    /* Original bytes changed since we first saw this site (someone else
     * patched it): forget the cached trampolines. */
    mh_site *site = e->site;
    const uint8_t *now = e->code + first.skip;
    e->keep = e->avail < sizeof site->orig ? e->avail : sizeof site->orig;
    if (site && memcmp(site->orig, now, e->keep) != 0) {
        site->tramp[0] = site->tramp[1] = 0;
        site->wide_tried = false;
        site->stub = 0; /* its pops were the old pushes */
        memcpy(site->orig, now, e->keep);
    }
    return 0;
}

/* Where the trampoline runs: the cached one of this window, or a fresh
 * island near the target (or, with nothing mappable near it, anywhere:
 * that only works for the 12-byte form, so e->size may become 12). */
static int place_island(pending *e)
{
    mh_site *site = e->site;
    if (site && site->tramp[e->size == MH_ARCH_FAR_JUMP]) {
        e->tramp = site->tramp[e->size == MH_ARCH_FAR_JUMP];
        return 0;
    }
    int err = mh_island_reserve(e->at, MH_TRAMP_MAX, &e->chunk);
    if (err) {
        if (e->req->jump_size == MH_ARCH_NEAR_JUMP && !mh_arch_near_reaches(e->at, e->hook))
            return fail(e, EINVAL, e->at, e->avail,
                        "a 5-byte jump was demanded but the hook is beyond +-2 GiB and no "
                        "memory could be mapped near the function (%s)", strerror(err));
        if (e->size == MH_ARCH_NEAR_JUMP && !mh_arch_near_reaches(e->at, e->hook))
            e->size = MH_ARCH_FAR_JUMP;
        if (site && site->tramp[e->size == MH_ARCH_FAR_JUMP]) {
            e->tramp = site->tramp[e->size == MH_ARCH_FAR_JUMP];
            return 0;
        }
        err = mh_island_reserve(0, MH_TRAMP_MAX, &e->chunk);
        if (err)
            return fail(e, err, e->at, e->avail, "cannot map a trampoline page: %s",
                        strerror(err));
    }
    e->tramp = e->chunk.addr;
    e->chunk_open = true;
    return 0;
}

/* A site patched with the 5-byte form also gets the 12-byte window's
 * trampoline when that one plans: it is the one handed out as "original"
 * and used by the signal handlers, because it jumps back past +12.  A
 * 5-byte trampoline jumps back to the end of its shorter window, which is
 * inside the 12-byte one: a thread still inside it when the site switches
 * to the 12-byte form would return into the middle of that jump.  Best
 * effort: without it, the 5-byte trampoline serves. */
static void ensure_wide(pending *e)
{
    mh_site *site = e->site;
    if (site->tramp[1] || site->wide_tried)
        return;
    site->wide_tried = true;
    mh_island_chunk chunk;
    if (mh_island_reserve(e->at, MH_TRAMP_MAX, &chunk) != 0)
        return;
    uint8_t buf[MH_TRAMP_MAX];
    mh_plan wide;
    if (!mh_plan_entry(e->code, e->target, e->total, e->total, MH_ARCH_FAR_JUMP, chunk.addr, buf,
                       &wide)) {
        mh_island_release(&chunk);
        return;
    }
    mh_island_shrink(&chunk, wide.tramp_len);
    if (mh_island_commit(&chunk, buf, wide.tramp_len) != 0) {
        mh_island_release(&chunk);
        return;
    }
    if (mh_trap_register(e->at, chunk.addr, MH_ARCH_FAR_JUMP, wide.map, 0) != 0)
        return;
    site->tramp[1] = chunk.addr;
    memcpy(site->map[1], wide.map, MH_PLAN_MAP);
}

/* A fresh trampoline goes into the site's record (made now, at the site's
 * first trampoline, with the original bytes), so later installs reuse it. */
static int record_trampoline(pending *e)
{
    mh_site *site = e->site;
    if (!site) {
        site = calloc(1, sizeof *site);
        if (!site)
            return fail(e, ENOMEM, e->at, e->avail, "out of memory"); /* tramp stays unused */
        site->target = e->target;
        site->at = e->at;
        memcpy(site->orig, (const uint8_t *)(uintptr_t)e->at, e->keep);
        site->next = g_sites;
        g_sites = site;
        e->site = site;
    }
    int form = e->size == MH_ARCH_FAR_JUMP;
    site->tramp[form] = e->tramp;
    memcpy(site->map[form], e->plan.map, MH_PLAN_MAP);
    return 0;
}

/* Step 2: the displaced instructions, relocated into this window's
 * trampoline (built and made executable when it is fresh). */
static int place_trampoline(pending *e)
{
    int err = place_island(e);
    if (err)
        return err;
    uint8_t buf[MH_TRAMP_MAX];
    if (!mh_plan_entry(e->code, e->target, e->total, e->total, e->size, e->tramp, buf, &e->plan))
        return fail(e, ENOEXEC, e->at, e->avail, "%s", e->plan.why);
    if (e->chunk_open) {
        mh_island_shrink(&e->chunk, e->plan.tramp_len);
        err = mh_island_commit(&e->chunk, buf, e->plan.tramp_len);
        if (err)
            return fail(e, err, e->at, e->avail, "cannot make the trampoline executable: %s",
                        strerror(err));
        e->chunk_open = false;
        err = record_trampoline(e);
        if (err)
            return err;
    }
    if (e->size == MH_ARCH_NEAR_JUMP)
        ensure_wide(e);
    return 0;
}

/* The jump's destination: the hook, or a far-jump slot near the target. */
static int jump_destination(pending *e, uint64_t *dest)
{
    *dest = e->hook;
    if (e->size == MH_ARCH_FAR_JUMP || mh_arch_near_reaches(e->at, e->hook))
        return 0;
    mh_island_chunk slot;
    int err = mh_island_reserve(e->at, MH_FARSLOT_SIZE, &slot);
    uint8_t sb[MH_FARSLOT_SIZE];
    mh_farslot_build(e->hook, sb);
    if (!err && !mh_arch_near_reaches(e->at, slot.addr)) {
        mh_island_release(&slot);
        err = ENOMEM;
    }
    if (!err) {
        err = mh_island_commit(&slot, sb, sizeof sb);
        if (err)
            mh_island_release(&slot);
    }
    if (err)
        return fail(e, err, e->at, e->avail, "cannot map a jump slot near the function: %s",
                    strerror(err));
    *dest = slot.addr;
    return 0;
}

/* How many one-byte pushes open the window before an instruction
 * longer than a byte, by the 12-byte window's map; 0 when the first
 * instruction is a longer one, -1 when the run is no such prefix. */
static int push_run(const mh_site *site, const uint8_t *code)
{
    const uint8_t *map = site->map[1];
    int b = 0;
    while (b < MH_PUSH_RUN_MAX && mh_arch_is_one_byte_push(code[b]))
        b++;
    if (map[b] == MH_PLAN_NO_BOUNDARY || map[b + 1] != MH_PLAN_NO_BOUNDARY)
        return -1;
    return b;
}

/* The undo stub of the site's pushes, ending in a jump to the hook: the
 * one the site has, or a fresh one near the entry. */
static int undo_stub(pending *e, size_t b, uint64_t *stub)
{
    mh_site *site = e->site;
    if (site->stub && site->stub_hook == e->hook) {
        *stub = site->stub;
        return 0;
    }
    mh_island_chunk chunk;
    int err = mh_island_reserve(e->at, MH_UNDO_STUB_MAX, &chunk);
    if (!err && !mh_arch_near_reaches(e->at + b, chunk.addr)) {
        mh_island_release(&chunk);
        err = ENOMEM;
    }
    if (err)
        return fail(e, err, e->at, e->avail, "cannot map the undo stub near the function: %s",
                    strerror(err));
    uint8_t buf[MH_UNDO_STUB_MAX];
    size_t len = mh_undo_stub_build((const uint8_t *)(uintptr_t)e->at, b, chunk.addr, e->hook,
                                    buf);
    mh_island_shrink(&chunk, len);
    err = mh_island_commit(&chunk, buf, len);
    if (err) {
        mh_island_release(&chunk);
        return fail(e, err, e->at, e->avail, "cannot make the undo stub executable: %s",
                    strerror(err));
    }
    site->stub = chunk.addr;
    site->stub_hook = e->hook;
    *stub = chunk.addr;
    return 0;
}

/* Beside a thread that blocks SIGTRAP the barrier is a two-byte "jmp .",
 * which would cut a one-byte first instruction: step over the entry's
 * pushes and put the 5-byte jump after them, to an undo stub.  The window
 * [b, b+5) lies inside the 12-byte one, so that plan's trampoline (and its
 * checks: no call returning inside, no branch back into it) serves; its
 * map, shifted by b, tells the handlers where a thread stopped at +k
 * continues (docs/design/live-patching.md). */
static int shift_past_pushes(pending *e, memhook_bistro_patch *p)
{
    mh_site *site = e->site;
    if (!site->tramp[1])
        return fail(e, EAGAIN, e->at, e->avail, "a thread blocks SIGTRAP (an int3 would kill "
                    "it) and the first instruction is one byte long; stepping over it needs "
                    "the 12-byte window's trampoline, and this function has none");
    int b = push_run(site, (const uint8_t *)(uintptr_t)e->at);
    if (b <= 0)
        return fail(e, EAGAIN, e->at, e->avail, "a thread blocks SIGTRAP (an int3 would kill "
                    "it) and the entry does not start with at most %d one-byte pushes "
                    "followed by a longer instruction, so no spin barrier fits",
                    MH_PUSH_RUN_MAX);
    uint64_t stub = 0;
    int err = undo_stub(e, (size_t)b, &stub);
    if (err)
        return err;
    p->at = e->at + (uint64_t)b;
    p->dest = stub;
    p->tramp = site->tramp[1];
    memset(p->map, MH_PLAN_NO_BOUNDARY, sizeof p->map);
    memcpy(p->map, site->map[1] + b, MH_PLAN_MAP - (size_t)b);
    return 0;
}

/* Step 3: the jump's bytes, and the signal handlers' record of the site
 * (where a thread stopped in the window continues) before it is written. */
static int place_jump(pending *e)
{
    memhook_bistro_patch *p = calloc(1, sizeof *p);
    if (!p)
        return fail(e, ENOMEM, e->at, e->avail, "out of memory");
    e->p = p;
    p->site = e->site;
    p->hook = e->hook;
    p->jump_size = e->size;
    p->at = e->at;
    p->tramp = e->tramp;
    memcpy(p->map, e->plan.map, MH_PLAN_MAP);
    int err;
    if (e->spin && e->size == MH_ARCH_NEAR_JUMP && e->plan.map[1] != MH_PLAN_NO_BOUNDARY)
        err = shift_past_pushes(e, p); /* the stub jumps on to the hook */
    else
        err = jump_destination(e, &p->dest);
    if (err)
        return err;
    mh_patch_jump_build(p->at, p->dest, e->size, p->bytes);
    err = mh_trap_register(p->at, p->tramp, e->size, p->map,
                           mh_arch_jump_has_interior(e->size) ? p->dest : 0);
    if (err)
        return fail(e, err, e->at, e->avail, "too many patch sites");
    return 0;
}

/* The one failure exit of an entry: give back what it holds (an
 * uncommitted island, the patch record, a published *original) and answer
 * its request.  A trampoline already committed stays with its site. */
static void give_up(pending *e, int err)
{
    if (e->chunk_open)
        mh_island_release(&e->chunk);
    e->chunk_open = false;
    if (e->published)
        __atomic_store_n(e->req->original, e->previous, __ATOMIC_RELEASE);
    e->published = false;
    free(e->p);
    e->p = NULL;
    e->req->err = err;
    refuse(e->req->why, sizeof e->req->why, &e->ti, e->fail_at, e->fail_avail, "%s", e->reason);
}

/* Step 4a: *original is published before the jump goes live, so a hook
 * that calls through the very variable passed as `original` never sees it
 * unset.  It gets the widest trampoline (see ensure_wide). */
static mh_poke publish_original(pending *e)
{
    void **original = e->req->original;
    e->previous = __atomic_load_n(original, __ATOMIC_RELAXED);
    uint64_t tramp = e->site->tramp[1] ? e->site->tramp[1] : e->site->tramp[0];
    __atomic_store_n(original, (void *)(uintptr_t)tramp, __ATOMIC_RELEASE);
    e->published = true;
    const memhook_bistro_patch *p = e->p;
    bool interior = false;
    for (int k = 1; k < p->jump_size; k++)
        interior |= p->map[k] != MH_PLAN_NO_BOUNDARY;
    return (mh_poke){.at = p->at, .bytes = p->bytes, .len = (size_t)p->jump_size,
                     .interior = interior, .boundary1 = p->map[1] != MH_PLAN_NO_BOUNDARY};
}

/* Step 4b: every prepared jump is written in one live-write pass; a
 * written one makes its patch live. */
static size_t publish(pending *e, mh_poke *pk, const size_t *idx, size_t np, pid_t blocker)
{
    mh_text_poke_batch(pk, np, blocker);
    size_t done = 0;
    for (size_t k = 0; k < np; k++) {
        pending *x = &e[idx[k]];
        if (pk[k].err) {
            give_up(x, fail(x, pk[k].err, x->at, x->avail, "%s", pk[k].why));
            continue;
        }
        x->site->live = x->p;
        x->req->patch = x->p;
        done++;
    }
    return done;
}

static size_t install_locked(memhook_bistro_request *req, size_t n)
{
    pending *e = calloc(n ? n : 1, sizeof *e);
    mh_poke *pk = calloc(n ? n : 1, sizeof *pk);
    size_t *idx = calloc(n ? n : 1, sizeof *idx);
    if (!e || !pk || !idx) {
        for (size_t i = 0; i < n; i++) {
            req[i].err = ENOMEM;
            snprintf(req[i].why, sizeof req[i].why, "bistro: out of memory");
        }
        free(e);
        free(pk);
        free(idx);
        return 0;
    }
    size_t np = 0;
    pid_t blocker = mh_text_poke_trap_blocker();
    for (size_t i = 0; i < n; i++) {
        req[i].patch = NULL;
        req[i].err = 0;
        req[i].why[0] = '\0';
        pending *x = &e[i];
        x->req = &req[i];
        x->spin = blocker != 0;
        int err = plan_target(x);
        if (!err)
            err = place_trampoline(x);
        if (!err)
            err = place_jump(x);
        if (err) {
            give_up(x, err);
            continue;
        }
        pk[np] = publish_original(x);
        idx[np++] = i;
    }
    size_t done = publish(e, pk, idx, np, blocker);
    free(e);
    free(pk);
    free(idx);
    return done;
}

static bool bad_request(const memhook_bistro_request *r)
{
    return !r->target || !r->hook || !r->original ||
           (r->jump_size != 0 && r->jump_size != MH_ARCH_NEAR_JUMP &&
            r->jump_size != MH_ARCH_FAR_JUMP);
}

size_t memhook_bistro_install_batch(memhook_bistro_request *req, size_t n)
{
    if (!req)
        return 0;
    pthread_mutex_lock(&g_lock);
    /* Bad requests are answered here; the rest go through one pass. */
    size_t done = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && !bad_request(&req[i]))
            continue;
        done += install_locked(req + start, i - start);
        if (i < n) {
            req[i].patch = NULL;
            req[i].err = EINVAL;
            snprintf(req[i].why, sizeof req[i].why,
                     "bistro: bad argument (target %p, hook %p, jump_size %d)", req[i].target,
                     req[i].hook, req[i].jump_size);
        }
        start = i + 1;
    }
    pthread_mutex_unlock(&g_lock);
    return done;
}

int memhook_bistro_install(void *target, void *hook, int jump_size, void **original,
                           memhook_bistro_patch **out, char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = '\0';
    if (!out) {
        if (why && why_len)
            snprintf(why, why_len, "bistro: bad argument (out is NULL)");
        return EINVAL;
    }
    memhook_bistro_request r = {.target = target, .hook = hook, .jump_size = jump_size,
                                .original = original};
    memhook_bistro_install_batch(&r, 1);
    if (why && why_len)
        snprintf(why, why_len, "%s", r.why);
    if (r.err == 0)
        *out = r.patch;
    return r.err;
}

/* ---- remove ---------------------------------------------------------------- */

size_t memhook_bistro_remove_batch(memhook_bistro_patch **patches, int *errs, size_t n)
{
    if (!patches || !errs)
        return 0;
    pthread_mutex_lock(&g_lock);
    mh_poke *pk = calloc(n ? n : 1, sizeof *pk);
    size_t *idx = calloc(n ? n : 1, sizeof *idx);
    size_t np = 0, done = 0;
    for (size_t i = 0; i < n; i++) {
        memhook_bistro_patch *patch = patches[i];
        mh_site *site = patch ? patch->site : NULL;
        if (!pk || !idx) {
            errs[i] = ENOMEM;
        } else if (!site || site->live != patch) {
            errs[i] = EINVAL;
        } else if (memcmp((const void *)(uintptr_t)patch->at, patch->bytes,
                          (size_t)patch->jump_size) != 0) {
            /* Someone wrote over our jump (another hooking library):
             * restoring would break theirs. */
            errs[i] = EBUSY;
        } else {
            bool form = mh_arch_jump_has_interior(patch->jump_size);
            errs[i] = mh_trap_register(patch->at, patch->tramp, patch->jump_size, patch->map,
                                       form ? patch->dest : 0);
            if (errs[i] == 0) {
                /* The far jump has a boundary inside where a thread may stand. */
                pk[np] = (mh_poke){.at = patch->at, .bytes = site->orig + (patch->at - site->at),
                                   .len = (size_t)patch->jump_size, .interior = form};
                idx[np++] = i;
            }
        }
    }
    mh_text_poke_batch(pk, np, 0);
    for (size_t k = 0; k < np; k++) {
        size_t i = idx[k];
        errs[i] = pk[k].err;
        if (pk[k].err == 0) {
            patches[i]->site->live = NULL;
            free(patches[i]);
            done++;
        }
    }
    free(pk);
    free(idx);
    pthread_mutex_unlock(&g_lock);
    return done;
}

int memhook_bistro_remove(memhook_bistro_patch *patch)
{
    if (!patch)
        return EINVAL;
    int err = EINVAL;
    memhook_bistro_remove_batch(&patch, &err, 1);
    return err;
}

int memhook_bistro_patch_jump_size(const memhook_bistro_patch *patch)
{
    return patch ? patch->jump_size : 0;
}

/* Read without the lock: a patch record lives until a successful remove,
 * which its owner would have made itself. */
int memhook_bistro_patch_intact(const memhook_bistro_patch *patch)
{
    return patch != NULL &&
           memcmp((const void *)(uintptr_t)patch->at, patch->bytes, (size_t)patch->jump_size) == 0;
}
