/*
 * event_lane.c - lanes and their segments: what a producer needs beyond
 * the inline fast path of event_lane.h.
 *
 * Taking a lane (a thread's first event): reuse a FREE one (CAS FREE ->
 * OWNED), else map a fresh one and push it on the list.  A pthread key's
 * destructor marks the lane ORPHAN when the thread exits; the drain turns
 * an ORPHAN lane it has emptied into FREE (event_drain.c).
 *
 * Segments: a producer whose segment is full links the next one - the
 * lane's spare (a segment the drain emptied), one of the process's spares,
 * or a fresh mapping - and never waits for the consumer: the queue grows
 * instead of dropping.  Memory stays bounded while the queue is drained:
 * the drain hands each emptied segment back (mh_lane_seg_put) and nothing
 * else holds it - its producer moved on when it linked the next one, so no
 * grace period is needed.
 *
 * fork(): only the forking thread lives on in the child.  Every other
 * lane's events up to its `published` count are whole (a slot is written
 * before the count moves past it), so the child drains them like any
 * other; those lanes are then ORPHAN, as if their threads had exited.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "event_lane.h"
#include "log.h"

/* Process-wide, as the event order they make up: every thread's lane. */
_Atomic(mh_lane *) mh_lanes;
/* Process-wide: one flag for "some lane has news", read before every
 * query (see event_lane.h). */
struct mh_pending_line mh_events_pending;
/* Process-wide, as the addresses it is keyed by (event_lane.h); 512 KiB of
 * zero pages until addresses land on them. */
_Atomic uint64_t mh_addr_chain[1u << MH_ADDR_CHAIN_BITS];
/* The last lane id handed out (event_lane.h: MH_LANE_IDS). */
static _Atomic uint32_t g_lane_ids;

/* Drained segments kept mapped for any lane (1 MiB): mapping a fresh one
 * costs a system call and four page faults, and unmapping one a TLB
 * shootdown that interrupts every core the process runs on - a producer
 * too.  A drainer that falls behind a burst frees what is beyond this.  Process-wide pool, lock-free: a slot
 * goes segment -> NULL only by exchange and NULL -> segment only by CAS
 * from NULL, so nobody compares against a reused pointer (no ABA). */
#define SPARE_SEGMENTS 64
static _Atomic(mh_lane_seg *) g_spares[SPARE_SEGMENTS];
static _Atomic uint64_t g_segments_live, g_segments_peak;

/* Thread exit: the key's destructor orphans the lane. */
static pthread_key_t g_lane_key;
static pthread_once_t g_lane_key_once = PTHREAD_ONCE_INIT;

static void lane_thread_exit(void *arg)
{
    mh_lane *lane = arg;
    if (mh_my_lane == lane)
        mh_my_lane = NULL;  /* a later event (another key's destructor) takes a new lane */
    atomic_store_explicit(&lane->state, MH_LANE_ORPHAN, memory_order_release);
}

static void lane_key_create(void)
{
    if (pthread_key_create(&g_lane_key, lane_thread_exit) != 0)
        mh_error("event queue: pthread_key_create failed; lanes of exited threads "
                 "will not be reused");
}

static void *map_or_wait(size_t bytes, const char *what)
{
    for (unsigned attempt = 0;; attempt++) {
        /* Populated: a segment is written whole by the hook that takes
         * it, so its pages come in with this one system call rather than
         * as four faults taken in the producer's next events. */
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (m != MAP_FAILED)
            return m;
        /* Out of memory or address space.  Dropping the event is not an
         * option; the consumer frees segments as it drains, so wait. */
        if (attempt == 0)
            mh_error("event queue: cannot map a %s of %zu bytes (errno %d); waiting for the "
                     "consumer to drain", what, bytes, errno);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

mh_lane_seg *mh_lane_seg_get(mh_lane *lane)
{
    mh_lane_seg *s = NULL;
    if (lane != NULL && atomic_load_explicit(&lane->spare, memory_order_relaxed) != NULL)
        s = atomic_exchange_explicit(&lane->spare, NULL, memory_order_acquire);
    for (int i = 0; s == NULL && i < SPARE_SEGMENTS; i++)
        if (atomic_load_explicit(&g_spares[i], memory_order_relaxed) != NULL)
            s = atomic_exchange_explicit(&g_spares[i], NULL, memory_order_acquire);
    if (s == NULL) {
        s = map_or_wait(sizeof *s, "lane segment");
        uint64_t live = atomic_fetch_add(&g_segments_live, 1) + 1;
        uint64_t peak = atomic_load(&g_segments_peak);
        while (live > peak && !atomic_compare_exchange_weak(&g_segments_peak, &peak, live)) {
        }
    }
    atomic_store_explicit(&s->next, NULL, memory_order_relaxed);
    return s;
}

void mh_lane_seg_put(mh_lane *lane, mh_lane_seg *seg)
{
    mh_lane_seg *expected = NULL;
    if (lane != NULL && atomic_compare_exchange_strong_explicit(
                            &lane->spare, &expected, seg, memory_order_release,
                            memory_order_relaxed))
        return;
    for (int i = 0; i < SPARE_SEGMENTS; i++) {
        expected = NULL;
        if (atomic_compare_exchange_strong_explicit(&g_spares[i], &expected, seg,
                                                    memory_order_release, memory_order_relaxed))
            return;
    }
    munmap(seg, sizeof *seg);
    atomic_fetch_sub(&g_segments_live, 1);
}

void mh_lane_seg_stats(uint64_t *live, uint64_t *peak)
{
    *live = atomic_load(&g_segments_live);
    *peak = atomic_load(&g_segments_peak);
}

static void lane_start_segment(mh_lane *lane, mh_lane_seg *seg)
{
    lane->write_seg = seg;
    lane->write_at = &seg->slots[0];
    lane->write_end = &seg->slots[MH_LANE_SEG_SLOTS];
}

static mh_lane *lane_take(void)
{
    pthread_once(&g_lane_key_once, lane_key_create);
    int32_t tid = (int32_t)syscall(SYS_gettid);
    for (mh_lane *l = atomic_load_explicit(&mh_lanes, memory_order_acquire); l != NULL;
         l = l->next) {
        int expected = MH_LANE_FREE;
        if (atomic_load_explicit(&l->state, memory_order_relaxed) == MH_LANE_FREE &&
            atomic_compare_exchange_strong_explicit(&l->state, &expected, MH_LANE_OWNED,
                                                    memory_order_acquire,
                                                    memory_order_relaxed)) {
            l->tid = tid;  /* its segments and counts carry on where they were */
            return l;
        }
    }
    mh_lane *l = map_or_wait(sizeof *l, "lane");  /* zeroed */
    mh_lane_span_init(l);
    mh_lane_seg *seg = mh_lane_seg_get(NULL);
    seg->first = 0;
    lane_start_segment(l, seg);
    l->read_seg = seg;
    l->tid = tid;
    l->look_cursor = -1;
    uint32_t id = atomic_fetch_add_explicit(&g_lane_ids, 1, memory_order_relaxed) + 1;
    l->id = id <= MH_LANE_IDS ? id : 0;
    l->cid = l->id;
    atomic_store_explicit(&l->state, MH_LANE_OWNED, memory_order_relaxed);
    mh_lane *head = atomic_load_explicit(&mh_lanes, memory_order_relaxed);
    do {
        l->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&mh_lanes, &head, l, memory_order_release,
                                                    memory_order_relaxed));
    return l;
}

/* Process-wide, as the lanes: set once at load, read by every producer. */
static _Atomic(mh_lane_segment_fn) g_on_segment;

void mh_lane_set_on_segment(mh_lane_segment_fn fn)
{
    atomic_store_explicit(&g_on_segment, fn, memory_order_release);
}

memhook_event *mh_lane_slow_slot(void)
{
    mh_lane *lane = mh_my_lane;
    if (lane == NULL) {
        lane = lane_take();
        mh_my_lane = lane;
        pthread_setspecific(g_lane_key, lane);
    }
    if (lane->write_at == lane->write_end) {
        mh_lane_seg *seg = mh_lane_seg_get(lane);
        seg->first = lane->write_seg->first + MH_LANE_SEG_SLOTS;
        /* Linked before any of its slots is published: a consumer that
         * reads `published` past the old segment finds the link. */
        atomic_store_explicit(&lane->write_seg->next, seg, memory_order_release);
        lane_start_segment(lane, seg);
    }
    mh_lane_segment_fn on_segment = atomic_load_explicit(&g_on_segment, memory_order_acquire);
    if (on_segment != NULL)
        on_segment();
    return lane->write_at;
}

/* ---- fork (called by mh_queue_fork_child, event_drain.c) ---- */

void mh_lanes_fork_child(void)
{
    mh_lane *mine = mh_my_lane;
    for (mh_lane *l = atomic_load(&mh_lanes); l != NULL; l = l->next)
        if (l != mine && atomic_load(&l->state) == MH_LANE_OWNED)
            atomic_store(&l->state, MH_LANE_ORPHAN);
    if (mine != NULL)
        mine->tid = (int32_t)syscall(SYS_gettid);
}
