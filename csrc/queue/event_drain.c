/*
 * event_drain.c - the consumer side of the event queue: merging the lanes
 * into one order, the trace's tee and trim, statistics.
 *
 * Consumers serialise on a mutex no producer ever takes.  Each lane is
 * in its thread's order; the drain merges them by timestamp (raw TSC, or
 * CLOCK_MONOTONIC where the TSC is not used - both are one clock for every
 * core) and numbers the result: that is the event order (`seq`).
 *
 * What the order must get right is causality across threads: a FREE of an
 * address before the ALLOC that reuses it (DESIGN.md section 3), an ALLOC
 * before the FREE of the pointer it returned.  Two facts give it:
 *
 *  1. Stamps follow causality.  A FREE is stamped before the real free, an
 *     ALLOC after the real allocation returned (lfence first: the stamp
 *     waits for the call's loads), and a FREE found in the hook layer's
 *     live table after the ALLOC stamp its record holds (a plain rdtsc
 *     could run ahead of the load that brought the pointer in from the
 *     allocating thread) - so if one call's effect reached the other, the
 *     first has the smaller stamp.
 *  2. Publication follows causality.  A FREE is published before the real
 *     free, an ALLOC before its pointer is returned: if event e depends on
 *     event f, f's publication happens-before e's.
 *
 * The drain reads every lane's `published` count twice (passes H and G).
 * Any f that an event e seen in pass H depends on is then visible in pass
 * G (2. and the acquire loads).  Events that appeared between the passes
 * set a horizon T = the smallest stamp among them, and the drain hands out,
 * lane by lane in stamp order, only events of pass H stamped below T: if e
 * is handed out and f precedes it, f is not among the new events (its
 * stamp is below e's, by 1., hence below T), so it was in pass H, below T,
 * and in stamp order before e.  Events at or past the horizon wait for the
 * next look (the drain looks up to four times); with no producer running
 * there is no horizon and every event goes.
 *
 * Bounded drains.  A drain also has a cut: the newest stamp among the
 * events pending when it began (each lane's last published event at the
 * first pass H - a lane is in stamp order, so that is the lane's newest),
 * and hands out only events stamped at or below it.  The cut only shortens
 * what is handed out to a prefix of the stamp order the horizon allows
 * (stamp < min(T, cut + 1)), so the argument above holds unchanged: if e
 * is handed out and f precedes it, f's stamp is below e's, hence below
 * both T and the cut, and f goes first.  A drain run made of several
 * calls (memhook_events_drain_bounded with one mark: Python's flush) keeps
 * the cut of its first call.  The bound: such a run hands out the events
 * pending when it began, plus those published later but stamped before its
 * first snapshot pass ended - what the producers write during one walk of
 * the lane list (microseconds), and at most one event per thread caught
 * between its stamp and its publication - so its length no longer depends
 * on how fast other threads allocate: newer events wait for the next run.
 * Any event a caller can be asking about (an ALLOC whose pointer it holds)
 * was published before the run began, so it is at or below the cut.
 *
 * A producer stopped between its stamp and its publication (preempted)
 * holds nothing back: its event is in neither pass, and whatever is handed
 * out meanwhile cannot depend on it (2.) - it comes out later, behind
 * events with newer stamps.
 *
 * The one event outside 1. and 2.: a FREE of memory neither the live table
 * nor the driver knew is stamped and published after the real call (its
 * result is the news: emit.c), so an ALLOC reusing that address may come
 * out first; the cache then sees a FREE of unknown size and marks the
 * region UNKNOWN, which memory_type() resolves through the driver.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "event_lane.h"
#include "queue.h"

/* Process-wide like the queue it serves: consumers serialise here.  A leaf
 * of the lock order (csrc/core/mh_lock_order.h). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* Under g_lock: the next seq to hand out, and what was handed out. */
static uint64_t g_next_seq;
/* The sum of every lane's `consumed`, for memhook_events_wait_backlog
 * (which does not take g_lock); written under g_lock by lanes_tidy. */
static _Atomic uint64_t g_consumed_total;

/* Process-wide like the queue it watches: where drained batches are copied
 * to (the trace streamer's socket), or NULL.  Set by csrc/trace/. */
static _Atomic mh_queue_sink_fn g_sink;
/* memhook_events_drain was called: the trace keeps its events for us. */
static _Atomic bool g_consumer_seen;
/* mh_queue_trim dropped events: a consumer that starts later has not seen
 * every allocation, so the hooks stop vouching for coverage (install.c).
 * Process-wide, as the queue it describes; inherited by a fork child, whose
 * address space holds the same unseen allocations. */
static _Atomic bool g_trimmed;

bool mh_queue_trimmed(void) { return atomic_load_explicit(&g_trimmed, memory_order_acquire); }

/* ---- walking the lanes (g_lock held) ---- */

typedef struct cursor {
    mh_lane *lane;
    mh_lane_seg *seg;
    uint64_t at;   /* lane index of the next event */
    uint64_t end;  /* one past the last event this cursor may take */
} cursor;

/* The segment holding lane index `at` (consumed <= at < published): from
 * the lane's seek point when `at` lies at or past it, else from read_seg
 * (which holds `consumed`); the seek point moves to what was found. */
static mh_lane_seg *lane_seg_of(mh_lane *l, uint64_t at)
{
    mh_lane_seg *s = l->read_seg;
    if (l->seek_first > s->first && at >= l->seek_first)
        s = l->seek_seg;
    while (at >= s->first + MH_LANE_SEG_SLOTS)
        s = atomic_load_explicit(&s->next, memory_order_acquire);
    if (s->first > l->seek_first || l->seek_seg == NULL) {
        l->seek_seg = s;
        l->seek_first = s->first;
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

/* One cursor per lane, grown as lanes are added (consumer side: malloc is
 * fine here, no hook ever waits for this lock). */
static cursor *g_cursors;
static size_t g_cursor_cap;

static size_t lane_count(void)
{
    size_t n = 0;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next)
        n++;
    return n;
}

/* g_cursors with room for every lane listed now (lanes added later wait
 * for the next drain), or NULL when out of memory. */
static cursor *cursors(size_t *cap)
{
    size_t want = lane_count();
    if (want > g_cursor_cap) {
        cursor *c = realloc(g_cursors, want * 2 * sizeof *c);
        if (c == NULL)
            return NULL;
        g_cursors = c;
        g_cursor_cap = want * 2;
    }
    *cap = g_cursor_cap;
    return g_cursors;
}

/* Where a reader starts in a lane: the drain after what the tee handed
 * out (it hands those out first, by seq), the tee after what it read. */
static uint64_t lane_unread(const mh_lane *l)
{
    return l->teed > l->consumed ? l->teed : l->consumed;
}

/* Pass H: a cursor over each lane's unread events, [lane_unread,
 * published).  Pass G: the horizon - the oldest stamp among events that
 * appeared since (UINT64_MAX if none did).  See the top of the file. */
static size_t open_unread(cursor *cur, size_t cap, uint64_t *horizon, uint64_t *newest)
{
    size_t n = 0;
    uint64_t top = 0;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        uint64_t start = lane_unread(l);
        uint64_t end = atomic_load_explicit(&l->published, memory_order_acquire);
        l->scanned = start;  /* what pass G compares with: nothing taken from it... */
        if (end != start && n < cap) {
            cursor newest_event = cursor_at(l, end - 1, end);
            uint64_t last = cursor_event(&newest_event)->timestamp_ns;  /* the lane's newest */
            if (last > top)
                top = last;
            cur[n++] = cursor_at(l, start, end);
            l->scanned = end;  /* ...or up to what this pass saw */
        }
    }
    if (newest != NULL)
        *newest = top;
    uint64_t h = UINT64_MAX;
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        /* A lane linked after pass H was never scanned: it starts at 0,
         * and a fresh lane's `scanned` is 0 too. */
        uint64_t seen = l->scanned > lane_unread(l) ? l->scanned : lane_unread(l);
        uint64_t now = atomic_load_explicit(&l->published, memory_order_acquire);
        if (now > seen) {
            cursor probe = cursor_at(l, seen, now);
            uint64_t stamp = cursor_event(&probe)->timestamp_ns;
            if (stamp < h)
                h = stamp;
        }
    }
    *horizon = h;
    return n;
}

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

/* The cursor whose next event comes first - by stamp, below the horizon,
 * or (by_seq) by the seq the tee gave it - or -1. */
static long next_cursor(cursor *cur, size_t n, uint64_t horizon, bool by_seq)
{
    long best = -1;
    uint64_t best_key = horizon;
    for (size_t i = 0; i < n; i++) {
        if (cur[i].at == cur[i].end)
            continue;
        const memhook_event *e = cursor_event(&cur[i]);
        uint64_t key = by_seq ? e->seq : e->timestamp_ns;
        if (key < best_key || (by_seq && best < 0)) {
            best_key = key;
            best = (long)i;
        }
    }
    return best;
}

/* Copy up to capacity events, in order, into out (NULL: just step over
 * them).  Moves the cursors only. */
static size_t merge(cursor *cur, size_t n, uint64_t horizon, bool by_seq, memhook_event *out,
                    size_t capacity)
{
    size_t got = 0;
    while (got < capacity) {
        long i = next_cursor(cur, n, horizon, by_seq);
        if (i < 0)
            break;
        if (out != NULL)
            out[got] = *cursor_event(&cur[i]);
        cur[i].at++;
        got++;
    }
    return got;
}

/* Retire the lane's fully consumed segments: their producer moved on when
 * it linked the next one, and nothing else holds them. */
static void lane_retire_consumed(mh_lane *lane)
{
    mh_lane_seg *s = lane->read_seg;
    while (lane->consumed >= s->first + MH_LANE_SEG_SLOTS) {
        mh_lane_seg *next = atomic_load_explicit(&s->next, memory_order_acquire);
        if (next == NULL)
            break;  /* the producer's current segment, exactly full */
        mh_lane_seg_put(lane, s);
        s = next;
    }
    lane->read_seg = s;
    if (lane->seek_first < s->first) {  /* the seek point was retired */
        lane->seek_seg = s;
        lane->seek_first = s->first;
    }
}

/* After a reader moved: retire what is consumed; an emptied lane of an
 * exited thread becomes FREE for the next new thread (its spare goes back
 * to the pool meanwhile). */
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

static bool any_unconsumed(void)
{
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next)
        if (atomic_load_explicit(&l->published, memory_order_acquire) != l->consumed)
            return true;
    return false;
}

/* The trace gets call events only: an unload marker (emit.c) is this
 * process's consumers' business, and a trace's reader knows no kind 0. */
static void sink_batch(const memhook_event *events, size_t count)
{
    mh_queue_sink_fn sink = atomic_load_explicit(&g_sink, memory_order_acquire);
    if (sink == NULL)
        return;
    size_t from = 0;
    for (size_t i = 0; i <= count; i++) {
        if (i < count && !(events[i].flags & MEMHOOK_EVENT_DRIVER_UNLOADED))
            continue;
        if (i > from)
            sink(events + from, i - from);
        from = i + 1;
    }
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
    if (capacity == 0 || atomic_load_explicit(&mh_events_pending, memory_order_acquire) == 0)
        return 0;
    pthread_mutex_lock(&g_lock);
    /* Before reading the lanes: a push after this sets it again. */
    atomic_exchange(&mh_events_pending, 0);
    size_t cap, n = 0;
    cursor *cur = cursors(&cap);
    if (cur != NULL) {
        /* First what the trace's tee read already, in the order it read
         * them (their seqs); the sink has seen them. */
        size_t nc = open_teed(cur, cap);
        n = merge(cur, nc, UINT64_MAX, true, out, capacity);
        mh_clock_convert(out, n);  /* the slots keep raw stamps; the tee converted its copies */
        for (size_t i = 0; i < nc; i++)
            cur[i].lane->consumed = cur[i].at;
        /* Events newer than the horizon wait - but an event a caller is
         * about to ask about (an ALLOC whose pointer it holds) may be one of
         * them, so look again at once: what held them back is visible now.
         * A few looks, and never past the run's cut (the top of the file):
         * a run takes what was pending when it began, not what producers
         * add while it runs. */
        for (int look = 0; look < 4 && n < capacity; look++) {
            uint64_t horizon, newest;
            nc = open_unread(cur, cap, &horizon, &newest);
            if (*mark == 0 && nc != 0)
                *mark = newest == UINT64_MAX ? newest : newest + 1;  /* one past the cut */
            uint64_t limit = horizon < *mark ? horizon : *mark;
            size_t got = merge(cur, nc, limit, false, out + n, capacity - n);
            for (size_t i = 0; i < got; i++)
                out[n + i].seq = g_next_seq++;
            mh_clock_convert(out + n, got);  /* raw TSC stamps -> CLOCK_MONOTONIC ns */
            sink_batch(out + n, got);
            n += got;
            for (size_t i = 0; i < nc; i++) {
                mh_lane *l = cur[i].lane;
                l->consumed = l->teed = cur[i].at;
            }
            if (horizon >= *mark)
                break;  /* nothing at or below the cut is held back: all of it is out */
        }
        lanes_tidy();
    }
    if (cur == NULL || any_unconsumed())
        atomic_store(&mh_events_pending, 1);  /* the next drain goes on */
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
    return (const volatile uint32_t *)&mh_events_pending;
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
        uint64_t horizon;
        size_t nc = open_unread(cur, cap, &horizon, NULL);
        while (n < capacity) {
            long i = next_cursor(cur, nc, horizon, false);
            if (i < 0)
                break;
            memhook_event *slot = cursor_event(&cur[i]);
            slot->seq = g_next_seq++;  /* the drain hands it out with this seq */
            out[n++] = *slot;
            cur[i].at++;
        }
        for (size_t i = 0; i < nc; i++)
            cur[i].lane->teed = cur[i].at;
        mh_clock_convert(out, n);
        sink_batch(out, n);
    }
    pthread_mutex_unlock(&g_lock);
    return n;
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
            merge(cur, nc, UINT64_MAX, true, NULL, held - keep);
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
    atomic_store(&mh_events_pending, 1);
}
