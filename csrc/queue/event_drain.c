/*
 * event_drain.c - the consumer side of the event queue: merging the lanes
 * into one order, the trace's tee and trim, statistics.
 *
 * Consumers serialise on a mutex no producer ever takes.  Each lane is in
 * its thread's order; the drain interleaves them and numbers the result:
 * that is the event order (`seq`).
 *
 * The order is causal per address range, not by time: one coarse tick
 * holds thousands of events, so time ("the hint") decides only where
 * nothing else does.  Producers write down links (L) and marker epochs
 * (E), and publish in causal order (P); the drain hands a lane's head out
 * only when nothing holds it (rules 1-3b: its link, a marker, an earlier
 * overlapping FREE pending in another lane) and breaks a WEAK cycle at its
 * weakest hold.  A bounded run cuts each lane at its first look, so it
 * ends however fast producers record; a background read stays
 * DRAIN_BEHIND events off a lane being written.
 * docs/design/causal-merge.md has the rules, the proof sketch and the
 * case they miss.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "event_lane.h"
#include "free_fill.h"
#include "log.h"
#include "queue.h"
#include "memhook_internal/api.h"

/* Process-wide like the queue it serves: consumers serialise here.  A leaf
 * of the lock order (csrc/core/mh_lock_order.h). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* Under g_lock: the next seq to hand out, and the last bounded run's
 * number. */
static uint64_t g_next_seq;
static uint64_t g_run;
/* The sum of every lane's `consumed`, for memhook_events_wait_backlog
 * (which does not take g_lock); written under g_lock by lanes_tidy. */
static _Atomic uint64_t g_consumed_total;

/* Process-wide like the queue it watches: where drained batches are copied
 * to (the trace streamer's socket), or NULL.  Set by csrc/trace/. */
static _Atomic mh_queue_sink_fn g_sink;
/* (queue.h) A query is up to date when a call numbered after its own
 * start is done, or when the flag holds no news and every call begun is
 * done (mh_queue_feed_run, mh_queue_caught_up). */
struct mh_queue_calls mh_queue_calls;

static uint64_t call_begin(void) { return atomic_fetch_add(&mh_queue_calls.begun, 1) + 1; }
static void call_done(uint64_t n) { atomic_store(&mh_queue_calls.done, n); }

/* Process-wide, as the queue it reads: the cache's feed (csrc/cache/),
 * set once at load. */
static _Atomic mh_queue_feed_fn g_feed;
static _Atomic mh_queue_mark_fn g_feed_mark;
static void (*_Atomic g_feed_commit)(void);
static _Atomic mh_queue_extent_fn g_extent;
/* memhook_events_drain was called: the trace keeps its events for us. */
static _Atomic bool g_consumer_seen;
/* mh_queue_trim dropped events: a consumer that starts later has not seen
 * every allocation, so the hooks stop vouching for coverage (install.c).
 * Process-wide, as the queue it describes; inherited by a fork child, whose
 * address space holds the same unseen allocations. */
static _Atomic bool g_trimmed;

bool mh_queue_trimmed(void) { return atomic_load_explicit(&g_trimmed, memory_order_acquire); }

/* ---- walking the lanes (g_lock held) ---- */

enum { HEAD_UNKNOWN, HEAD_READY, HEAD_BLOCKED };

typedef struct cursor {
    mh_lane *lane;
    mh_lane_seg *seg;
    uint64_t at;    /* lane index of the next event */
    uint64_t end;   /* one past the last event this cursor may take */
    uint64_t seen;  /* one past the last event visible (pass G) */
    /* The head (the event at `at`), while merging: */
    int state;             /* HEAD_* */
    mh_lane *wait_lane;    /* HEAD_BLOCKED: an event it waits for */
    uint64_t wait_index;
    uint64_t key;          /* its time in ns, the hint */
} cursor;

/* The segment holding lane index `at` (consumed <= at < published): the
 * lane's directory entry for it, the directory grown along the segments'
 * links where it does not reach that far yet (out of memory: a walk). */
static mh_lane_seg *lane_seg_of(mh_lane *l, uint64_t at)
{
    mh_lane_seg *s = l->read_seg;
    size_t k = (size_t)((at - s->first) / MH_LANE_SEG_SLOTS);
    if (k == 0)
        return s;
    if (k < l->dir.n)
        return l->dir.seg[k];
    if (k >= l->dir.cap) {
        size_t cap = l->dir.cap != 0 ? l->dir.cap : 64;
        while (cap <= k)
            cap *= 2;
        mh_lane_seg **grown = realloc(l->dir.seg, cap * sizeof *grown);
        if (grown == NULL) {
            for (; k > 0; k--)
                s = atomic_load_explicit(&s->next, memory_order_acquire);
            return s;
        }
        l->dir.seg = grown;
        l->dir.cap = cap;
    }
    if (l->dir.n == 0)
        l->dir.seg[l->dir.n++] = s;
    for (s = l->dir.seg[l->dir.n - 1]; l->dir.n <= k; l->dir.n++) {
        s = atomic_load_explicit(&s->next, memory_order_acquire);
        l->dir.seg[l->dir.n] = s;
    }
    return s;
}

static cursor cursor_at(mh_lane *l, uint64_t at, uint64_t end)
{
    return (cursor){.lane = l, .seg = lane_seg_of(l, at), .at = at, .end = end};
}

static memhook_event *cursor_event(cursor *c)
{
    while (c->at >= c->seg->first + MH_LANE_SEG_SLOTS)
        c->seg = atomic_load_explicit(&c->seg->next, memory_order_acquire);
    return &c->seg->slots[c->at - c->seg->first];
}

/* The event at lane index `at` (consumed <= at < published). */
static memhook_event *event_at(mh_lane *l, uint64_t at)
{
    cursor c = cursor_at(l, at, at + 1);
    return cursor_event(&c);
}

/* One cursor per lane, grown as lanes are added (consumer side: malloc is
 * fine here, no hook ever waits for this lock). */
static cursor *g_cursors;
static size_t g_cursor_cap;
/* Lanes by id (event_lane.h), for following links: lanes are never
 * unlinked, so an entry never goes stale. */
static mh_lane **g_by_id;
static size_t g_by_id_cap;

/* g_cursors with room for every lane listed now (lanes added later wait
 * for the next drain), and every listed lane in g_by_id; NULL when out of
 * memory.  One read of the list's head for both walks: producers push new
 * lanes at the head meanwhile (a lane made between two reads of it may
 * have an id past what the first walk sized g_by_id for), and what follows
 * a head read once never changes (lanes are never unlinked). */
static cursor *cursors(size_t *cap)
{
    size_t want = 0;
    uint32_t top = 0;
    mh_lane *const head = atomic_load_explicit(&mh_lanes, memory_order_acquire);
    for (mh_lane *l = head; l != NULL; l = l->next) {
        want++;
        top = l->cid > top ? l->cid : top;
    }
    if (want > g_cursor_cap) {
        cursor *c = realloc(g_cursors, want * 2 * sizeof *c);
        if (c == NULL)
            return NULL;
        g_cursors = c;
        g_cursor_cap = want * 2;
    }
    if (top >= g_by_id_cap) {
        size_t n = (size_t)top * 2 + 16;
        mh_lane **b = realloc(g_by_id, n * sizeof *b);
        if (b == NULL)
            return NULL;
        memset(b + g_by_id_cap, 0, (n - g_by_id_cap) * sizeof *b);
        g_by_id = b;
        g_by_id_cap = n;
    }
    for (mh_lane *l = head; l != NULL; l = l->next)
        if (l->cid != 0)
            g_by_id[l->cid] = l;
    *cap = g_cursor_cap;
    return g_cursors;
}

static mh_lane *lane_by_id(uint64_t id)
{
    uint64_t lane = id >> MH_LANE_INDEX_BITS;
    return lane < g_by_id_cap ? g_by_id[lane] : NULL;
}

/* Where a reader starts in a lane: the drain after what the tee handed
 * out (it hands those out first, by seq), the tee after what it read. */
static uint64_t lane_unread(const mh_lane *l)
{
    return l->teed > l->consumed ? l->teed : l->consumed;
}

/* Set a private flag bit in a published slot (g_lock held).  A query of
 * the slot's own thread may read its flags meanwhile, with an atomic load
 * (mh_queue_own_events): an atomic store, a plain move as `|=` is. */
static inline void slot_flag(memhook_event *e, uint32_t bit)
{
    __atomic_store_n(&e->flags, __atomic_load_n(&e->flags, __ATOMIC_RELAXED) | bit,
                     __ATOMIC_RELAXED);
}

/* ---- pending markers (g_lock held): few, and rarely any ---- */

typedef struct marker {
    mh_lane *lane;
    uint64_t index;
    uint32_t epoch;
} marker;
static marker *g_markers;
static size_t g_nmarkers, g_markers_cap;
/* Markers the drain has come across (listed, or handed out before any look
 * listed them): while it equals mh_marker_epoch (the markers begun), no
 * marker waits unseen in the lanes, and looks need not read events to find
 * one. */
static uint32_t g_markers_seen;

static uint32_t epoch_of(uint32_t flags)
{
    return (flags & MH_EVENT_EPOCH_MASK) >> MH_EVENT_EPOCH_SHIFT;
}

/* a was read before b was made (serial arithmetic on the epoch's bits). */
static bool epoch_before(uint32_t a, uint32_t b)
{
    uint32_t d = (b - a) & ((1u << MH_EVENT_EPOCH_BITS) - 1);
    return d != 0 && d < (1u << (MH_EVENT_EPOCH_BITS - 1));
}

static void marker_add(mh_lane *l, uint64_t index, uint32_t flags)
{
    if (g_nmarkers == g_markers_cap) {
        size_t n = g_markers_cap * 2 + 8;
        marker *m = realloc(g_markers, n * sizeof *m);
        if (m == NULL) {
            mh_error("event queue: out of memory for a marker; its order is not kept");
            return;
        }
        g_markers = m;
        g_markers_cap = n;
    }
    g_markers[g_nmarkers++] = (marker){l, index, epoch_of(flags)};
}

static void marker_remove(mh_lane *l, uint64_t index)
{
    for (size_t i = 0; i < g_nmarkers; i++)
        if (g_markers[i].lane == l && g_markers[i].index == index) {
            g_markers[i] = g_markers[--g_nmarkers];
            return;
        }
}

/* ---- which pending ALLOCs have a FREE of their own pending (g_lock
 * held): an ALLOC with none is "open" - the last of its range for now, so
 * it must come after every earlier event there (rule 3,
 * docs/design/causal-merge.md) ---- */

/* Multisets of 64-bit keys (nonzero), counted: open addressing, deletion by
 * shifting back (no tombstones). */
#define COUNTED_WHERE 3
typedef struct counted {
    uint64_t key;  /* 0: empty */
    uint64_t count;
    struct {
        mh_lane *lane;  /* NULL: free; more than COUNTED_WHERE: not all are here */
        uint64_t index;
    } where[COUNTED_WHERE];
} counted;
typedef struct counted_set {
    counted *slots;
    size_t cap, n;
} counted_set;

/* The addresses of the visible FREEs not handed out: which ALLOCs have
 * their own FREE pending.  (A FREE names the address its ALLOC returned;
 * an earlier lifetime's FREE at the same address is out before rule 3
 * asks - rule 1 holds an ALLOC behind it - where the address chain links
 * them.) */
static counted_set g_closer_addrs;
/* The addresses of the visible ALLOCs not handed out: where a FREE whose
 * link was lost finds its ALLOC while it is pending (fill_lost). */
static counted_set g_opener_addrs;

/* A full mix (murmur3's finaliser): identities differ in their low bits
 * and addresses in their middle ones, and a linear-probe table wants
 * every bit to count. */
static size_t counted_home(uint64_t key, size_t cap)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static counted *counted_find(const counted_set *s, uint64_t key)
{
    if (s->cap == 0 || key == 0)
        return NULL;
    for (size_t i = counted_home(key, s->cap);; i = (i + 1) & (s->cap - 1)) {
        if (s->slots[i].key == key)
            return &s->slots[i];
        if (s->slots[i].key == 0)
            return NULL;
    }
}

static bool counted_grow(counted_set *s)
{
    size_t cap = s->cap != 0 ? s->cap * 2 : 1024;
    counted *c = calloc(cap, sizeof *c);
    if (c == NULL)
        return false;
    for (size_t k = 0; k < s->cap; k++) {
        if (s->slots[k].key == 0)
            continue;
        size_t i = counted_home(s->slots[k].key, cap);
        while (c[i].key != 0)
            i = (i + 1) & (cap - 1);
        c[i] = s->slots[k];
    }
    free(s->slots);
    s->slots = c;
    s->cap = cap;
    return true;
}

static void counted_add(counted_set *s, uint64_t key, mh_lane *lane, uint64_t index)
{
    counted *c = counted_find(s, key);
    if (key == 0)
        return;
    if (c != NULL) {
        c->count++;
        for (unsigned k = 0; k < COUNTED_WHERE; k++)
            if (c->where[k].lane == NULL) {
                c->where[k].lane = lane;
                c->where[k].index = index;
                break;
            }
        return;
    }
    if ((s->n + 1) * 2 > s->cap && !counted_grow(s)) {
        mh_error("event queue: out of memory for the drain's closer set; an ALLOC may be "
                 "held for its own FREE until the next drain");
        return;
    }
    size_t i = counted_home(key, s->cap);
    while (s->slots[i].key != 0)
        i = (i + 1) & (s->cap - 1);
    s->slots[i] = (counted){.key = key, .count = 1};
    s->slots[i].where[0].lane = lane;
    s->slots[i].where[0].index = index;
    s->n++;
}

static void counted_remove(counted_set *s, uint64_t key, const mh_lane *lane, uint64_t index)
{
    counted *c = counted_find(s, key);
    if (c == NULL)
        return;
    for (unsigned k = 0; k < COUNTED_WHERE; k++)
        if (c->where[k].lane == lane && c->where[k].index == index)
            c->where[k].lane = NULL;
    if (--c->count != 0)
        return;
    size_t i = (size_t)(c - s->slots), mask = s->cap - 1;
    for (size_t j = (i + 1) & mask; s->slots[j].key != 0; j = (j + 1) & mask) {
        size_t h = counted_home(s->slots[j].key, s->cap);
        /* Move j back into the hole at i unless its home lies in (i, j]. */
        if (((j - h) & mask) >= ((j - i) & mask)) {
            s->slots[i] = s->slots[j];
            i = j;
        }
    }
    s->slots[i] = (counted){0};
    s->n--;
}

/* Pending FREEs that name a range of their own (cuMemUnmap over several
 * maps): rare.  One closes every earlier ALLOC of its own lane it
 * overlaps (the maps it unmaps with the one its link names). */
typedef struct ranged {
    const mh_lane *lane;
    uint64_t index, start, end;
} ranged;
static ranged *g_ranged;
static size_t g_nranged, g_ranged_cap;

static void ranged_add(const mh_lane *l, uint64_t index, const memhook_event *e)
{
    if (g_nranged == g_ranged_cap) {
        size_t n = g_ranged_cap * 2 + 8;
        ranged *r = realloc(g_ranged, n * sizeof *r);
        if (r == NULL)
            return;  /* (then its maps look open: held, never out of order) */
        g_ranged = r;
        g_ranged_cap = n;
    }
    uint64_t end = e->address + (e->size != 0 ? e->size : 1);
    g_ranged[g_nranged++] = (ranged){l, index, e->address, end > e->address ? end : UINT64_MAX};
}

static void ranged_remove(const mh_lane *l, uint64_t index)
{
    for (size_t i = 0; i < g_nranged; i++)
        if (g_ranged[i].lane == l && g_ranged[i].index == index) {
            g_ranged[i] = g_ranged[--g_nranged];
            return;
        }
}

/* A ranged FREE later in lane l overlaps [lo, hi). */
static bool ranged_closes(const mh_lane *l, uint64_t after, uint64_t lo, uint64_t hi)
{
    for (size_t i = 0; i < g_nranged; i++)
        if (g_ranged[i].lane == l && g_ranged[i].index > after && g_ranged[i].start < hi &&
            lo < g_ranged[i].end)
            return true;
    return false;
}

/* ---- a look: one snapshot of the lanes and the merge over it ---- */

typedef struct look {
    cursor *cur;
    size_t n;      /* cursors: lanes with events visible and not handed out */
    uint64_t run;  /* the bounded run, or 0 (the tee) */
    bool rules;    /* more than one lane has events pending: the rules apply */
} look;

/* The first event of lane l not handed out yet, during the look. */
static uint64_t lane_front(const look *lk, const mh_lane *l)
{
    return l->look_cursor >= 0 ? lk->cur[l->look_cursor].at : lane_unread(l);
}

static bool id_out(const look *lk, uint64_t id)
{
    mh_lane *l = lane_by_id(id);
    return l != NULL && (id & MH_LANE_INDEX_MASK) < lane_front(lk, l);
}

/* Past the run's cut (events the run may not hand out). */
static bool past_cut(const look *lk, const mh_lane *l, uint64_t index)
{
    return lk->run != 0 && (l->run != lk->run || index >= l->run_g);
}

static bool same_clock(uint32_t a, uint32_t b) { return ((a ^ b) & MH_EVENT_COARSE) == 0; }

/* Index the FREEs of cursor o's lane up to its first event that came after
 * `key` by the same clock (`clock`: an event's flags): a FREE past that
 * one cannot hold an ALLOC of that time (rule 3), so a lane's backlog is
 * indexed a tick at a time, not all at once. */
static void index_upto(cursor *o, uint64_t key, uint32_t clock)
{
    mh_lane *l = o->lane;
    uint64_t from = l->indexed > o->at ? l->indexed : o->at;
    if (from >= o->seen)
        return;
    cursor s = cursor_at(l, from, o->seen);
    for (; s.at < s.end; s.at++) {
        const memhook_event *x = cursor_event(&s);
        if (same_clock(x->flags, clock) && mh_clock_ns_of(x) > key)
            break;  /* (by time only: an epoch check would stop at a marker) */
        if (x->kind != MEMHOOK_EVENT_FREE || x->address == 0 ||
            (__atomic_load_n(&x->result, __ATOMIC_ACQUIRE) & MH_RESULT_REFUSED))
            continue;  /* (a free the driver refused ended no lifetime) */
        uint64_t end = x->address + (x->size != 0 ? x->size : 1);
        mh_range_item item = {.start = x->address, .end = end > x->address ? end : UINT64_MAX,
                              .index = s.at, .link = x->seq, .key = mh_clock_ns_of(x),
                              .flags = x->flags};
        if (!mh_range_insert(&l->frees, &item))
            mh_error("event queue: out of memory indexing a FREE; its order is not checked");
    }
    l->indexed = s.at;
}

/* The earliest indexed FREE of lane l overlapping [lo, hi) that rule 3
 * weighs for ALLOC e: when e's link is the last event at its own address
 * (MH_EVENT_CHAIN), not one starting there (rule 1 orders those: each is
 * before the link or after e) - so a pool's thousands of FREEs of one
 * address cost a step, not a walk. */
static bool first_free(const mh_lane *l, const memhook_event *e, uint64_t lo, uint64_t hi,
                       mh_range_item *f)
{
    if (l->frees.count == 0)
        return false;
    uint64_t x = e->address;
    if (!(e->flags & MH_EVENT_CHAIN))
        return mh_range_first(&l->frees, lo, hi, 0, UINT64_MAX, 0, f);
    mh_range_item below, above;
    bool b = mh_range_first(&l->frees, lo, hi, 0, x, 0, &below);
    bool a = x != UINT64_MAX && mh_range_first(&l->frees, lo, hi, x + 1, UINT64_MAX, 0, &above);
    if (!a && !b)
        return false;
    *f = !a || (b && below.index < above.index) ? below : above;
    return true;
}

/* List the markers among the lanes' visible events, if a marker was begun
 * that the drain has not come across (rare: markers are). */
static void find_markers(look *lk)
{
    bool look_for = atomic_load_explicit(&mh_marker_epoch, memory_order_acquire) != g_markers_seen;
    for (size_t i = 0; i < lk->n; i++) {
        cursor *o = &lk->cur[i];
        mh_lane *l = o->lane;
        uint64_t from = l->marks_at > o->at ? l->marks_at : o->at;
        if (look_for && from < o->seen) {
            cursor s = cursor_at(l, from, o->seen);
            for (; s.at < s.end; s.at++)
                if (cursor_event(&s)->flags & MH_EVENT_MARKER) {
                    marker_add(l, s.at, cursor_event(&s)->flags);
                    g_markers_seen++;
                }
        }
        l->marks_at = o->seen;
    }
}

/* Where a background read of a lane stops (look_open's `behind`): short of
 * the producer's write position g by DRAIN_BEHIND events, at an even index.
 * The lines a producer writes next are the ones after the last it
 * published; a reader that takes everything up to g reads the line pair
 * (the adjacent-line prefetcher's 128 bytes) and, streaming, the lines
 * after it, and the producer's next stores must take them back from the
 * reader's core.  16 events: a KiB, past the pair and the first lines a
 * stream prefetcher runs ahead. */
#define DRAIN_BEHIND 16u

static uint64_t behind_point(uint64_t start, uint64_t g)
{
    return g >= start + DRAIN_BEHIND ? (g - DRAIN_BEHIND) & ~1ull : start;
}

/* The cache's record of a driver answer at addr (memory allocated before
 * the hooks and asked about since): what a FREE of addr is sized from when
 * neither its pending ALLOC nor the drain's own record (free_fill.c, which
 * asks this only while no FREE of addr was handed out since the last feed)
 * knows it. */
static bool fill_extent(uint64_t addr, mh_fill_rec *out)
{
    mh_queue_extent_fn extent = atomic_load_explicit(&g_extent, memory_order_acquire);
    return extent != NULL && extent(addr, &out->size, &out->mem_type, &out->device);
}

/* The lane whose events carry identity `id`, for reading a linked event:
 * a lane listed since this drain's walk of the list (a thread whose first
 * event is the ALLOC a FREE links to) is not in g_by_id yet, but the link
 * names a published event of it all the same. */
static mh_lane *lane_of_link(uint64_t id)
{
    mh_lane *l = lane_by_id(id);
    if (l != NULL)
        return l;
    for (l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL; l = l->next)
        if (l->cid != 0 && l->cid == id >> MH_LANE_INDEX_BITS)
            return l;
    return NULL;
}

/* Size a FREE recorded with its address only (queue.h, MH_DEVICE_FILL) as
 * it becomes visible to the rules, which weigh its range (rule 3).  Its
 * ALLOC was published before it (P), so it is pending now or handed out.
 * First its link: the address chain's word, the last event at its address
 * when the FREE was recorded - its ALLOC, unless another address hashing
 * to the same word wrote there since (or the allocation was made before
 * install).  A linked ALLOC still pending is read wherever it is
 * published, not only within what this look saw of its lane: the FREE's
 * thread read the link after the ALLOC's publication, and this drain read
 * the FREE's lane after the FREE's, so the ALLOC is written and visible
 * here even where its lane's count was read before it.  An ALLOC of
 * another marker epoch than the FREE's, or one flagged MH_EVENT_UNPAIRED,
 * is not believed: a marker between them (a gap in the hooks above all)
 * may hide the free of that allocation and another made at its address
 * unseen.  A linked event already handed out sizes the FREE from the
 * drain's record of what it handed out (free_fill.c).  False: the link
 * named no event or a pending one that is not its ALLOC (fill_lost then
 * sizes it, once the look has listed every visible event). */
static bool fill_from_link(memhook_event *e)
{
    mh_lane *const linked = e->seq != 0 ? lane_of_link(e->seq) : NULL;
    if (linked == NULL)
        return false;
    uint64_t ti = e->seq & MH_LANE_INDEX_MASK;
    if (ti < lane_unread(linked)) {
        /* Handed out: its ALLOC's record is free_fill.c's (or, made before
         * install, the cache's record of a driver answer). */
        mh_fill_rec rec;
        mh_fill_apply(e, mh_fill_find(e->address, &rec, fill_extent) ? &rec : NULL);
        return true;
    }
    if (ti >= atomic_load_explicit(&linked->published, memory_order_acquire))
        return false;
    const memhook_event *a = event_at(linked, ti);
    if (a->kind != MEMHOOK_EVENT_ALLOC || a->address != e->address || a->size == 0 ||
        epoch_of(a->flags) != epoch_of(e->flags) || (a->flags & MH_EVENT_UNPAIRED))
        return false;
    mh_fill_rec rec = {a->size, a->mem_type, a->device};
    mh_fill_apply(e, &rec);
    return true;
}

/* Whether the pending ALLOC a can be the one the FREE e (lane fl, index
 * fi, identity self) frees: at its address, of its epoch, not after it in
 * its own lane or by the same clock, and not an ALLOC that follows it (its
 * link names e: a later lifetime at the address). */
static bool could_free(const memhook_event *a, const mh_lane *al, uint64_t ai,
                       const memhook_event *e, const mh_lane *fl, uint64_t fi, uint64_t self)
{
    return a->kind == MEMHOOK_EVENT_ALLOC && a->address == e->address && a->size != 0 &&
           epoch_of(a->flags) == epoch_of(e->flags) && !(a->flags & MH_EVENT_UNPAIRED) &&
           (self == 0 || a->seq != self) && (al != fl || ai < fi) &&
           !(same_clock(a->flags, e->flags) && mh_clock_ns_of(a) > mh_clock_ns_of(e));
}

/* Size a FREE its link did not (fill_from_link), once the look has listed
 * every visible event in the closer and opener sets - a FREE met early in
 * the scan would otherwise miss an ALLOC or a FREE of a lane scanned after
 * it.  Exact or nothing, and nothing only where the order leaves a doubt:
 *  - another FREE of its address pending: which allocation each frees is
 *    not known here (an earlier lifetime's record may still be in
 *    free_fill.c's table, and sizing from it gave another allocation's
 *    size) - size unknown;
 *  - else one pending ALLOC that could be its own (could_free): that one -
 *    two, or more than the set lists: size unknown;
 *  - else its ALLOC was handed out (free_fill.c's record), or made before
 *    install and asked about since (the cache's record of that answer:
 *    fill_extent);
 *  - else memhook never knew the allocation (made before install, or before
 *    a gap, and never asked about): size unknown, which the cache resolves
 *    through the driver (docs/design/causal-merge.md). */
static void fill_lost(memhook_event *e, mh_lane *fl, uint64_t fi)
{
    uint64_t self = fl->cid != 0 ? (uint64_t)fl->cid << MH_LANE_INDEX_BITS | fi : 0;
    const counted *frees = counted_find(&g_closer_addrs, e->address);
    if (frees != NULL && frees->count > 1) {
        mh_fill_apply(e, NULL);
        return;
    }
    const counted *allocs = counted_find(&g_opener_addrs, e->address);
    if (allocs != NULL) {
        const memhook_event *own = NULL;
        unsigned found = 0, listed = 0;
        for (unsigned k = 0; k < COUNTED_WHERE; k++) {
            mh_lane *al = allocs->where[k].lane;
            if (al == NULL)
                continue;
            listed++;
            const memhook_event *a = event_at(al, allocs->where[k].index);
            if (could_free(a, al, allocs->where[k].index, e, fl, fi, self)) {
                own = a;
                found++;
            }
        }
        if (listed != allocs->count || found > 1) {
            mh_fill_apply(e, NULL);
            return;
        }
        if (found == 1) {
            mh_fill_rec rec = {own->size, own->mem_type, own->device};
            mh_fill_apply(e, &rec);
            return;
        }
    }
    mh_fill_rec rec;
    mh_fill_apply(e, mh_fill_find(e->address, &rec, fill_extent) ? &rec : NULL);
}

/* The FREEs of a look's scan that fill_from_link did not size, for
 * fill_lost after the scan (consumer side, grown as needed). */
static struct {
    struct {
        mh_lane *lane;
        uint64_t index;
    } *at;
    size_t n, cap;
} g_lost;

static bool lost_add(mh_lane *l, uint64_t index)
{
    if (g_lost.n == g_lost.cap) {
        size_t cap = g_lost.cap != 0 ? g_lost.cap * 2 : 64;
        void *at = realloc(g_lost.at, cap * sizeof *g_lost.at);
        if (at == NULL)
            return false;
        g_lost.at = at;
        g_lost.cap = cap;
    }
    g_lost.at[g_lost.n].lane = l;
    g_lost.at[g_lost.n].index = index;
    g_lost.n++;
    return true;
}

/* Where a lane's pending events lie: widened by [lo, hi). */
static void box_widen(mh_lane *l, uint64_t lo, uint64_t hi)
{
    if (l->box_lo >= l->box_hi) {
        l->box_lo = lo;
        l->box_hi = hi;
    } else {
        l->box_lo = lo < l->box_lo ? lo : l->box_lo;
        l->box_hi = hi > l->box_hi ? hi : l->box_hi;
    }
}

/* Tests only (tests/queue/fixtures/link_past_the_look.c, built with
 * MH_TEST_SEAMS): called as a look has read one lane's count, so that a
 * fixture can publish events between two lanes' reads - the window in
 * which a FREE is visible and its ALLOC, published before it, is not,
 * which a quiet machine opens in a few runs out of a hundred. */
#ifdef MH_TEST_SEAMS
MH_HIDDEN void (*mh_test_lane_read)(const mh_lane *l);
void (*mh_test_lane_read)(const mh_lane *l);
#define MH_TEST_SEAM_LANE_READ(l) (mh_test_lane_read != NULL ? mh_test_lane_read(l) : (void)0)
#else
#define MH_TEST_SEAM_LANE_READ(l) ((void)0)
#endif

/* Read every lane's `published` (G; first once more for H when fresh_h),
 * and open a cursor over each lane with events visible and not handed out.
 * `run_start`: this look's snapshot is a new run's cut.  `behind` (a
 * background reader: memhook_events_drain_background, the trace's tee):
 * H is the last look's G (one read of each count per call), and a lane
 * whose count moved since then - its producer is writing - is read only up
 * to behind_point; an idle lane (count unchanged) is read whole. */
static void look_open(look *lk, cursor *cur, size_t cap, uint64_t run, bool fresh_h,
                      bool run_start, bool behind)
{
    *lk = (look){.cur = cur, .run = run};
    if (fresh_h)
        for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
             l = l->next)
            l->seen = atomic_load_explicit(&l->published, memory_order_acquire);
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        uint64_t h = l->seen, start = lane_unread(l);
        uint64_t g = atomic_load_explicit(&l->published, memory_order_acquire);
        l->seen = g;
        l->look_cursor = -1;
        MH_TEST_SEAM_LANE_READ(l);
        if (run_start) {
            l->run = run;
            l->run_h = h;
            l->run_g = g;
        }
        if (g == start || lk->n == cap)
            continue;
        uint64_t end = h > start ? h : start;
        if (behind && g != h) {
            uint64_t stop = behind_point(start, g);
            end = end < stop ? end : stop;
        }
        if (run != 0) {
            uint64_t cut = l->run == run ? l->run_g : start;
            end = end < cut ? end : (cut > start ? cut : start);
        }
        cur[lk->n] = cursor_at(l, start, end);
        cur[lk->n].seen = g;
        cur[lk->n].state = HEAD_UNKNOWN;
        l->look_cursor = (long)lk->n++;
    }
    lk->rules = lk->n > 1;
    if (!lk->rules)
        return;
    mh_clock_prepare();
    find_markers(lk);
    /* Every newly visible FREE into the closer set (each event is looked at
     * once, whatever the backlog). */
    for (size_t i = 0; i < lk->n; i++) {
        mh_lane *l = cur[i].lane;
        uint64_t from = l->linked > cur[i].at ? l->linked : cur[i].at;
        if (from < cur[i].seen) {
            cursor s = cursor_at(l, from, cur[i].seen);
            for (; s.at < s.end; s.at++) {
                memhook_event *e = cursor_event(&s);
                /* (its range, before anything reads it; one its link does
                 * not size, after the scan) */
                if (e->kind == MEMHOOK_EVENT_FREE && e->device == MH_DEVICE_FILL &&
                    !fill_from_link(e) && !lost_add(l, s.at))
                    fill_lost(e, l, s.at);  /* (no memory for the list: now) */
                if (e->address != 0) {
                    uint64_t end = e->address + (e->size != 0 ? e->size : 1);
                    box_widen(l, e->address, end > e->address ? end : UINT64_MAX);
                }
                if (e->kind == MEMHOOK_EVENT_ALLOC && e->address != 0)
                    counted_add(&g_opener_addrs, e->address, l, s.at);
                if (e->kind == MEMHOOK_EVENT_ALLOC && e->seq != 0 && e->address != 0 &&
                    !(e->flags & MH_EVENT_CHAIN)) {
                    /* Its chain link's address, while the linked event can
                     * still be read (rule 3 leaves same-address FREEs to
                     * rule 1 then). */
                    mh_lane *t = lane_by_id(e->seq);
                    uint64_t ti = e->seq & MH_LANE_INDEX_MASK;
                    if (t != NULL && ti >= lane_unread(t) && ti < t->seen &&
                        event_at(t, ti)->address == e->address)
                        slot_flag(e, MH_EVENT_CHAIN);
                }
                if (e->kind != MEMHOOK_EVENT_FREE || e->address == 0)
                    continue;
                if (e->seq != 0 && !(e->flags & MH_EVENT_LINK_ALLOC)) {
                    /* A chain link (a recorded FREE) names its ALLOC if that
                     * is an ALLOC at this address: say so, while it can
                     * still be read. */
                    mh_lane *t = lane_by_id(e->seq);
                    uint64_t ti = e->seq & MH_LANE_INDEX_MASK;
                    if (t != NULL && ti >= lane_unread(t) && ti < t->seen) {
                        const memhook_event *a = event_at(t, ti);
                        if (a->kind == MEMHOOK_EVENT_ALLOC && a->address == e->address)
                            slot_flag(e, MH_EVENT_LINK_ALLOC);
                    }
                }
                counted_add(&g_closer_addrs, e->address, l, s.at);
                if (e->flags & MH_EVENT_RANGE)
                    ranged_add(l, s.at, e);
            }
        }
        l->linked = cur[i].seen;
    }
    for (size_t k = 0; k < g_lost.n; k++) {
        mh_lane *l = g_lost.at[k].lane;
        memhook_event *e = event_at(l, g_lost.at[k].index);
        fill_lost(e, l, g_lost.at[k].index);
        uint64_t end = e->address + (e->size != 0 ? e->size : 1);
        box_widen(l, e->address, end > e->address ? end : UINT64_MAX);
    }
    g_lost.n = 0;
}

/* The look is over: where each lane's readers stand now. */
static void look_close(look *lk, bool tee)
{
    for (size_t i = 0; i < lk->n; i++) {
        mh_lane *l = lk->cur[i].lane;
        if (lk->cur[i].at == lk->cur[i].seen && l->linked <= lk->cur[i].seen)
            l->box_lo = l->box_hi = 0;  /* nothing it saw is pending: start over */
        if (tee)
            l->teed = lk->cur[i].at;
        else
            l->consumed = l->teed = lk->cur[i].at;
        l->look_cursor = -1;
    }
}

/* How sure a hold is (causal-merge.md): a cycle is broken at its
 * weakest.  WEAK: a closed ALLOC by a FREE whose own ALLOC is pending (the
 * two lifetimes may be either way round); STRONG: by a FREE whose ALLOC is
 * out; OPEN: an open ALLOC by an earlier overlapping FREE; HARD: links and
 * markers. */
enum { HOLD_NONE, HOLD_WEAK, HOLD_STRONG, HOLD_OPEN, HOLD_HARD };

typedef struct hold {
    mh_lane *lane;  /* NULL: an event of a lane the drain does not know yet */
    uint64_t index;
    int strength;
} hold;

/* Called for each hold on a head; false stops the walk. */
typedef bool (*hold_fn)(const look *lk, const hold *h, void *arg);

/* Whether an event (flags, key) cannot have come before another (its
 * flags, key): its time is later by the same clock (both coarse or both
 * precise: causal either way, clock.c), or it read a later marker epoch
 * (the other read its epoch before that marker began: E in
 * causal-merge.md).  Events of one lane are in this order too, so the
 * first of a lane that is later, all after it are. */
static bool later(uint32_t flags, uint64_t key, uint32_t than_flags, uint64_t than_key)
{
    return (same_clock(flags, than_flags) && key > than_key) ||
           epoch_before(epoch_of(than_flags), epoch_of(flags));
}

/* How far rule 3b looks for an ALLOC before an ALLOC's own FREE. */
#define OWN_FREE_SCAN 512

/* Rule 3b for an ALLOC on [lo, hi) whose own FREE is lane fl's event fi;
 * false when fn said stop. */
static bool hold_3b(const look *lk, mh_lane *fl, uint64_t fi, uint64_t lo, uint64_t hi,
                    hold_fn fn, void *arg)
{
    cursor s = lk->cur[fl->look_cursor];
    for (uint64_t k = 0; s.at < fi && k < OWN_FREE_SCAN; s.at++, k++) {
        const memhook_event *x = cursor_event(&s);
        if (x->kind == MEMHOOK_EVENT_ALLOC && x->address != 0 && x->address < hi &&
            lo < x->address + (x->size != 0 ? x->size : 1)) {
            hold h = {fl, s.at, HOLD_STRONG};
            return fn(lk, &h, arg);
        }
    }
    return true;
}

/* A FREE recorded before its call, whose call has not returned, in a look
 * that owes nothing to the moment it began (a background drain, the tee):
 * left for a later look, which will know the result.  A run hands it out
 * as a free that succeeded (its producer then learns that: queue.h), so no
 * drain ever waits for a call; so does any look once its thread is gone
 * (killed in the call, or not this fork child's). */
static bool call_in_flight(const look *lk, const mh_lane *l, const memhook_event *e)
{
    return lk->run == 0 && e->kind == MEMHOOK_EVENT_FREE &&
           (__atomic_load_n(&e->result, __ATOMIC_ACQUIRE) & MH_RESULT_PENDING) &&
           atomic_load_explicit(&l->state, memory_order_acquire) == MH_LANE_OWNED;
}

/* Walk the holds on c's head (the rules: causal-merge.md). */
static void head_holds(const look *lk, cursor *c, hold_fn fn, void *arg)
{
    mh_lane *l = c->lane;
    memhook_event *e = cursor_event(c);
    uint64_t self = l->cid != 0 ? (uint64_t)l->cid << MH_LANE_INDEX_BITS | c->at : 0;
    /* A hold from past the run's cut cannot be one on an event from
     * before the run began (causal-merge.md, 'Runs and cuts'). */
    bool guaranteed = lk->run != 0 && l->run == lk->run && c->at < l->run_h;
    hold h;
    /* 0. a FREE whose call has not returned (queue.h, MH_RESULT_PENDING) */
    if (call_in_flight(lk, l, e)) {
        h = (hold){NULL, 0, HOLD_HARD};
        if (!fn(lk, &h, arg))
            return;
    }
    /* 1. the link */
    if (e->seq != 0) {
        mh_lane *t = lane_by_id(e->seq);
        uint64_t ti = e->seq & MH_LANE_INDEX_MASK;
        if (t == NULL || ti >= lane_front(lk, t)) {
            if (t != NULL && ti < t->seen && e->kind == MEMHOOK_EVENT_ALLOC &&
                event_at(t, ti)->address == e->address)
                slot_flag(e, MH_EVENT_CHAIN);
            h = (hold){t, ti, HOLD_HARD};
            if (!fn(lk, &h, arg))
                return;
        }
    }
    /* 2. markers */
    if (g_nmarkers != 0) {
        uint32_t epoch = epoch_of(e->flags);
        if (e->flags & MH_EVENT_MARKER) {
            for (size_t i = 0; i < lk->n; i++) {
                cursor *o = &lk->cur[i];
                if (o == c || o->at >= o->seen)
                    continue;
                if (epoch_before(epoch_of(cursor_event(o)->flags), epoch)) {
                    h = (hold){o->lane, o->at, HOLD_HARD};
                    if (!fn(lk, &h, arg))
                        return;
                }
            }
        } else {
            for (size_t i = 0; i < g_nmarkers; i++) {
                const marker *m = &g_markers[i];
                if (m->lane != l && !epoch_before(epoch, m->epoch)) {
                    h = (hold){m->lane, m->index, HOLD_HARD};
                    if (!fn(lk, &h, arg))
                        return;
                }
            }
        }
    }
    if (e->address == 0)
        return;
    uint64_t lo = e->address, hi = lo + (e->size != 0 ? e->size : 1);
    hi = hi > lo ? hi : UINT64_MAX;
    /* 3. an ALLOC, by other lanes' pending FREEs overlapping it */
    if (e->kind == MEMHOOK_EVENT_ALLOC) {
        /* Whether it is open, and where its own FREE is: looked up only
         * when another lane's pending events span its addresses. */
        bool open = false, asked = false;
        for (size_t i = 0; i < lk->n; i++) {
            cursor *o = &lk->cur[i];
            /* A lane whose pending events span no address of this one has
             * no FREE for it (threads with address ranges of their own:
             * nothing to index, nothing to look up). */
            if (o == c || o->lane->box_lo >= hi || lo >= o->lane->box_hi)
                continue;
            if (!asked) {
                asked = true;
                const counted *at_addr = counted_find(&g_closer_addrs, e->address);
                open = at_addr == NULL && !ranged_closes(l, c->at, lo, hi);
                /* 3b. its own FREE lies in another lane behind an ALLOC
                 * overlapping it: that ALLOC comes before its FREE, so
                 * (lifetimes do not interleave) its whole lifetime comes
                 * before this one. */
                mh_lane *fl = NULL;
                uint64_t fi = 0;
                for (unsigned k = 0; at_addr != NULL && k < COUNTED_WHERE && self != 0; k++) {
                    mh_lane *w = at_addr->where[k].lane;
                    if (w != NULL && event_at(w, at_addr->where[k].index)->seq == self) {
                        fl = w;
                        fi = at_addr->where[k].index;
                    }
                }
                if (fl != NULL && fl != l && fl->look_cursor >= 0 &&
                    !hold_3b(lk, fl, fi, lo, hi, fn, arg))
                    return;
            }
            index_upto(o, c->key, e->flags);
            mh_range_item f;
            if (!first_free(o->lane, e, lo, hi, &f))
                continue;
            /* Its lane's later FREEs come after this one: if it is after
             * the ALLOC (frees it, or came later), so are they. */
            if ((self != 0 && f.link == self) || later(f.flags, f.key, e->flags, c->key) ||
                (guaranteed && past_cut(lk, o->lane, f.index)))
                continue;
            h = (hold){o->lane, f.index,
                       open ? HOLD_OPEN
                       : (f.flags & MH_EVENT_LINK_ALLOC) && id_out(lk, f.link) ? HOLD_STRONG
                                                                              : HOLD_WEAK};
            if (!fn(lk, &h, arg))
                return;
        }
    }
}

static bool first_hold(const look *lk, const hold *h, void *arg)
{
    (void)lk;
    *(hold *)arg = *h;
    return false;
}

/* Bring c's head state up to date. */
static void head_refresh(const look *lk, cursor *c)
{
    if (c->state == HEAD_READY)
        return;  /* holds only ever go away during a look */
    if (c->state == HEAD_BLOCKED &&
        (c->wait_lane == NULL || c->wait_index >= lane_front(lk, c->wait_lane)))
        return;
    if (c->state == HEAD_UNKNOWN)
        c->key = mh_clock_ns_of(cursor_event(c));
    hold h = {NULL, 0, HOLD_NONE};
    head_holds(lk, c, first_hold, &h);
    if (h.strength == HOLD_NONE) {
        c->state = HEAD_READY;
    } else {
        c->state = HEAD_BLOCKED;
        c->wait_lane = h.lane;
        c->wait_index = h.index;
    }
}

/* The hint: the earlier time; within one time (a coarse tick), the older
 * lane - a thread usually starts after the one that made it, and the
 * order of unrelated events within a tick is otherwise free. */
static bool before(const cursor *a, const cursor *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    uint32_t ra = a->lane->cid != 0 ? a->lane->cid : UINT32_MAX;
    uint32_t rb = b->lane->cid != 0 ? b->lane->cid : UINT32_MAX;
    return ra < rb;
}

/* ---- breaking a cycle of holds (rare: causal-merge.md) ---- */

typedef struct graph {
    size_t n;
    unsigned char *edge;  /* n x n: the strongest hold of head i on head j */
    bool *outside;        /* head i is held by something the look cannot hand out */
} graph;

typedef struct graph_walk {
    graph *g;
    size_t from;  /* the head whose holds are walked */
} graph_walk;

static bool graph_hold(const look *lk, const hold *h, void *arg)
{
    graph *g = ((graph_walk *)arg)->g;
    size_t from = ((graph_walk *)arg)->from;
    const mh_lane *t = h->lane;
    if (t == NULL || t->look_cursor < 0 || h->index >= lk->cur[t->look_cursor].end) {
        g->outside[from] = true;
        return true;
    }
    unsigned char *e = &g->edge[from * g->n + (size_t)t->look_cursor];
    if (*e < h->strength)
        *e = (unsigned char)h->strength;
    return true;
}

static bool on_cycle(const graph *g, const bool *stuck, size_t start, bool *seen)
{
    size_t *stack = malloc(g->n * sizeof *stack);
    if (stack == NULL)
        return false;
    memset(seen, 0, g->n * sizeof *seen);
    size_t top = 0;
    stack[top++] = start;
    bool found = false;
    while (top != 0 && !found) {
        size_t i = stack[--top];
        for (size_t j = 0; j < g->n && !found; j++) {
            if (g->edge[i * g->n + j] == HOLD_NONE || !stuck[j])
                continue;
            if (j == start)
                found = true;
            else if (!seen[j]) {
                seen[j] = true;
                stack[top++] = j;
            }
        }
    }
    free(stack);
    return found;
}

/* No head is free: the head to let go (a member of a cycle of holds made
 * entirely inside the look), or -1 when the heads wait for what the look
 * cannot hand out. */
static long break_cycle(const look *lk)
{
    size_t n = lk->n;
    graph g = {n, calloc(n * n, 1), calloc(n, sizeof(bool))};
    bool *stuck = calloc(n, sizeof(bool)), *seen = calloc(n, sizeof(bool));
    long pick = -1;
    if (g.edge == NULL || g.outside == NULL || stuck == NULL || seen == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        cursor *c = &lk->cur[i];
        if (c->at >= c->end) {
            g.outside[i] = true;  /* no head this look */
            continue;
        }
        graph_walk walk = {&g, i};
        head_holds(lk, c, graph_hold, &walk);
    }
    /* A head that reaches something outside, through holds, waits. */
    for (size_t i = 0; i < n; i++)
        stuck[i] = !g.outside[i];
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < n; i++) {
            if (!stuck[i])
                continue;
            for (size_t j = 0; j < n; j++)
                if (g.edge[i * n + j] != HOLD_NONE && !stuck[j]) {
                    stuck[i] = false;
                    changed = true;
                    break;
                }
        }
    }
    int best_strength = HOLD_HARD + 1;
    for (size_t i = 0; i < n; i++) {
        if (!stuck[i] || !on_cycle(&g, stuck, i, seen))
            continue;
        int s = HOLD_NONE;
        for (size_t j = 0; j < n; j++)
            s = g.edge[i * n + j] > s ? g.edge[i * n + j] : s;
        if (pick < 0 || s < best_strength ||
            (s == best_strength && before(&lk->cur[i], &lk->cur[pick]))) {
            best_strength = s;
            pick = (long)i;
        }
    }
    if (pick >= 0 && best_strength >= HOLD_OPEN) {
        static bool said;  /* once per process: a malformed history, not a load */
        if (!said) {
            said = true;
            mh_error("event queue: a cycle of links and markers (events recorded out of "
                     "order by a native recorder?); handing out by time");
        }
    }
out:
    free(g.edge);
    free(g.outside);
    free(stuck);
    free(seen);
    return pick;
}

/* ---- handing out ---- */

/* A copy of a published slot.  Its `result` word is read atomically: the
 * producer of a FREE recorded before its call exchanges the call's result
 * into it when the call returns (queue.h), maybe while a run copies it. */
static void copy_event(memhook_event *out, const memhook_event *slot)
{
    _Static_assert(offsetof(memhook_event, result) + sizeof slot->result ==
                       offsetof(memhook_event, flags), "result, then flags");
    memcpy(out, slot, offsetof(memhook_event, result));
    out->result = __atomic_load_n(&slot->result, __ATOMIC_ACQUIRE);
    out->flags = slot->flags;
}

/* The result an event is handed out with.  A FREE whose call is still in
 * flight (MH_RESULT_PENDING) goes as one that succeeded, and says so in
 * its slot (MH_RESULT_TAKEN) for its producer (queue.h). */
static int32_t take_result(memhook_event *slot)
{
    int32_t v = __atomic_load_n(&slot->result, __ATOMIC_ACQUIRE);
    while ((v & MH_RESULT_PENDING) && !(v & MH_RESULT_TAKEN) &&
           !__atomic_compare_exchange_n(&slot->result, &v, v | MH_RESULT_TAKEN, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    }
    return mh_result_settled(v);
}

/* Take an event being handed out off the lists the looks keep: the
 * pending markers, a FREE's place in its lane's index and in the closer
 * set, an ALLOC's in the opener set. */
static __attribute__((noinline)) void unlist(mh_lane *l, uint64_t at, const memhook_event *slot)
{
    if (slot->flags & MH_EVENT_MARKER) {
        if (at < l->marks_at)
            marker_remove(l, at);
        else
            g_markers_seen++;  /* handed out before any look listed it */
    } else if (slot->kind == MEMHOOK_EVENT_ALLOC) {
        counted_remove(&g_opener_addrs, slot->address, l, at);
    } else {
        if (at < l->indexed)
            mh_range_remove(&l->frees, slot->address, at);
        if (at < l->linked) {
            counted_remove(&g_closer_addrs, slot->address, l, at);
            if (slot->flags & MH_EVENT_RANGE)
                ranged_remove(l, at);
        }
    }
}

/* Take c's head out: into *out (NULL: nowhere) numbered, private flags
 * cleared but the raw-TSC one (mh_clock_convert clears it); the tee also
 * leaves the number in the slot (the drain hands it out with it).  Inline
 * in look_merge: a backlog's every event passes here. */
static inline __attribute__((always_inline)) void hand_out(cursor *c, memhook_event *out,
                                                          uint64_t *id, bool tee)
{
    mh_lane *l = c->lane;
    memhook_event *slot = cursor_event(c);
    /* (a marker, or a FREE a look listed for the rules: out of line, so
     * that a lane's run of events pays none of it) */
    if ((slot->flags & MH_EVENT_MARKER) ||
        (slot->kind == MEMHOOK_EVENT_FREE && slot->address != 0 &&
         (c->at < l->indexed || c->at < l->linked)) ||
        (slot->kind == MEMHOOK_EVENT_ALLOC && slot->address != 0 && c->at < l->linked))
        unlist(l, c->at, slot);
    int32_t result = take_result(slot);
    uint64_t seq = g_next_seq++;
    if (tee)
        slot->seq = seq;
    memhook_event here;
    if (out == NULL)
        out = &here;
    copy_event(out, slot);
    out->seq = seq;
    out->result = result;
    /* A FREE recorded with its address only and not seen by the rules (one
     * lane pending) is filled here, in the copy - and in the slot only for
     * the tee, whose events the drain hands out again from their slots
     * (the drain leaves the lines the producer will write again
     * unwritten); before the private flags go (MH_EVENT_UNPAIRED). */
    mh_fill_handed(out, tee ? slot : NULL, fill_extent);
    out->flags &= ~(MH_EVENT_PRIVATE & ~MH_EVENT_RAW_TSC);
    if (id != NULL)  /* (its identity: mh_lane_slot_id's, for the cache's alloc_id) */
        *id = l->cid != 0 ? (uint64_t)l->cid << MH_LANE_INDEX_BITS | c->at : 0;
    c->at++;
    c->state = HEAD_UNKNOWN;
}

/* Hand out up to capacity events of the look, in order (and their
 * identities into ids, unless NULL). */
static size_t look_merge(look *lk, memhook_event *out, uint64_t *ids, size_t capacity, bool tee)
{
    size_t got = 0;
    if (!lk->rules) {
        /* One lane with anything pending: its events in its order, up to
         * a FREE whose call has not returned (a backlog's common case). */
        for (size_t i = 0; i < lk->n; i++) {
            cursor *c = &lk->cur[i];
            if (c->at >= c->end)
                continue;
            /* (a run never waits for a call: call_in_flight's first test,
             * ahead of the slot's lookup) */
            bool background = lk->run == 0;
            while (got < capacity && c->at < c->end &&
                   !(background && call_in_flight(lk, c->lane, cursor_event(c)))) {
                hand_out(c, out != NULL ? &out[got] : NULL, ids != NULL ? &ids[got] : NULL, tee);
                got++;
            }
            break;
        }
        return got;
    }
    while (got < capacity) {
        long best = -1;
        for (size_t i = 0; i < lk->n; i++) {
            cursor *c = &lk->cur[i];
            if (c->at >= c->end)
                continue;
            head_refresh(lk, c);
            if (c->state == HEAD_READY && (best < 0 || before(c, &lk->cur[best])))
                best = (long)i;
        }
        if (best < 0)
            best = break_cycle(lk);
        if (best < 0)
            break;
        hand_out(&lk->cur[best], out != NULL ? &out[got] : NULL, ids != NULL ? &ids[got] : NULL,
                 tee);
        got++;
    }
    return got;
}

/* ---- the tee's events, by seq ---- */

/* A cursor over each lane's events the tee read and no drain took,
 * [consumed, teed). */
static size_t open_teed(cursor *cur, size_t cap)
{
    size_t n = 0;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire);
         l != NULL && n < cap; l = l->next)
        if (l->teed > l->consumed)
            cur[n++] = cursor_at(l, l->consumed, l->teed);
    return n;
}

/* Copy up to capacity of them, by the seq the tee gave them, into out
 * (NULL: just step over them).  Moves the cursors only. */
static size_t merge_by_seq(cursor *cur, size_t n, memhook_event *out, size_t capacity)
{
    size_t got = 0;
    while (got < capacity) {
        long best = -1;
        uint64_t best_seq = 0;
        for (size_t i = 0; i < n; i++) {
            if (cur[i].at == cur[i].end)
                continue;
            uint64_t seq = cursor_event(&cur[i])->seq;
            if (best < 0 || seq < best_seq) {
                best_seq = seq;
                best = (long)i;
            }
        }
        if (best < 0)
            break;
        if (out != NULL) {
            copy_event(&out[got], cursor_event(&cur[best]));
            out[got].result = mh_result_settled(out[got].result);
            out[got].flags &= ~(MH_EVENT_PRIVATE & ~MH_EVENT_RAW_TSC);
        }
        cur[best].at++;
        got++;
    }
    return got;
}

/* ---- after a reader moved ---- */

/* Retire the lane's fully consumed segments: their producer moved on when
 * it linked the next one, and nothing else holds them. */
static void lane_retire_consumed(mh_lane *lane)
{
    mh_lane_seg *s = lane->read_seg;
    size_t retired = 0;
    while (lane->consumed >= s->first + MH_LANE_SEG_SLOTS) {
        mh_lane_seg *next = atomic_load_explicit(&s->next, memory_order_acquire);
        if (next == NULL)
            break;  /* the producer's current segment, exactly full */
        mh_lane_seg_put(lane, s);  /* (its fields are the producer's from here) */
        s = next;
        retired++;
    }
    lane->read_seg = s;
    /* (the directory starts at read_seg: the retired segments leave it) */
    if (retired >= lane->dir.n) {
        lane->dir.n = 0;
    } else if (retired != 0) {
        memmove(lane->dir.seg, lane->dir.seg + retired,
                (lane->dir.n - retired) * sizeof *lane->dir.seg);
        lane->dir.n -= retired;
    }
}

/* Retire what is consumed; an emptied lane of an exited thread becomes
 * FREE for the next new thread (its spare goes back to the pool
 * meanwhile). */
static void lanes_tidy(void)
{
    uint64_t consumed = 0;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next)
        consumed += l->consumed;
    atomic_store_explicit(&g_consumed_total, consumed, memory_order_release);
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        lane_retire_consumed(l);
        if (atomic_load_explicit(&l->state, memory_order_acquire) != MH_LANE_ORPHAN ||
            l->consumed != atomic_load_explicit(&l->published, memory_order_acquire))
            continue;
        mh_lane_seg *spare = atomic_exchange(&l->spare, NULL);
        if (spare != NULL)
            mh_lane_seg_put(NULL, spare);
        atomic_store_explicit(&l->state, MH_LANE_FREE, memory_order_release);
    }
}

/* Something is still not taken out.  `looked`: a look of this call read
 * every lane after the pending flag was cleared, so what it saw is enough
 * (what was published since sets the flag itself: event_lane.h) - no
 * further read of the producers' counts; else read them. */
static bool any_unconsumed(bool looked)
{
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        uint64_t upto = looked ? l->seen : atomic_load_explicit(&l->published,
                                                                 memory_order_acquire);
        if (upto > l->consumed)
            return true;
    }
    return false;
}

/* The trace gets call events only: a marker (kind 0: emit.c) is this
 * process's consumers' business, and a trace's reader knows no kind 0. */
static void sink_batch(const memhook_event *events, size_t count)
{
    mh_queue_sink_fn sink = atomic_load_explicit(&g_sink, memory_order_acquire);
    if (sink == NULL)
        return;
    size_t from = 0;
    for (size_t i = 0; i <= count; i++) {
        if (i < count && events[i].kind != 0)
            continue;
        if (i > from)
            sink(events + from, i - from);
        from = i + 1;
    }
}

static void feed_batch(const memhook_event *events, const uint64_t *ids, size_t count)
{
    mh_queue_feed_fn feed = atomic_load_explicit(&g_feed, memory_order_acquire);
    if (feed != NULL && count != 0)
        feed(events, ids, count);
    mh_fill_fed();
}

/* Room for the identities of `count` events handed out (g_lock held): the
 * feed numbers allocations by them.  NULL when out of memory (the cache
 * then numbers them itself). */
static uint64_t *ids_room(size_t count)
{
    static uint64_t *ids;
    static size_t cap;
    if (count > cap) {
        size_t want = count < 4096 ? 4096 : count;
        uint64_t *grown = realloc(ids, want * sizeof *ids);
        if (grown == NULL)
            return NULL;
        ids = grown;
        cap = want;
    }
    return ids;
}

/* Each lane's count of events put in the order, to the cache (stored in
 * the lane's `cached` once published), then the commit.  g_lock held. */
static void feed_commit(void)
{
    mh_queue_mark_fn mark = atomic_load_explicit(&g_feed_mark, memory_order_acquire);
    void (*commit)(void) = atomic_load_explicit(&g_feed_commit, memory_order_acquire);
    if (commit == NULL)
        return;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire);
         mark != NULL && l != NULL; l = l->next) {
        uint64_t fed = lane_unread(l);
        if (fed != l->marked) {
            mark(&l->cached, fed);
            l->marked = fed;
        }
    }
    commit();
}

/* Events of the run's first snapshot still waiting. */
static bool run_owes(uint64_t run)
{
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next)
        if (l->run == run && lane_unread(l) < l->run_h)
            return true;
    return false;
}


size_t memhook_events_drain(memhook_event *out, size_t capacity)
{
    uint64_t mark = 0;
    return memhook_events_drain_bounded(out, capacity, &mark);
}

size_t memhook_events_drain_bounded(memhook_event *out, size_t capacity, uint64_t *mark)
{
    if ((out == NULL && capacity != 0) || mark == NULL)
        return 0;
    if (!atomic_load_explicit(&g_consumer_seen, memory_order_relaxed))
        atomic_store(&g_consumer_seen, true);  /* the trace keeps its events for us now */
    /* Nothing published since the last drain: the common case of a
     * query-heavy process, answered with one load. */
    if (capacity == 0 ||
        atomic_load_explicit(&mh_events_pending.flag, memory_order_acquire) == 0)
        return 0;
    pthread_mutex_lock(&g_lock);
    uint64_t call = call_begin();
    /* Before reading the lanes: a push after this sets it again. */
    atomic_exchange(&mh_events_pending.flag, 0);
    size_t cap, n = 0;
    bool looked = false;
    cursor *cur = cursors(&cap);
    if (cur != NULL) {
        /* First what the trace's tee read already, in the order it read
         * them (their seqs); the sink has seen them. */
        size_t nc = open_teed(cur, cap);
        n = merge_by_seq(cur, nc, out, capacity);
        mh_clock_convert(out, n);  /* the slots keep raw stamps; the tee converted its copies */
        for (size_t i = 0; i < nc; i++)
            cur[i].lane->consumed = cur[i].at;
        bool start = *mark == 0;
        if (start && n < capacity) {
            *mark = ++g_run;
            if (*mark == 0)
                *mark = ++g_run;  /* 0 means "not begun" */
        } else if (!start && *mark != g_run) {
            /* A later run began since this one's last call (runs
             * interleave: Python's applier goes on with its run after a
             * query, which cannot wait for it, took events out in a run of
             * its own).  The lanes carry one run's cut, now the later
             * run's, which is past this one's (its first look came after
             * this run's first call ended): go on as that run.  What this
             * run owed is in the later run's first snapshot, so it still
             * ends only when all of it is out; it stays bounded by the
             * later run's cut.  (Left as it was, it would find every lane
             * cut at its front and end at once, owing events.) */
            *mark = g_run;
        }
        /* A look hands out what its first pass saw; what its second saw
         * waits for the next look, which the run takes at once while events
         * pending when it began are still held (by what only that second
         * pass saw: causal-merge.md). */
        for (int look_no = 0; look_no < 4 && n < capacity && *mark != 0; look_no++) {
            look lk;
            bool first = start && look_no == 0;
            look_open(&lk, cur, cap, *mark, first, first, false);
            looked = true;
            uint64_t *ids = ids_room(capacity - n);
            size_t got = look_merge(&lk, out + n, ids, capacity - n, false);
            look_close(&lk, false);
            mh_clock_convert(out + n, got);  /* raw TSC stamps -> CLOCK_MONOTONIC ns */
            sink_batch(out + n, got);
            feed_batch(out + n, ids, got);
            n += got;
            if (!run_owes(*mark))
                break;
        }
        lanes_tidy();
    }
    bool left = cur == NULL || any_unconsumed(looked);
    if (left)
        atomic_store(&mh_events_pending.flag, MH_PENDING_NEWS);  /* the next drain goes on */
    feed_commit();
    if (!left)
        call_done(call);
    pthread_mutex_unlock(&g_lock);
    return n;
}

size_t memhook_events_drain_background(memhook_event *out, size_t capacity)
{
    if (out == NULL && capacity != 0)
        return 0;
    if (!atomic_load_explicit(&g_consumer_seen, memory_order_relaxed))
        atomic_store(&g_consumer_seen, true);
    if (capacity == 0 ||
        atomic_load_explicit(&mh_events_pending.flag, memory_order_acquire) == 0)
        return 0;
    pthread_mutex_lock(&g_lock);
    uint64_t call = call_begin();
    atomic_exchange(&mh_events_pending.flag, 0);
    size_t cap, n = 0;
    cursor *cur = cursors(&cap);
    if (cur != NULL) {
        size_t nc = open_teed(cur, cap);
        n = merge_by_seq(cur, nc, out, capacity);
        mh_clock_convert(out, n);
        for (size_t i = 0; i < nc; i++)
            cur[i].lane->consumed = cur[i].at;
        if (n < capacity) {
            /* One look, no run: nothing is owed to this call, so no second
             * read of any count (run 0 has no cut, as the tee's look). */
            look lk;
            look_open(&lk, cur, cap, 0, false, false, true);
            uint64_t *ids = ids_room(capacity - n);
            size_t got = look_merge(&lk, out + n, ids, capacity - n, false);
            look_close(&lk, false);
            mh_clock_convert(out + n, got);
            sink_batch(out + n, got);
            feed_batch(out + n, ids, got);
            n += got;
        }
        lanes_tidy();
    }
    /* What it left (the last look's G beyond what it handed out, the
     * active lanes' tails) keeps the flag set: a query's drain, or this
     * drainer's next call, takes it. */
    bool left = cur == NULL || any_unconsumed(true);
    if (left)
        atomic_store(&mh_events_pending.flag, MH_PENDING_NEWS);
    feed_commit();
    if (!left)
        call_done(call);
    pthread_mutex_unlock(&g_lock);
    return n;
}

/* Events published and not yet taken out, without the consumer lock (a
 * drain may hold it for long): `published` counts are atomics, and the
 * consumed total is kept beside them by whoever moves `consumed`. */
static uint64_t backlog_now(void)
{
    uint64_t produced = 0;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next)
        produced += atomic_load_explicit(&l->published, memory_order_acquire);
    uint64_t consumed = atomic_load_explicit(&g_consumed_total, memory_order_acquire);
    return produced > consumed ? produced - consumed : 0;
}

size_t memhook_events_drain_into(memhook_event *out, size_t capacity, uint64_t *mark,
                                uint64_t *filled)
{
    if (filled == NULL || out == NULL || *filled >= capacity)
        return 0;
    size_t n = memhook_events_drain_bounded(out + *filled, capacity - (size_t)*filled, mark);
    *filled += n;
    return n;
}

int memhook_events_wait_backlog(uint64_t threshold, unsigned timeout_ms)
{
    /* Polled, not signalled: a producer must not make a system call (a
     * futex wake) on the hook path.  Every WAIT_POLL_US the backlog is
     * summed over the lanes - a few loads per thread. */
    enum { WAIT_POLL_US = 5000 };
    for (unsigned waited = 0;; waited += WAIT_POLL_US / 1000) {
        if (backlog_now() >= threshold)
            return 1;
        if (waited >= timeout_ms)
            return 0;
        struct timespec ts = {0, WAIT_POLL_US * 1000L};
        nanosleep(&ts, NULL);
    }
}

const volatile uint32_t *memhook_events_pending_flag(void)
{
    return (const volatile uint32_t *)&mh_events_pending.flag;
}

void mh_queue_set_sink(mh_queue_sink_fn sink)
{
    atomic_store_explicit(&g_sink, sink, memory_order_release);
}

size_t mh_queue_tee(memhook_event *out, size_t capacity)
{
    pthread_mutex_lock(&g_lock);
    size_t cap, n = 0;
    cursor *cur = cursors(&cap);
    if (cur != NULL) {
        look lk;
        look_open(&lk, cur, cap, 0, false, false, true);
        uint64_t *ids = ids_room(capacity);
        n = look_merge(&lk, out, ids, capacity, true);
        look_close(&lk, true);
        mh_clock_convert(out, n);
        sink_batch(out, n);
        feed_batch(out, ids, n);
    }
    feed_commit();
    pthread_mutex_unlock(&g_lock);
    return n;
}

void mh_queue_set_extent(mh_queue_extent_fn extent)
{
    atomic_store_explicit(&g_extent, extent, memory_order_release);
}

void mh_queue_set_feed(mh_queue_feed_fn feed, mh_queue_mark_fn mark, void (*commit)(void))
{
    atomic_store_explicit(&g_feed_commit, commit, memory_order_release);
    atomic_store_explicit(&g_feed_mark, mark, memory_order_release);
    atomic_store_explicit(&g_feed, feed, memory_order_release);
}

/* Drop what the tee and the feed read, where nobody ever drained (g_lock
 * held): the oldest first, all of it. */
static void drop_sequenced(cursor *cur, size_t cap)
{
    size_t nc = open_teed(cur, cap);
    if (nc == 0)
        return;
    atomic_store_explicit(&g_trimmed, true, memory_order_release);
    /* (all of it: no merge by seq needed to step over every event) */
    for (size_t i = 0; i < nc; i++)
        cur[i].lane->consumed = cur[i].end;
    lanes_tidy();
}

/* Something published is not in the order yet (g_lock held). */
static bool any_unsequenced(void)
{
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next)
        if (atomic_load_explicit(&l->published, memory_order_acquire) > lane_unread(l))
            return true;
    return false;
}

/* Up to date without a run of its own: no news and nothing in flight, or a
 * call begun after `since` (the caller's start) is done. */
static inline bool caught_up(uint64_t since)
{
    return mh_queue_caught_up() || atomic_load(&mh_queue_calls.done) > since;
}

static bool feed_run(bool wait, uint64_t since);

bool mh_queue_feed_run(bool wait)
{
    /* (the caught-up test alone, in a frame of its own: every query makes
     * it, and the run's frame would cost it more than the test does) */
    uint64_t since = atomic_load(&mh_queue_calls.begun);
    if (caught_up(since))
        return true;
    return feed_run(wait, since);
}

static __attribute__((noinline)) bool feed_run(bool wait, uint64_t since)
{
    if (wait) {
        pthread_mutex_lock(&g_lock);
    } else if (pthread_mutex_trylock(&g_lock) != 0) {
        /* Another thread drains: its call may have begun before an event
         * this query needs.  The query does not wait for it: it reads what
         * the map lacks from the lanes' counts (mh_queue_unapplied_get). */
        return false;
    }
    if (caught_up(since)) {
        pthread_mutex_unlock(&g_lock);
        return true;
    }
    uint64_t call = call_begin();
    atomic_store(&mh_events_pending.flag, 0);  /* a push after this sets NEWS again */
    /* The feed's copies: the consumer lock is held, so one buffer serves. */
    enum { FEED_CHUNK = 512 };
    static memhook_event buf[FEED_CHUNK];
    static uint64_t ids[FEED_CHUNK];
    size_t cap;
    cursor *cur = cursors(&cap);
    if (cur != NULL) {
        /* A bounded run (memhook_events_drain_bounded's), reading as the
         * tee does: the events stay for the consumer, numbered. */
        uint64_t mark = ++g_run;
        if (mark == 0)
            mark = ++g_run;
        for (bool start = true;; start = false) {
            size_t n = 0;
            for (int look_no = 0; look_no < 4 && n < FEED_CHUNK; look_no++) {
                look lk;
                bool first = start && look_no == 0;
                look_open(&lk, cur, cap, mark, first, first, false);
                size_t got = look_merge(&lk, buf + n, ids + n, FEED_CHUNK - n, true);
                look_close(&lk, true);
                mh_clock_convert(buf + n, got);
                n += got;
                if (!run_owes(mark))
                    break;
            }
            sink_batch(buf, n);
            feed_batch(buf, ids, n);
            if (n < FEED_CHUNK && !run_owes(mark))
                break;
            if (n == 0)
                break;
        }
        if (!atomic_load(&g_consumer_seen))
            drop_sequenced(cur, cap);
    }
    if (cur == NULL || any_unsequenced()) {
        atomic_store(&mh_events_pending.flag, MH_PENDING_NEWS);
    } else if (any_unconsumed(false)) {
        uint32_t none = 0;  /* (a producer's NEWS since stays) */
        atomic_compare_exchange_strong(&mh_events_pending.flag, &none, MH_PENDING_SEQUENCED);
    }
    feed_commit();
    if (cur != NULL)
        call_done(call);
    pthread_mutex_unlock(&g_lock);
    return cur != NULL;
}

void mh_queue_trim(uint64_t keep)
{
    if (atomic_load(&g_consumer_seen))
        return;
    pthread_mutex_lock(&g_lock);
    size_t cap;
    cursor *cur = cursors(&cap);
    if (cur != NULL && !atomic_load(&g_consumer_seen)) {
        size_t nc = open_teed(cur, cap);
        uint64_t held = 0;
        for (size_t i = 0; i < nc; i++)
            held += cur[i].end - cur[i].at;
        if (held > keep) {
            /* Drop the oldest (by seq) of what the tee read.  A late
             * consumer's cache then lacks the allocations those events
             * made: flagged before they go, so coverage is never vouched
             * for over a gap (a query then asks the driver). */
            atomic_store_explicit(&g_trimmed, true, memory_order_release);
            merge_by_seq(cur, nc, NULL, held - keep);
            for (size_t i = 0; i < nc; i++)
                cur[i].lane->consumed = cur[i].at;
            lanes_tidy();
        }
    }
    pthread_mutex_unlock(&g_lock);
}

void mh_queue_stats_fill(memhook_queue_stats *out)
{
    pthread_mutex_lock(&g_lock);
    out->produced = out->consumed = out->lanes = 0;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        out->produced += atomic_load_explicit(&l->published, memory_order_acquire);
        out->consumed += l->consumed;
        out->lanes++;
    }
    mh_lane_seg_stats(&out->segments_live, &out->segments_peak);
    out->segment_bytes = sizeof(mh_lane_seg);
    pthread_mutex_unlock(&g_lock);
}

/* ---- fork: the consumer lock is held across it, so the child's queue is
 * between two drains; the lanes' own repair orphans the vanished threads'
 * lanes (event_lane.c).  Producers repair their own state (emit.c: the
 * pid).  Registered with every other module's handlers, in the lock
 * order, by csrc/cuda/fork_order.c. ---- */

void mh_queue_fork_prepare(void) { pthread_mutex_lock(&g_lock); }
void mh_queue_fork_parent(void) { pthread_mutex_unlock(&g_lock); }

void mh_queue_fork_child(void)
{
    pthread_mutex_init(&g_lock, NULL);
    mh_lanes_fork_child();
    /* Anything the parent left undrained is the child's to drain. */
    atomic_store(&mh_events_pending.flag, 1);
}

/* ---- what the cache lacks, without the consumer lock ---- */

void mh_queue_unapplied_get(mh_queue_unapplied *out)
{
    mh_lane *mine = mh_my_lane;
    *out = (mh_queue_unapplied){0, 0, false};
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        /* (`published` first: a count the cache stored after it covers it) */
        uint64_t pub = l == mine ? l->written
                                 : atomic_load_explicit(&l->published, memory_order_acquire);
        uint64_t have = atomic_load_explicit(&l->cached, memory_order_acquire);
        if (pub <= have)
            continue;
        if (l == mine) {
            out->own_from = have;
            out->own_to = pub;
        } else {
            out->foreign = true;
        }
    }
}

const memhook_event *mh_queue_own_events(uint64_t from, uint64_t to, uint64_t *first_id)
{
    mh_lane *l = mh_my_lane;
    if (l == NULL || from >= to || to != l->written || l->id == 0)
        return NULL;
    mh_lane_seg *seg = l->write_seg;
    if (from < seg->first || to > seg->first + MH_LANE_SEG_SLOTS)
        return NULL;
    *first_id = (uint64_t)l->id << MH_LANE_INDEX_BITS | from;
    return &seg->slots[from - seg->first];
}

/* ---- testing ---- */

int memhook_testing_drain_hold(int hold)
{
    /* (whether this thread holds it: a mutex let go by another thread is
     * undefined behaviour) */
    static __thread bool held;
    if ((hold != 0) == held)
        return -EINVAL;
    if (hold)
        pthread_mutex_lock(&g_lock);
    else
        pthread_mutex_unlock(&g_lock);
    held = hold != 0;
    return 0;
}
