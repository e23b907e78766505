/*
 * event_queue.c - the lock-free, multi-producer, growable event queue.
 *
 * Shape: a singly linked list of fixed-size segments.  A producer claims a
 * sequence number with one fetch_add (that is the event order), finds the
 * segment holding it by walking forward from the `tail` hint (appending a
 * fresh segment with a CAS when it runs off the end), writes the event and
 * publishes it with a release store of seq+1 into the slot.  Nothing is
 * ever dropped: a full segment just means a new one.
 *
 * Consumers (memhook_events_drain) serialise on a mutex that no producer
 * ever takes, and take events strictly in seq order: a claimed slot whose
 * producer has not published yet ends the batch.
 *
 * Memory stays bounded while the queue is drained: consumed segments are
 * unmapped after a grace period.  A producer may still hold a pointer to an
 * old segment (it loaded `tail` long ago), so retirement uses a two-epoch
 * scheme: producers announce themselves in active[epoch & 1] for the few
 * instructions they touch segments; the consumer retires segments into a
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

typedef struct mh_slot {
    _Atomic uint64_t ready;   /* seq + 1 once published; 0 before */
    memhook_event ev;
} mh_slot;

typedef struct mh_segment {
    _Atomic(struct mh_segment *) next;
    uint64_t first;               /* seq of slots[0] */
    struct mh_segment *limbo_next; /* consumer only */
    mh_slot slots[SEG_SLOTS];
} mh_segment;

/* The one queue of the process: every hook in every thread appends to it,
 * which is what gives events a single order. */
static struct {
    _Alignas(64) _Atomic uint64_t next_seq;
    _Alignas(64) _Atomic(mh_segment *) tail;
    _Alignas(64) _Atomic uint64_t epoch;
    _Alignas(64) _Atomic uint64_t active_even;
    _Alignas(64) _Atomic uint64_t active_odd;
    _Alignas(64) pthread_mutex_t lock;     /* consumers only */
    mh_segment *head;                      /* consumer: oldest live segment */
    uint64_t head_seq;                     /* consumer: next seq to hand out */
    mh_segment *limbo_new;                 /* retired since the last flip */
    mh_segment *limbo_old;                 /* retired before it */
    int old_parity;                        /* parity whose count must reach 0 */
    uint64_t consumed;
    _Atomic uint64_t segments_live;
    _Atomic uint64_t segments_peak;
    _Atomic uint64_t free_from_driver;
    _Atomic uint64_t free_unknown;
} q = {.lock = PTHREAD_MUTEX_INITIALIZER, .old_parity = -1};

static _Atomic uint64_t *active_counter(uint64_t parity)
{
    return (parity & 1) ? &q.active_odd : &q.active_even;
}

static mh_segment *segment_new(uint64_t first)
{
    for (unsigned attempt = 0;; attempt++) {
        void *m = mmap(NULL, sizeof(mh_segment), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            mh_segment *s = m;  /* fresh anonymous memory is zero: no slot ready */
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
                segment_free(fresh);
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
    ev->seq = seq;
    slot->ev = *ev;
    atomic_store_explicit(&slot->ready, seq + 1, memory_order_release);
    producer_leave(e);
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

static void reclaim(void)
{
    if (q.old_parity >= 0) {
        if (atomic_load(active_counter((uint64_t)q.old_parity)) != 0)
            return;  /* a producer from before the flip is still inside */
        while (q.limbo_old) {
            mh_segment *s = q.limbo_old;
            q.limbo_old = s->limbo_next;
            segment_free(s);
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
                segment_free(s);
            }
            q.old_parity = -1;
        }
    }
}

size_t memhook_events_drain(memhook_event *out, size_t capacity)
{
    if (out == NULL && capacity != 0)
        return 0;
    pthread_mutex_lock(&q.lock);
    if (q.head == NULL)
        q.head = queue_first();
    size_t n = 0;
    while (n < capacity) {
        mh_segment *s = q.head;
        uint64_t idx = q.head_seq - s->first;
        if (idx == SEG_SLOTS) {
            mh_segment *next = atomic_load_explicit(&s->next, memory_order_acquire);
            if (next == NULL)
                break;
            /* No producer may find s through the hint any more. */
            mh_segment *t = s;
            atomic_compare_exchange_strong(&q.tail, &t, next);
            s->limbo_next = q.limbo_new;
            q.limbo_new = s;
            q.head = next;
            continue;
        }
        mh_slot *slot = &s->slots[idx];
        if (atomic_load_explicit(&slot->ready, memory_order_acquire) != q.head_seq + 1)
            break;
        q.head_seq++;
        if (slot->ev.flags & MEMHOOK_EVENT_SKIPPED)
            continue;
        out[n++] = slot->ev;
    }
    q.consumed += n;
    reclaim();
    pthread_mutex_unlock(&q.lock);
    return n;
}

void memhook_queue_stats_get(memhook_queue_stats *out)
{
    if (out == NULL)
        return;
    pthread_mutex_lock(&q.lock);
    out->produced = atomic_load(&q.next_seq);
    out->consumed = q.consumed;
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
        if (atomic_load(&slot->ready) != seq + 1) {
            memset(&slot->ev, 0, sizeof slot->ev);
            slot->ev.seq = seq;
            slot->ev.flags = MEMHOOK_EVENT_SKIPPED;
            atomic_store(&slot->ready, seq + 1);
        }
    }
    pthread_mutex_init(&q.lock, NULL);
    mh_emit_after_fork_child();
}

__attribute__((constructor)) static void queue_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
