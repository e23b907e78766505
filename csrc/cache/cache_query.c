/*
 * cache_query.c - memhook_query and its batch forms (the contract is in
 * memhook.h), and the testing entry points of a private cache.
 *
 * A query reads the published snapshot and answers from it where the hooks
 * vouch; otherwise it asks the driver - only one the process has loaded and
 * initialised - and remembers a CUDA answer as a region if nothing was
 * queued meanwhile (an event applied between the driver's answer and the
 * write may be the FREE of that very range).
 *
 * Why a query never waits for a writer.  Before it reads, the map must
 * hold every event published before the query began (a pointer another
 * thread allocated and handed over; this thread's own allocation).  Where
 * the queue's consumer lock and the cache's writer seat are free, the query
 * puts the pending events in the order and publishes them itself (work,
 * not a wait: trylocks only).  Where another thread holds either - a drain
 * in progress, which may have begun before an event the query needs - the
 * query does not wait for it: it reads what the map lacks from the lanes'
 * counts, with no lock (each lane's published count against the count the
 * cache stored once it published that lane's events: mh_queue_unapplied_get).
 *   - Nothing: the map is up to date.
 *   - Only this thread's own events (read-your-writes): they are read from
 *     its lane (its current segment, which the consumer never retires) and
 *     laid over the map's answer.  They come after every event the map
 *     holds (a lane is put in the order in its own order), so the last one
 *     that covers [ptr, ptr+len) decides; one that cuts the answer's extent
 *     partly sends the query to the driver.  An allocation answered so gets
 *     the alloc_id the feed will give it: its event's identity.
 *   - Another thread's events: where none touches the answer's extent, as
 *     their producers' span summaries say (mh_cache_look_holds, which the
 *     pointer-attribute answers share), the map's answer stands; else the
 *     driver answers, as the truth for every pointer the hooks would have
 *     told the cache about (with no driver, the map's, origin UNKNOWN).
 * Rejected: waiting (bounded or not) for the drain - the query's latency
 * would be the drain's; reading other threads' lanes without the lock -
 * their retired segments are recycled or unmapped under the reader.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "queue.h"

#include "memhook_internal/api.h"

/* Process-wide, as the driver it reaches: set once by csrc/cuda/. */
static _Atomic mh_cache_driver_fn g_driver;

void mh_cache_set_driver(mh_cache_driver_fn fn)
{
    atomic_store_explicit(&g_driver, fn, memory_order_release);
}

static bool host_vouched(mh_cache *c)
{
    return (mh_cache_period(c) & 1u) && mh_cache_coverage(c);
}

static inline int check_args(const void *ptr, size_t len, const memhook_region *out, uint64_t *end)
{
    if (out == NULL || out->struct_size < MEMHOOK_REGION_MIN_SIZE)
        return -EINVAL;
    uint64_t p = (uint64_t)(uintptr_t)ptr, n = len ? len : 1;
    if (n > UINT64_MAX - p)
        return -EOVERFLOW;
    *end = p + n;
    return 0;
}

static inline void fill(memhook_region *out, int type, int device, uint64_t base, uint64_t size,
                        uint64_t alloc_id, int origin)
{
    /* (every field this version knows; a larger struct's tail is the
     * caller's) */
    out->mem_type = type;
    out->device = device;
    out->base = base;
    out->size = size;
    out->alloc_id = alloc_id;
    out->origin = origin;
    out->reserved0 = 0;
}

static void fill_found(memhook_region *out, const mh_found_region *f, int origin)
{
    fill(out, f->r.type, f->r.device, f->r.start, f->r.end - f->r.start, f->r.alloc_id, origin);
}

/* Remember a driver answer (a writer's seat only if free: never waits). */
static void remember(mh_cache *c, const mh_driver_answer *d, uint64_t since)
{
    if (d->size == 0 || d->base + d->size < d->base || !mh_cache_write_begin(c, false))
        return;
    if (mh_cache_generation(c) == since) {
        mh_found_region f;
        uint64_t keep = 0;
        int k = mh_cache_classify(c, d->base, d->base + d->size, &f);
        if (k == MH_FOUND_IN && f.r.start == d->base && f.r.end == d->base + d->size &&
            f.r.type == d->type) {
            keep = f.r.alloc_id;
            if (f.r.origin == MEMHOOK_ORIGIN_DRIVER && f.r.period == mh_cache_period(c) &&
                f.r.device == d->device) {
                mh_cache_write_end(c);  /* already remembered as such */
                return;
            }
        }
        mh_cache_op(c, &(mh_op){.start = d->base, .end = d->base + d->size, .alloc_id = keep,
                                .kind = MH_OP_ASSIGN, .device = (int16_t)d->device,
                                .type = (uint8_t)d->type, .origin = MEMHOOK_ORIGIN_DRIVER});
    }
    mh_cache_write_end(c);
}

/* ---- how the map stands for a query ---- */

/* What the map holds of the calling thread's own events (another
 * thread's: view.look.others, settled per answer by others_settled). */
enum standing {
    UP_TO_DATE,   /* all of them */
    OWN_PENDING,  /* all but its latest (own[0..nown)) */
    BEHIND,       /* its latest, which cannot be read from its lane */
};

typedef struct view {
    enum standing standing;  /* of the calling thread's own events */
    mh_cache_look look;      /* look.others: another thread's may be missing */
    const memhook_event *own;
    size_t nown;
    uint64_t own_id;  /* own[0]'s identity: the alloc_id the feed will give it */
} view;

/* mh_cache_look_begin past its inline test: the pending events were put in
 * the order (`fed`: else another thread holds the consumer lock) but not
 * all published; publish them, if the seat is free, else read from the
 * lanes' counts what the map lacks.  Never waits. */
bool mh_cache_look_behind(mh_cache *c, mh_cache_look *look, bool fed)
{
    if (fed && mh_cache_publish_deferred(c, false))
        return true;
    mh_queue_unapplied u;
    mh_queue_unapplied_get(&u);
    look->own_from = u.own_from;
    look->own_to = u.own_to;
    look->others = u.foreign;
    /* (after the counts, before the map: see mh_cache_look_untouched) */
    look->version = mh_cache_version(c);
    return false;
}

/* The producers' summaries are read after the map: a lane's `cached` read
 * now may count events published into a newer map than the one read.  A
 * map is published before its version moves and the counts are stored
 * after (region_map.c), so a version unchanged since look_begin means
 * every count read here is of the map read or an older one. */
bool mh_cache_look_untouched(mh_cache *c, const mh_cache_look *look, uint64_t lo, uint64_t hi,
                             bool own)
{
    if (own && look->own_from < look->own_to) {
        /* The calling thread's own, read from its lane, each exactly (as
         * own_say reads them).  Unreadable there: they may touch it. */
        uint64_t id;
        const memhook_event *e = mh_queue_own_events(look->own_from, look->own_to, &id);
        if (e == NULL)
            return false;
        for (uint64_t i = 0; i < look->own_to - look->own_from; i++) {
            mh_op o;
            if (!mh_cache_event_op(&e[i], &o))
                continue;
            if (o.kind == MH_OP_DEMOTE_AT)
                o.end = o.start + 1;  /* (the base of what it frees) */
            else if (o.kind != MH_OP_ASSIGN && o.kind != MH_OP_REMOVE)
                return false;  /* a context reset, the driver unloaded */
            if (o.start < hi && lo < o.end)
                return false;
        }
    }
    return (!look->others || !mh_queue_unapplied_touch(lo, hi)) &&
           mh_cache_version(c) == look->version;
}

static void look_up(mh_cache *c, view *v)
{
    if (mh_cache_look_begin(c, &v->look))
        v->look = (mh_cache_look){0, 0, 0, false};
    v->own = NULL;
    v->nown = 0;
    v->standing = UP_TO_DATE;
    if (v->look.own_from < v->look.own_to) {
        v->own = mh_queue_own_events(v->look.own_from, v->look.own_to, &v->own_id);
        v->nown = (size_t)(v->look.own_to - v->look.own_from);
        v->standing = v->own != NULL ? OWN_PENDING : BEHIND;
    }
}

/* Whether the map (and the calling thread's own events, laid over it)
 * answers as of the call: no other thread's event it lacks touches the
 * extent the answer reports - [p, end), the region found, the own event
 * that decides. */
static bool others_settled(mh_cache *c, const view *v, uint64_t p, uint64_t end, int k,
                           const mh_found_region *f, const mh_op *own)
{
    if (!v->look.others)
        return true;
    uint64_t lo = p, hi = end;
    if (k == MH_FOUND_IN || k == MH_FOUND_RUN) {
        lo = f->r.start < lo ? f->r.start : lo;
        hi = f->r.end > hi ? f->r.end : hi;
    }
    if (own != NULL) {
        lo = own->start < lo ? own->start : lo;
        hi = own->end > hi ? own->end : hi;
    }
    return mh_cache_look_holds(c, &v->look, lo, hi, false);
}

/* What the calling thread's own pending events say of [p, end), after what
 * the map says (k, f): they all come after every event the map holds (a
 * lane's events are put in the order in its order, after what was put
 * there before).  SAY_MAP: none of them touches the answer's extent;
 * SAY_REGION / SAY_HOLE: the last of those that do covers [p, end) whole
 * (*op); SAY_UNSURE: one cuts it (a partial unmap, a context reset, a
 * FREE whose allocation is not known): the driver decides. */
enum say { SAY_MAP, SAY_REGION, SAY_HOLE, SAY_UNSURE };

static enum say own_say(mh_cache *c, const view *v, uint64_t p, uint64_t end, int k,
                        const mh_found_region *f, mh_op *op)
{
    enum say say = SAY_MAP;
    uint64_t lo = p, hi = end;  /* the extent the answer reports */
    if (k == MH_FOUND_IN || k == MH_FOUND_RUN) {
        lo = f->r.start;
        hi = f->r.end;
    }
    for (size_t i = 0; i < v->nown; i++) {
        mh_op o;
        if (!mh_cache_event_op(&v->own[i], &o))
            continue;
        if (o.kind == MH_OP_DEMOTE_AT) {
            /* A FREE of unknown size: of the allocation at its address, as
             * this thread's own events and then the map have it. */
            bool found = false;
            for (size_t j = i; j-- > 0 && !found;) {
                mh_op a;
                if (mh_cache_event_op(&v->own[j], &a) && a.kind == MH_OP_ASSIGN &&
                    a.start == o.start) {
                    o.end = a.end;
                    found = true;
                }
            }
            mh_found_region g;
            if (!found && mh_cache_classify(c, o.start, o.start + 1, &g) == MH_FOUND_IN &&
                g.r.start == o.start) {
                o.end = g.r.end;
                found = true;
            }
            if (!found)
                return SAY_UNSURE;
            o.kind = MH_OP_REMOVE;
        }
        if (o.kind != MH_OP_ASSIGN && o.kind != MH_OP_REMOVE)
            return SAY_UNSURE;  /* a context reset, the driver unloaded */
        o.alloc_id = v->own_id + i;  /* (the id the feed gives it: its identity) */
        if (o.end <= lo || o.start >= hi)
            continue;  /* (leaves the answer as it is) */
        if (o.start <= p && end <= o.end) {
            say = o.kind == MH_OP_ASSIGN ? SAY_REGION : SAY_HOLE;
            *op = o;
            lo = say == SAY_REGION ? o.start : p;
            hi = say == SAY_REGION ? o.end : end;
        } else if (o.end > p && o.start < end) {
            return SAY_UNSURE;  /* covers part of [p, end) */
        } else if (say != SAY_HOLE) {
            return SAY_UNSURE;  /* cuts the allocation the answer reports */
        }
    }
    return say;
}

/* The answer for [p, end) from the cache - with the calling thread's own
 * pending events over it - and from the driver where the hooks do not
 * vouch.  `use_driver` false: the cache alone (memhook_query_cached). */
static void answer(mh_cache *c, uint64_t p, uint64_t end, const view *v, bool use_driver,
                   memhook_region *out)
{
    mh_found_region f;
    int k = mh_cache_classify(c, p, end, &f);
    mh_op op = {0};
    enum say say = v->standing == OWN_PENDING ? own_say(c, v, p, end, k, &f, &op) : SAY_MAP;
    bool fresh = v->standing != BEHIND && say != SAY_UNSURE &&
                 others_settled(c, v, p, end, k, &f, say == SAY_REGION ? &op : NULL);
    if (say == SAY_REGION) {
        /* (recorded in the current period: install and uninstall apply
         * what is pending before they change it) */
        if ((fresh && (mh_cache_period(c) & 1u) && op.type != MEMHOOK_MEMORY_UNKNOWN) ||
            !use_driver) {
            fill(out, op.type, op.device, op.start, op.end - op.start, op.alloc_id,
                 use_driver ? MEMHOOK_ORIGIN_HOOKS : MEMHOOK_ORIGIN_UNKNOWN);
            return;
        }
        fresh = false;
    } else if (say == SAY_HOLE) {
        if ((fresh && f.host_vouched) || !use_driver) {
            fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0,
                 f.host_vouched ? MEMHOOK_ORIGIN_HOOKS : MEMHOOK_ORIGIN_UNKNOWN);
            return;
        }
        fresh = false;
        k = MH_FOUND_ABSENT;
    }
    if (fresh || !use_driver) {
        if ((k == MH_FOUND_IN || k == MH_FOUND_RUN) && f.vouched) {
            fill_found(out, &f, MEMHOOK_ORIGIN_HOOKS);
            return;
        }
        if (k == MH_FOUND_ABSENT && f.host_vouched) {
            fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0, MEMHOOK_ORIGIN_HOOKS);
            return;
        }
        if (k == MH_FOUND_MIXED && f.host_vouched) {
            fill(out, MEMHOOK_MEMORY_UNKNOWN, -1, p, end - p, 0, MEMHOOK_ORIGIN_HOOKS);
            return;
        }
    }
    bool may_remember = v->standing == UP_TO_DATE && !v->look.others;
    mh_cache_driver_fn driver = use_driver ? atomic_load_explicit(&g_driver,
                                                                  memory_order_acquire)
                                           : NULL;
    uint64_t since = mh_cache_generation(c);
    mh_driver_answer d;
    if (driver != NULL && driver(p, &d) == 0) {
        if (!d.known) {
            /* Not CUDA's.  A range that starts in host memory and runs into
             * a region is still mixed. */
            if (k == MH_FOUND_MIXED)
                fill(out, MEMHOOK_MEMORY_UNKNOWN, -1, p, end - p, 0, MEMHOOK_ORIGIN_DRIVER);
            else
                fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0, MEMHOOK_ORIGIN_DRIVER);
            return;
        }
        /* (only while the hooks record: without them no FREE would ever
         * undo the region, so the driver is simply asked again) */
        bool kept = may_remember && (mh_cache_period(c) & 1u);
        if (kept)
            remember(c, &d, since);
        if (d.base <= p && end <= d.base + d.size) {
            /* The remembered region's id, when it was remembered. */
            mh_found_region g;
            uint64_t id = 0;
            if (kept && mh_cache_classify(c, p, end, &g) == MH_FOUND_IN &&
                g.r.start == d.base && g.r.end == d.base + d.size && g.r.type == d.type)
                id = g.r.alloc_id;
            fill(out, d.type, d.device, d.base, d.size, id, MEMHOOK_ORIGIN_DRIVER);
        } else {
            fill(out, MEMHOOK_MEMORY_UNKNOWN, -1, p, end - p, 0, MEMHOOK_ORIGIN_DRIVER);
        }
        return;
    }
    /* Nobody vouches (no driver to ask, or the cache alone was asked):
     * what the cache has, unverified.  (Never a wait for another thread's
     * drain: readers wait for no writer.) */
    if (k == MH_FOUND_IN || k == MH_FOUND_RUN)
        fill_found(out, &f, MEMHOOK_ORIGIN_UNKNOWN);
    else if (k == MH_FOUND_MIXED)
        fill(out, MEMHOOK_MEMORY_UNKNOWN, -1, p, end - p, 0, MEMHOOK_ORIGIN_UNKNOWN);
    else
        fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0, MEMHOOK_ORIGIN_UNKNOWN);
}

static const view g_up_to_date = {UP_TO_DATE, {0, 0, 0, false}, NULL, 0, 0};

/* ---- the common case: a vouched answer, remembered per thread ----
 *
 * A transport asks about the same buffers again and again.  Each thread
 * keeps its last two answers the hooks vouched for outright (mh_cache_hit:
 * a vouched region, or a gap while host memory is vouched; two, for a
 * caller that sends from device memory and receives into host memory in
 * turn) with the extent each holds for and the cache's version it was read
 * at; while the version has not moved, a query inside that extent is
 * answered from it with no snapshot, no epoch and no search.  It is used only where the map holds
 * every event published before the query (the view is UP_TO_DATE), and it
 * is the map's answer, so it is the same for every thread and for the
 * cached forms.  A signal handler may query on the thread (the cached
 * forms are async-signal-safe): the memo is written under a sequence
 * count of its own thread (odd while written) - a handler that finds it
 * odd neither reads nor writes it, and a read that the count shows was
 * overwritten meanwhile (a handler's write) is not used. */
static __thread struct memo {
    unsigned seq;
    unsigned last;  /* the entry written last */
    mh_hit hit[2];
    uint64_t seen[4];  /* mh_cache_hit_kept: the extents its last two
                        * searches found, newest first (memo_wanted) */
} t_memo __attribute__((tls_model("initial-exec")));

static inline void fill_hit(memhook_region *out, const mh_hit *h, uint64_t p, uint64_t end)
{
    if (h->gap)
        fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0, MEMHOOK_ORIGIN_HOOKS);
    else
        fill(out, h->type, h->device, h->lo, h->hi - h->lo, h->alloc_id, MEMHOOK_ORIGIN_HOOKS);
}

/* The memo's entry that holds [p, end) at the cache's current version,
 * into *h.  The extents are tested first, before the count: a ring of
 * buffers asked in turn misses every time, and pays four compares for it,
 * no copy.  (What they read is only a guess: the count is read after
 * them and before the copy, and the copy's extent is tested again.) */
/* Which of the thread's two memo entries holds [p, end), or -1: in a
 * fixed order, not the newest first (the compares then read the thread's
 * block at constant offsets; two entries both holding [p, end) at the
 * current version hold the same answer).  Checked again under the count
 * by its callers. */
static inline int memo_entry(uint64_t p, uint64_t end)
{
    if (t_memo.hit[0].lo <= p && end <= t_memo.hit[0].hi)
        return 0;
    if (t_memo.hit[1].lo <= p && end <= t_memo.hit[1].hi)
        return 1;
    return -1;
}

static inline bool memo_get(mh_cache *c, uint64_t p, uint64_t end, mh_hit *h)
{
    int e = memo_entry(p, end);
    if (e < 0)
        return false;
    unsigned seq = t_memo.seq;
    atomic_signal_fence(memory_order_acquire);
    if (seq & 1u)
        return false;
    *h = t_memo.hit[e];
    atomic_signal_fence(memory_order_acquire);
    /* (read again after the copy: a handler may have rewritten it) */
    return t_memo.seq == seq && h->lo <= p && end <= h->hi &&
           h->version == mh_cache_version(c);
}

/* The memo's answer for [p, end), if it holds one.  memo_get's steps, but
 * the entry is checked in place and then written into out, not copied
 * whole first (that needs more registers than the callers' fast path has
 * free); the count, read again last, says whether a handler rewrote it
 * anywhere between.  A miss leaves out to the caller, who then writes it
 * whole. */
static inline bool memo_answer(mh_cache *c, uint64_t p, uint64_t end, memhook_region *out)
{
    int e = memo_entry(p, end);
    if (e < 0)
        return false;
    unsigned seq = t_memo.seq;
    atomic_signal_fence(memory_order_acquire);
    if (seq & 1u)
        return false;
    const mh_hit *m = &t_memo.hit[e];
    if (!(m->lo <= p && end <= m->hi && m->version == mh_cache_version(c)))
        return false;
    if (m->gap)
        fill(out, MEMHOOK_MEMORY_HOST, -1, p, end - p, 0, MEMHOOK_ORIGIN_HOOKS);
    else
        fill(out, m->type, m->device, m->lo, m->hi - m->lo, m->alloc_id, MEMHOOK_ORIGIN_HOOKS);
    atomic_signal_fence(memory_order_acquire);
    /* (read again after: a handler may have rewritten it meanwhile) */
    return t_memo.seq == seq;
}

/* The entry a search writes into (the older one), the memo marked as being
 * written; or *own, where the thread's own write is under way (a handler
 * on the thread: the memo is left alone).  memo_put_end closes it. */
static inline mh_hit *memo_put_begin(mh_hit *own, unsigned *seq)
{
    unsigned s = t_memo.seq, e = (t_memo.last ^ 1u) & 1u;
    *seq = s;
    if (s & 1u)
        return own;
    t_memo.seq = s + 1;
    atomic_signal_fence(memory_order_seq_cst);
    t_memo.last = e;
    return &t_memo.hit[e];
}

/* A miss (`ok` false) leaves the entry empty: an extent no range fits in. */
static inline void memo_put_end(mh_hit *h, const mh_hit *own, unsigned seq, bool ok)
{
    if (!ok)
        h->hi = 0;
    if (h != own) {
        atomic_signal_fence(memory_order_seq_cst);
        t_memo.seq = seq + 2;
    }
}

/* The map's vouched answer for [p, end) into out, remembered: the search
 * writes it into the memo in place and out is filled from there, field by
 * field (a copy through the stack would read whole what was written a
 * field at a time: a store-forwarding stall each).  A miss leaves the memo
 * empty and out untouched. */
static inline bool hit_kept(mh_cache *c, uint64_t p, uint64_t end, memhook_region *out)
{
    unsigned seq;
    mh_hit own;
    mh_hit *h = memo_put_begin(&own, &seq);
    bool ok = mh_cache_hit(c, p, end, h);
    if (ok)
        fill_hit(out, h, p, end);
    memo_put_end(h, &own, seq, ok);
    return ok;
}

/* Why the memo's answer is the map's, for a caller that found the map
 * holding every event published before its call, however other threads
 * free and allocate meanwhile.  An entry is the map's answer at the
 * version it was read at (mh_cache_hit reads the version first); every
 * change an answer may depend on - a publish (the FREE of the range, its
 * reuse), an install period, the coverage, a lost write - bumps the
 * version after the change is visible and before the publisher clears
 * `deferred` (region_map.c, mh_cache_write_end).  A thread's FREE that
 * returned before this call began is in its lane; the caller's test that
 * the map holds it (the queue fed and nothing deferred) saw that publish
 * finished, so its bump too: the entry's version is older and the map
 * is searched again.  Where another thread holds the drain the caller's
 * test fails and the memo is not asked.  A publish racing with this call
 * is concurrent with it: the map's older answer is one it may give. */
static __attribute__((noinline)) bool hit_searched(mh_cache *c, uint64_t p, uint64_t end,
                                                   mh_hit *out);

/* Whether [p, end) lies in an extent one of the thread's last two searches
 * found (t_memo.seen): a pointer, or its region, asked again.  Only then
 * is a search's answer remembered - a ring of buffers asked in turn, which
 * misses a two-entry memo every time, pays these compares and the note of
 * the extent (mh_cache_hit_noted) instead of the memo's write; a pointer
 * asked again is remembered at its second search, two asked in turn
 * (A B A B) at theirs.  A hint only: a handler that rewrites it meanwhile
 * changes what is remembered, never an answer. */
static inline bool memo_wanted(uint64_t p, uint64_t end)
{
    return (t_memo.seen[0] <= p && end <= t_memo.seen[1]) ||
           (t_memo.seen[2] <= p && end <= t_memo.seen[3]);
}

bool mh_cache_hit_kept(mh_cache *c, uint64_t p, uint64_t end, mh_hit *out)
{
    /* (the searches out of line and called last: no frame here) */
    if (memo_get(c, p, end, out))
        return true;
    if (memo_wanted(p, end))
        return hit_searched(c, p, end, out);
    return mh_cache_hit_noted(c, p, end, out, t_memo.seen);
}

/* *h, the map's vouched answer, into the memo's older entry, field by
 * field as mh_cache_hit wrote it (a copy of the whole would read wide what
 * was written narrow: a store-forwarding stall).  Not from a handler
 * inside the thread's own write (the count odd): the memo is left alone. */
static inline void memo_keep(const mh_hit *h)
{
    unsigned seq = t_memo.seq, e = (t_memo.last ^ 1u) & 1u;
    if (seq & 1u)
        return;
    t_memo.seq = seq + 1;
    atomic_signal_fence(memory_order_seq_cst);
    t_memo.last = e;
    mh_hit *m = &t_memo.hit[e];
    m->version = h->version;
    m->lo = h->lo;
    m->hi = h->hi;
    m->alloc_id = h->alloc_id;
    m->device = h->device;
    m->type = h->type;
    m->gap = h->gap;
    m->origin = h->origin;
    atomic_signal_fence(memory_order_seq_cst);
    t_memo.seq = seq + 2;
}

/* mh_cache_hit into out, remembered where it is vouched (a miss leaves
 * the memo as it was). */
static __attribute__((noinline)) bool hit_searched(mh_cache *c, uint64_t p, uint64_t end,
                                                   mh_hit *out)
{
    if (!mh_cache_hit(c, p, end, out))
        return false;
    memo_keep(out);
    return true;
}

/* The answer for [p, end) past the memo: the map's, where it is up to date
 * and vouched (then remembered), else answer()'s.  (Out of line: the
 * memo's path stays short.) */
static __attribute__((noinline)) void answer_past_memo(mh_cache *c, uint64_t p, uint64_t end,
                                                       const view *v, bool use_driver,
                                                       memhook_region *out)
{
    if (v->standing != UP_TO_DATE || v->look.others || !hit_kept(c, p, end, out))
        answer(c, p, end, v, use_driver, out);
}

static __attribute__((noinline)) void query_behind(mh_cache *c, uint64_t p, uint64_t end,
                                                   memhook_region *out)
{
    view v;
    look_up(c, &v);
    answer_past_memo(c, p, end, &v, true, out);
}

/* memhook_query past its fast path; `fresh`: the fast path found the map
 * holding every event published before the call (its memo missed). */
static __attribute__((noinline)) int query_slow(const void *ptr, size_t len,
                                                memhook_region *out, bool fresh)
{
    uint64_t end;
    int rc = check_args(ptr, len, out, &end);
    if (rc != 0)
        return rc;
    mh_cache *c = mh_cache_process();
    uint64_t p = (uint64_t)(uintptr_t)ptr;
    if (fresh)
        answer_past_memo(c, p, end, &g_up_to_date, true, out);
    else if (!mh_cache_current(c))
        query_behind(c, p, end, out);
    else if (!memo_answer(c, p, end, out))
        answer_past_memo(c, p, end, &g_up_to_date, true, out);
    return 0;
}

int memhook_query(const void *ptr, size_t len, memhook_region *out)
{
    /* The common case - the queue caught up, nothing deferred, the range
     * in the thread's memo - makes no call, so it keeps no frame: the
     * rest is one jump away. */
    uint64_t end;
    if (check_args(ptr, len, out, &end) != 0)
        return query_slow(ptr, len, out, false);
    mh_cache *c = mh_cache_process();
    bool fresh = mh_queue_caught_up() && mh_cache_nothing_deferred(c);
    if (fresh && memo_answer(c, (uint64_t)(uintptr_t)ptr, end, out))
        return 0;
    return query_slow(ptr, len, out, fresh);
}

int memhook_query_cached(const void *ptr, size_t len, memhook_region *out)
{
    uint64_t end;
    int rc = check_args(ptr, len, out, &end);
    if (rc != 0)
        return rc;
    mh_cache *c = mh_cache_process();
    uint64_t p = (uint64_t)(uintptr_t)ptr;
    if (!memo_answer(c, p, end, out))
        answer_past_memo(c, p, end, &g_up_to_date, false, out);
    return 0;
}

int memhook_query_batch(const void *const *ptrs, size_t count, memhook_region *out)
{
    if (count == 0)
        return 0;
    if (ptrs == NULL || out == NULL || out->struct_size < MEMHOOK_REGION_MIN_SIZE)
        return -EINVAL;
    size_t stride = out->struct_size;
    mh_cache *c = mh_cache_process();
    view v;
    look_up(c, &v);
    /* (the map's vouched answers a chunk at a time, searched side by side;
     * the rest one by one) */
    enum { CHUNK = 64 };
    uint64_t xs[CHUNK];
    mh_hit hits[CHUNK];
    bool ok[CHUNK];
    for (size_t at = 0; at < count; at += CHUNK) {
        size_t m = count - at < CHUNK ? count - at : CHUNK, valid = 0;
        while (valid < m && (uint64_t)(uintptr_t)ptrs[at + valid] != UINT64_MAX) {
            xs[valid] = (uint64_t)(uintptr_t)ptrs[at + valid];
            valid++;
        }
        if (v.standing == UP_TO_DATE && !v.look.others)
            mh_cache_hits(c, xs, valid, hits, ok);
        else
            memset(ok, 0, sizeof ok);
        for (size_t i = 0; i < valid; i++) {
            memhook_region *o = (memhook_region *)((char *)out + (at + i) * stride);
            o->struct_size = stride;
            uint64_t p = xs[i];
            const mh_hit *h = &hits[i];
            if (!ok[i])
                answer(c, p, p + 1, &v, true, o);
            else if (h->gap)
                fill(o, MEMHOOK_MEMORY_HOST, -1, p, 1, 0, MEMHOOK_ORIGIN_HOOKS);
            else
                fill(o, h->type, h->device, h->lo, h->hi - h->lo, h->alloc_id,
                     MEMHOOK_ORIGIN_HOOKS);
        }
        if (valid < m) {  /* (the byte at 2^64 - 1 has no end) */
            ((memhook_region *)((char *)out + (at + valid) * stride))->struct_size = stride;
            return -EOVERFLOW;
        }
    }
    return 0;
}

static int types_of(const uint64_t *ptrs, size_t count, uint8_t *types, bool live)
{
    if (count == 0)
        return 0;
    if (ptrs == NULL || types == NULL)
        return -EINVAL;
    mh_cache *c = mh_cache_process();
    view v = g_up_to_date;
    if (live)
        look_up(c, &v);
    bool fresh = v.standing == UP_TO_DATE && !v.look.others;
    bool host_ok = live && fresh && host_vouched(c);
    /* (one pass answers it all where the map is up to date and vouched) */
    if (mh_cache_types(c, ptrs, count, types, host_ok) == 0 && live && fresh)
        return 0;
    for (size_t i = 0; i < count; i++) {
        uint8_t t = types[i];
        uint8_t held = t == MH_TYPE_ABSENT ? MEMHOOK_MEMORY_HOST : (uint8_t)(t & 0x3fu);
        if (!live || ptrs[i] == UINT64_MAX) {
            types[i] = held;  /* what the cache holds */
        } else if (fresh && t < MH_TYPE_UNVOUCHED) {
            /* a vouched region: its type stands */
        } else if (t == MH_TYPE_ABSENT && host_ok) {
            types[i] = MEMHOOK_MEMORY_HOST;
        } else {
            memhook_region r = {.struct_size = sizeof r};
            answer(c, ptrs[i], ptrs[i] + 1, &v, true, &r);
            types[i] = (uint8_t)r.mem_type;
        }
    }
    return 0;
}

int memhook_query_types(const uint64_t *ptrs, size_t count, uint8_t *types)
{
    return types_of(ptrs, count, types, true);
}

int memhook_query_types_cached(const uint64_t *ptrs, size_t count, uint8_t *types)
{
    return types_of(ptrs, count, types, false);
}

/* ---- testing ---- */

memhook_testing_cache *memhook_testing_cache_new(void)
{
    return (memhook_testing_cache *)mh_cache_new();
}

void memhook_testing_cache_free(memhook_testing_cache *cache)
{
    mh_cache_destroy((mh_cache *)cache);
}

void memhook_testing_cache_apply(memhook_testing_cache *cache, const memhook_event *events,
                                 size_t count)
{
    mh_cache *c = (mh_cache *)cache;
    if (c == NULL || (events == NULL && count != 0))
        return;
    mh_cache_write_begin(c, true);
    mh_cache_feed_events(c, events, NULL, count, false);
    mh_cache_write_end(c);
}

void memhook_testing_cache_remember(memhook_testing_cache *cache, uint64_t base, uint64_t size,
                                    int mem_type, int device)
{
    mh_cache *c = (mh_cache *)cache;
    if (c == NULL || mem_type < 0 || mem_type > MEMHOOK_MEMORY_UNKNOWN)
        return;
    mh_driver_answer d = {.known = 1, .type = mem_type, .device = device < -1 ? -1 : device,
                          .base = base, .size = size};
    remember(c, &d, mh_cache_generation(c));
}

void memhook_testing_cache_hooks(memhook_testing_cache *cache, int installed, int coverage)
{
    mh_cache *c = (mh_cache *)cache;
    if (c == NULL)
        return;
    mh_cache_period_next(c, installed != 0);
    mh_cache_set_coverage(c, coverage != 0);
}

int memhook_testing_cache_lookup(memhook_testing_cache *cache, uint64_t ptr, uint64_t len,
                                 memhook_region *out)
{
    uint64_t end;
    int rc = check_args((const void *)(uintptr_t)ptr, len, out, &end);
    if (rc != 0 || cache == NULL)
        return rc ? rc : -EINVAL;
    mh_found_region f;
    int k = mh_cache_classify((mh_cache *)cache, ptr, end, &f);
    if (k == MH_FOUND_IN || k == MH_FOUND_RUN)
        fill_found(out, &f, f.vouched ? MEMHOOK_ORIGIN_HOOKS : MEMHOOK_ORIGIN_UNKNOWN);
    else
        fill(out, k == MH_FOUND_MIXED ? MEMHOOK_MEMORY_UNKNOWN : MEMHOOK_MEMORY_HOST, -1, ptr,
             end - ptr, 0, MEMHOOK_ORIGIN_UNKNOWN);
    return k;
}

size_t memhook_testing_cache_regions(memhook_testing_cache *cache, memhook_region *out,
                                     size_t capacity)
{
    mh_cache *c = (mh_cache *)cache;
    if (c == NULL)
        return 0;
    /* (a test's call: it may allocate, unlike the queries) */
    mh_region *tmp = capacity && out != NULL ? malloc(capacity * sizeof(mh_region)) : NULL;
    size_t n = mh_cache_regions(c, tmp, tmp != NULL ? capacity : 0);
    for (size_t i = 0; tmp != NULL && i < n && i < capacity; i++) {
        out[i].struct_size = sizeof(memhook_region);
        fill(&out[i], tmp[i].type, tmp[i].device, tmp[i].start, tmp[i].end - tmp[i].start,
             tmp[i].alloc_id, tmp[i].origin);
    }
    free(tmp);
    return n;
}

void memhook_testing_cache_types(memhook_testing_cache *cache, const uint64_t *ptrs, size_t count,
                                 uint8_t *types)
{
    if (cache == NULL || ptrs == NULL || types == NULL)
        return;
    mh_cache_types((mh_cache *)cache, ptrs, count, types, false);
    for (size_t i = 0; i < count; i++)
        types[i] = types[i] == MH_TYPE_ABSENT ? MEMHOOK_MEMORY_HOST : (uint8_t)(types[i] & 0x3fu);
}

void memhook_testing_cache_stage(memhook_testing_cache *cache, const memhook_event *events,
                                 size_t count)
{
    if (cache != NULL && (events != NULL || count == 0))
        mh_cache_feed_events((mh_cache *)cache, events, NULL, count, true);
}

void memhook_testing_cache_commit(memhook_testing_cache *cache, int deferrable)
{
    if (cache == NULL)
        return;
    mh_cache_stage_commit((mh_cache *)cache, deferrable != 0);
    if (!deferrable)
        mh_cache_publish_deferred((mh_cache *)cache, true);
}

size_t memhook_testing_cache_deferred(memhook_testing_cache *cache)
{
    return cache == NULL ? 0
                         : atomic_load_explicit(&mh_cache_head_of((mh_cache *)cache)->deferred,
                                                memory_order_acquire);
}

int memhook_testing_cache_search_steps(memhook_testing_cache *cache)
{
    return cache == NULL ? -EINVAL : mh_cache_search_steps((mh_cache *)cache);
}

int memhook_testing_cache_driver_alloc_at(memhook_testing_cache *cache, uint64_t addr,
                                          memhook_region *out)
{
    mh_region r;
    if (cache == NULL || out == NULL || out->struct_size < MEMHOOK_REGION_MIN_SIZE ||
        !mh_cache_driver_alloc_at((mh_cache *)cache, addr, &r))
        return 0;
    fill(out, r.type, r.device, r.start, r.end - r.start, r.alloc_id, r.origin);
    return 1;
}
