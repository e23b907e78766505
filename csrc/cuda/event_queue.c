/*
 * event_queue.c - the lock-free, multi-producer, growable event queue.
 *
 * Shape: a singly linked list of fixed-size segments.  A producer claims a
 * sequence number with one fetch_add (that is the event order), finds the
 * segment holding it by walking forward from the `tail` hint (appending a
 * fresh segment with a CAS when it runs off the end), writes the event and
 * publishes it with a release store of seq+1 into the slot's seq field.
 * Nothing is ever dropped: a full segment just means a new one.
 *
 * Consumers (memhook_events_drain) serialise on a mutex that no producer
 * ever takes, and take events strictly in seq order: a claimed slot whose
 * producer has not published yet ends the batch.
 *
 * Memory stays bounded while the queue is drained: consumed segments are
 * reused (up to SPARE_SEGMENTS kept) or unmapped after a grace period.  A
 * producer may still hold a pointer to an old segment (it loaded `tail`
 * long ago), so retirement uses a two-epoch
 * scheme: producers announce themselves in active[epoch & 1] while they
 * walk to their slot (not while they write it: a segment with an
 * unpublished slot is never retired); the consumer retires segments into a
 * limbo list, flips the epoch, and frees the limbo once the old epoch's
 * count has drained to zero.  No producer ever waits for the consumer.
 *
 * fork(): the child has only the forking thread.  Slots claimed by other
 * threads that will never publish are filled with SKIPPED events so the
 * child's consumer does not stall on them, the epoch counts are reset, and
 * the consumer mutex (held across fork) is released.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cuda_hooks.h"
#include "log.h"

#define SEG_SLOTS 1024u
/* Retired segments kept mapped for reuse (segment_reuse); the queue's
 * memory is bounded by the live segments plus these. */
#define SPARE_SEGMENTS 4

/* A slot is one cache line: the event itself, whose `seq` field is also
 * the publication word - seq + 1 once the event is written, anything else
 * before (0 in a fresh segment; in a reused one, an older seq + 1, which
 * is below any seq the slot can be claimed for).  drain hands out the real
 * seq.  (A separate `ready` word made slots 72 bytes, so nearly every slot
 * straddled two lines and shared them with its neighbours: two lines to
 * fetch per event instead of one, and false sharing between producers
 * writing neighbouring seqs - measured on a 16-core host.) */
typedef struct mh_slot {
    _Alignas(64) memhook_event ev;
} mh_slot;
_Static_assert(sizeof(mh_slot) == 64, "an event slot is one cache line");

static uint64_t slot_ready(const mh_slot *slot)
{
    return __atomic_load_n(&slot->ev.seq, __ATOMIC_ACQUIRE);
}

static void slot_publish(mh_slot *slot, uint64_t seq)
{
    __atomic_store_n(&slot->ev.seq, seq + 1, __ATOMIC_RELEASE);
}

typedef struct mh_segment {
    _Atomic(struct mh_segment *) next;
    uint64_t first;               /* seq of slots[0] */
    struct mh_segment *limbo_next; /* consumer only */
    mh_slot slots[SEG_SLOTS];
} mh_segment;

/* The one queue of the process: every hook in every thread appends to it,
 * which is what gives events a single order. */
static struct {
    /* Written by every push: one cache line, so that with several
     * producers a push moves one line between cores, not three. */
    _Alignas(64) _Atomic uint64_t next_seq;
    _Atomic uint64_t active_even;
    _Atomic uint64_t active_odd;
    /* Read by every push, rarely written: lines of their own, which stay
     * shared in every core's cache. */
    _Alignas(64) _Atomic(mh_segment *) tail;
    _Alignas(64) _Atomic uint64_t epoch;
    _Alignas(64) pthread_mutex_t lock;     /* consumers only */
    mh_segment *head;                      /* consumer: oldest live segment */
    uint64_t head_seq;                     /* consumer: next seq to hand out */
    /* head_seq as others may read it without the lock (memhook_events_
     * counters), and whether retired segments still wait for reclaim:
     * together they let an empty drain return without the lock. */
    _Alignas(64) _Atomic uint64_t consumed_seq;
    _Atomic int reclaim_pending;
    mh_segment *limbo_new;                 /* retired since the last flip */
    mh_segment *limbo_old;                 /* retired before it */
    int old_parity;                        /* parity whose count must reach 0 */
    uint64_t consumed;
    _Atomic uint64_t segments_live;
    _Atomic uint64_t segments_peak;
    _Atomic uint64_t free_from_driver;
    _Atomic uint64_t free_unknown;
    _Alignas(64) _Atomic(mh_segment *) spare[SPARE_SEGMENTS];  /* see segment_reuse */
} q = {.lock = PTHREAD_MUTEX_INITIALIZER, .old_parity = -1};

static _Atomic uint64_t *active_counter(uint64_t parity)
{
    return (parity & 1) ? &q.active_odd : &q.active_even;
}

/* Spare segments.  A retired segment whose grace period is over is parked
 * here by the consumer (segment_retire), and a producer that runs off the
 * end of the queue takes it instead of mapping a fresh one: munmap, mmap
 * and one page fault per 4 KiB of a fresh segment cost more than the rest
 * of a push together (bench/hook_bench.py, stub driver: ~1/3 of the hooks'
 * time per pair, plus the TLB-shootdown IPIs munmap sends to the producers'
 * cores).
 *
 * A reused segment keeps its old slots' publication words.  They are
 * harmless: each is old_seq + 1 for an old_seq below the segment's new
 * `first` (seqs only grow), and a slot counts as published only when the
 * word equals its own seq + 1.  A spare slot goes segment -> NULL only by
 * exchange (a producer taking it) and NULL -> segment only by
 * compare-exchange from NULL, so no one ever compares against a pointer
 * that may have been reused meanwhile (no ABA). */
static mh_segment *segment_reuse(uint64_t first)
{
    for (int i = 0; i < SPARE_SEGMENTS; i++) {
        if (atomic_load_explicit(&q.spare[i], memory_order_relaxed) == NULL)
            continue;
        mh_segment *s = atomic_exchange_explicit(&q.spare[i], NULL, memory_order_acquire);
        if (s != NULL) {
            /* Published to others by the CAS that links it (slot_of). */
            atomic_store_explicit(&s->next, NULL, memory_order_relaxed);
            s->first = first;
            s->limbo_next = NULL;
            return s;
        }
    }
    return NULL;
}

static mh_segment *segment_new(uint64_t first)
{
    mh_segment *reused = segment_reuse(first);
    if (reused != NULL)
        return reused;
    for (unsigned attempt = 0;; attempt++) {
        void *m = mmap(NULL, sizeof(mh_segment), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            mh_segment *s = m;  /* fresh anonymous memory is zero: no slot published */
            s->first = first;
            uint64_t live = atomic_fetch_add(&q.segments_live, 1) + 1;
            uint64_t peak = atomic_load(&q.segments_peak);
            while (live > peak && !atomic_compare_exchange_weak(&q.segments_peak, &peak, live)) {
            }
            return s;
        }
        /* Out of address space.  Dropping the event is not an option; the
         * consumer frees segments as it drains, so wait for it. */
        if (attempt == 0)
            mh_error("event queue: cannot map a %zu-byte segment (errno %d); "
                     "waiting for the consumer to drain", sizeof(mh_segment), errno);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void segment_free(mh_segment *s)
{
    munmap(s, sizeof(mh_segment));
    atomic_fetch_sub(&q.segments_live, 1);
}

/* A segment nobody can reach any more: park it as a spare, or unmap it
 * when the spares are full. */
static void segment_retire(mh_segment *s)
{
    for (int i = 0; i < SPARE_SEGMENTS; i++) {
        mh_segment *expected = NULL;
        if (atomic_compare_exchange_strong_explicit(&q.spare[i], &expected, s,
                                                    memory_order_release, memory_order_relaxed))
            return;
    }
    segment_free(s);
}

/* The first segment, made by whoever needs the queue first (a hook may run
 * from another library's constructor before ours). */
static _Atomic(mh_segment *) g_first;

static mh_segment *queue_first(void)
{
    mh_segment *first = atomic_load_explicit(&g_first, memory_order_acquire);
    if (first == NULL) {
        mh_segment *fresh = segment_new(0);
        if (atomic_compare_exchange_strong(&g_first, &first, fresh)) {
            first = fresh;
        } else {
            segment_free(fresh);
        }
    }
    mh_segment *t = NULL;  /* whoever gets here first points the hint at it */
    atomic_compare_exchange_strong(&q.tail, &t, first);
    return first;
}

__attribute__((constructor)) static void queue_init(void) { queue_first(); }

static uint64_t producer_enter(void)
{
    for (;;) {
        uint64_t e = atomic_load(&q.epoch);
        atomic_fetch_add(active_counter(e), 1);
        if (atomic_load(&q.epoch) == e)
            return e;
        atomic_fetch_sub(active_counter(e), 1);
    }
}

static void producer_leave(uint64_t e)
{
    atomic_fetch_sub_explicit(active_counter(e), 1, memory_order_release);
}

/* The slot of seq, appending segments as needed.  Inside an epoch section. */
static mh_slot *slot_of(mh_segment **sp, uint64_t seq)
{
    mh_segment *s = *sp;
    while (seq >= s->first + SEG_SLOTS) {
        mh_segment *n = atomic_load_explicit(&s->next, memory_order_acquire);
        if (n == NULL) {
            mh_segment *fresh = segment_new(s->first + SEG_SLOTS);
            mh_segment *expected = NULL;
            if (atomic_compare_exchange_strong(&s->next, &expected, fresh)) {
                n = fresh;
            } else {
                segment_retire(fresh);  /* never linked: nobody else saw it */
                n = expected;
            }
        }
        mh_segment *t = s;  /* move the hint forward by one, if nobody did */
        atomic_compare_exchange_strong(&q.tail, &t, n);
        s = n;
    }
    *sp = s;
    return &s->slots[seq - s->first];
}

uint64_t mh_queue_push(memhook_event *ev)
{
    uint64_t e = producer_enter();
    /* Load the hint before claiming: every segment the hint can reach
     * starts at or below any seq claimed after it was published. */
    mh_segment *s = atomic_load_explicit(&q.tail, memory_order_acquire);
    if (s == NULL) {
        queue_first();
        s = atomic_load_explicit(&q.tail, memory_order_acquire);
    }
    uint64_t seq = atomic_fetch_add(&q.next_seq, 1);
    mh_slot *slot = slot_of(&s, seq);
    /* Leave the epoch section BEFORE writing the slot.  The section only
     * guards the walk (the hint and the `next` links, which may lead
     * through segments being retired); the segment that holds our slot
     * cannot be retired or reused until every one of its slots is
     * published, ours included.  Leaving first keeps the locked decrement
     * from waiting for the slot's stores (a cache line the consumer has
     * been reading) to drain: measured, that wait was most of a push. */
    producer_leave(e);
    /* Everything but the publication word, then the word. */
    memcpy((char *)&slot->ev + sizeof ev->seq, (const char *)ev + sizeof ev->seq,
           sizeof *ev - sizeof ev->seq);
    slot_publish(slot, seq);
    ev->seq = seq;
    return seq;
}

void mh_queue_note_free_source(bool from_driver, bool unknown)
{
    if (from_driver)
        atomic_fetch_add_explicit(&q.free_from_driver, 1, memory_order_relaxed);
    if (unknown)
        atomic_fetch_add_explicit(&q.free_unknown, 1, memory_order_relaxed);
}

/* ---- consumer side (q.lock held) ---- */

/* Process-wide like the queue it watches: where drained batches are copied
 * to (the trace streamer's socket), or NULL. */
static _Atomic mh_queue_sink_fn g_sink;

/* The trace's own reader (csrc/trace/).  `memhook trace` must see every
 * event without taking any away from the process's own consumer (Python's
 * memhook or a native transport draining this queue), and a traced process
 * with no consumer must not keep every event.  So, under q.lock:
 *  - mh_queue_tee reads what is pending from g_tee_seq on WITHOUT consuming
 *    it, hands it to the sink and moves g_tee_seq past it;
 *  - a drain hands the sink only what the tee has not read yet;
 *  - mh_queue_trim: while no consumer has ever drained, the trace drops what
 *    it has read except the newest `keep` events, so memory stays bounded
 *    and a consumer that starts later still finds those. */
static uint64_t g_tee_seq;            /* first seq the sink has not seen */
static mh_segment *g_tee_seg;         /* where the tee stopped (a hint)... */
static uint64_t g_tee_seg_first;      /* ...valid while >= q.head->first */
static _Atomic bool g_consumer_seen;  /* memhook_events_drain was called */

/* The consumer moves past its full head segment: retire it.  Returns the
 * next segment, or NULL (none yet).  q.lock held. */
static mh_segment *advance_head(mh_segment *s)
{
    mh_segment *next = atomic_load_explicit(&s->next, memory_order_acquire);
    if (next == NULL)
        return NULL;
    /* No producer may find s through the hint any more. */
    mh_segment *t = s;
    atomic_compare_exchange_strong(&q.tail, &t, next);
    s->limbo_next = q.limbo_new;
    q.limbo_new = s;
    q.head = next;
    return next;
}

static void reclaim(void)
{
    if (q.old_parity >= 0) {
        if (atomic_load(active_counter((uint64_t)q.old_parity)) != 0)
            return;  /* a producer from before the flip is still inside */
        while (q.limbo_old) {
            mh_segment *s = q.limbo_old;
            q.limbo_old = s->limbo_next;
            segment_retire(s);
        }
        q.old_parity = -1;
    }
    if (q.limbo_new != NULL) {
        q.limbo_old = q.limbo_new;
        q.limbo_new = NULL;
        uint64_t e = atomic_fetch_add(&q.epoch, 1);
        q.old_parity = (int)(e & 1);
        if (atomic_load(active_counter(e)) == 0) {  /* usually: free at once */
            while (q.limbo_old) {
                mh_segment *s = q.limbo_old;
                q.limbo_old = s->limbo_next;
                segment_retire(s);
            }
            q.old_parity = -1;
        }
    }
}

size_t memhook_events_drain(memhook_event *out, size_t capacity)
{
    if (out == NULL && capacity != 0)
        return 0;
    if (!atomic_load_explicit(&g_consumer_seen, memory_order_relaxed))
        atomic_store(&g_consumer_seen, true);  /* the trace keeps its events for us now */
    /* Nothing claimed since the last drain and nothing to reclaim: the
     * common case of a query-heavy process, answered without the lock. */
    if (atomic_load_explicit(&q.next_seq, memory_order_acquire) ==
            atomic_load_explicit(&q.consumed_seq, memory_order_acquire) &&
        !atomic_load_explicit(&q.reclaim_pending, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&q.lock);
    if (q.head == NULL)
        q.head = queue_first();
    size_t n = 0;
    while (n < capacity) {
        mh_segment *s = q.head;
        uint64_t idx = q.head_seq - s->first;
        if (idx == SEG_SLOTS) {
            if (advance_head(s) == NULL)
                break;
            continue;
        }
        mh_slot *slot = &s->slots[idx];
        if (slot_ready(slot) != q.head_seq + 1)
            break;
        uint64_t seq = q.head_seq++;
        if (slot->ev.flags & MEMHOOK_EVENT_SKIPPED)
            continue;
        out[n] = slot->ev;
        out[n++].seq = seq;
    }
    q.consumed += n;
    mh_clock_convert(out, n);  /* raw TSC stamps -> CLOCK_MONOTONIC ns */
    /* The sink (set by `memhook trace`, csrc/trace/) sees every batch that
     * leaves the queue, whoever drains it, under this lock: exactly once
     * and in order (less what the trace's tee read already). */
    mh_queue_sink_fn sink = atomic_load_explicit(&g_sink, memory_order_acquire);
    if (sink != NULL && n != 0) {
        size_t first = 0;
        while (first < n && out[first].seq < g_tee_seq)
            first++;
        if (first < n)
            sink(out + first, n - first);
    }
    if (g_tee_seq < q.head_seq)
        g_tee_seq = q.head_seq;
    reclaim();
    atomic_store_explicit(&q.reclaim_pending, q.limbo_new != NULL || q.limbo_old != NULL,
                          memory_order_release);
    atomic_store_explicit(&q.consumed_seq, q.head_seq, memory_order_release);
    pthread_mutex_unlock(&q.lock);
    return n;
}

const volatile uint64_t *memhook_events_produced_counter(void)
{
    return (const volatile uint64_t *)&q.next_seq;
}

const volatile uint64_t *memhook_events_consumed_counter(void)
{
    return (const volatile uint64_t *)&q.consumed_seq;
}

void mh_queue_set_sink(mh_queue_sink_fn sink)
{
    atomic_store_explicit(&g_sink, sink, memory_order_release);
}

size_t mh_queue_tee(memhook_event *out, size_t capacity)
{
    pthread_mutex_lock(&q.lock);
    if (q.head == NULL)
        q.head = queue_first();
    uint64_t seq = g_tee_seq > q.head_seq ? g_tee_seq : q.head_seq;
    /* Segments from the head on stay mapped while we hold the lock. */
    mh_segment *s = g_tee_seg != NULL && g_tee_seg_first >= q.head->first ? g_tee_seg : q.head;
    size_t n = 0;
    while (n < capacity) {
        if (seq >= s->first + SEG_SLOTS) {
            mh_segment *next = atomic_load_explicit(&s->next, memory_order_acquire);
            if (next == NULL)
                break;
            s = next;
            continue;
        }
        mh_slot *slot = &s->slots[seq - s->first];
        if (slot_ready(slot) != seq + 1)
            break;
        seq++;
        if (slot->ev.flags & MEMHOOK_EVENT_SKIPPED)
            continue;
        out[n] = slot->ev;
        out[n++].seq = seq - 1;  /* the slot holds seq + 1 (slot_ready) */
    }
    g_tee_seq = seq;
    g_tee_seg = s;
    g_tee_seg_first = s->first;
    mh_clock_convert(out, n);
    mh_queue_sink_fn sink = atomic_load_explicit(&g_sink, memory_order_acquire);
    if (sink != NULL && n != 0)
        sink(out, n);
    pthread_mutex_unlock(&q.lock);
    return n;
}

void mh_queue_trim(uint64_t keep)
{
    if (atomic_load(&g_consumer_seen))
        return;
    pthread_mutex_lock(&q.lock);
    if (q.head != NULL && !atomic_load(&g_consumer_seen) && g_tee_seq > q.head_seq + keep) {
        uint64_t target = g_tee_seq - keep;  /* every slot below g_tee_seq is published */
        while (q.head_seq < target) {
            uint64_t end = q.head->first + SEG_SLOTS;
            if (q.head_seq == end) {
                if (advance_head(q.head) == NULL)
                    break;
                continue;
            }
            q.head_seq = target < end ? target : end;
        }
        reclaim();
        atomic_store_explicit(&q.reclaim_pending, q.limbo_new != NULL || q.limbo_old != NULL,
                              memory_order_release);
        atomic_store_explicit(&q.consumed_seq, q.head_seq, memory_order_release);
    }
    pthread_mutex_unlock(&q.lock);
}

void memhook_queue_stats_get(memhook_queue_stats *out)
{
    if (out == NULL)
        return;
    pthread_mutex_lock(&q.lock);
    out->produced = atomic_load(&q.next_seq);
    /* Slots taken out, skipped ones included (a fork leaves the slots of
     * vanished producers SKIPPED), so produced - consumed is what is
     * pending, in a fork child too. */
    out->consumed = q.head_seq;
    out->segments_live = atomic_load(&q.segments_live);
    out->segments_peak = atomic_load(&q.segments_peak);
    out->segment_bytes = sizeof(mh_segment);
    out->free_size_from_driver = atomic_load(&q.free_from_driver);
    out->free_size_unknown = atomic_load(&q.free_unknown);
    pthread_mutex_unlock(&q.lock);
}

/* ---- fork ---- */

static void fork_prepare(void) { pthread_mutex_lock(&q.lock); }
static void fork_parent(void) { pthread_mutex_unlock(&q.lock); }

static void fork_child(void)
{
    /* Only this thread survived: nobody is inside a producer section, and
     * every claimed but unpublished slot belongs to a thread that is gone. */
    atomic_store(&q.active_even, 0);
    atomic_store(&q.active_odd, 0);
    uint64_t end = atomic_load(&q.next_seq);
    if (q.head == NULL)
        q.head = queue_first();
    mh_segment *s = q.head;
    for (uint64_t seq = q.head_seq; seq < end; seq++) {
        mh_slot *slot = slot_of(&s, seq);
        if (slot_ready(slot) != seq + 1) {
            memset((char *)&slot->ev + sizeof slot->ev.seq, 0,
                   sizeof slot->ev - sizeof slot->ev.seq);
            slot->ev.flags = MEMHOOK_EVENT_SKIPPED;
            slot_publish(slot, seq);
        }
    }
    pthread_mutex_init(&q.lock, NULL);
    mh_emit_after_fork_child();
}

__attribute__((constructor)) static void queue_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
