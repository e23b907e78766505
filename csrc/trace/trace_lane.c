/*
 * trace_lane.c - the trace area: a per-process-image memfd of per-thread
 * segments the hooks copy every event into (trace_lane.h; the layout and
 * the segment states are in trace_proto.h).
 *
 * Why a memfd the collector also holds: what a process recorded is then
 * the collector's to read whatever happens to the process next - it may
 * _exit, be SIGKILLed, crash, exec, close or dup2 over every descriptor -
 * because the pages belong to the memfd, not to the process.
 *
 * fork: the segments are MADV_DONTFORK, so a child can never write into
 * its parent's segments; trace.c's child handler forgets the area (bumping
 * the generation every thread's cached segment is checked against) and
 * makes the child its own.  A child made by a raw fork or clone system
 * call runs no handler: the pointer to the area lives in a page the kernel
 * wipes in every child (MADV_WIPEONFORK), so such a child finds no area -
 * the hooks' existing "no area" branch, no getpid() per event - and counts
 * its events in lost_forked of the header page it did inherit (the one
 * page of the area that is not MADV_DONTFORK), which the collector reports.
 *
 * The memfd is sealed against shrinking and growing (F_SEAL_SHRINK,
 * F_SEAL_GROW, F_SEAL_SEAL) where the kernel allows it: nothing the
 * program does can cut the area under the collector's reads.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "mh_frames.h"
#include "mh_objects.h"
#include "mh_text.h"
#include "pyframes.h"
#include "queue.h"
#include "trace_lane.h"

_Static_assert(sizeof(mh_trace_area) <= 4096, "the area header is one page");
_Static_assert(offsetof(mh_trace_area, fresh) == 128, "producers' line");
_Static_assert(offsetof(mh_trace_area, done_total) == 192, "collector's line");
_Static_assert(offsetof(mh_trace_area, py_depth) == offsetof(mh_trace_area, stack_depth) + 4 &&
                   offsetof(mh_trace_area, stack_depth) % 8 == 0,
               "the hook reads both depths as one word");

#define SEG_BYTES ((uint64_t)MH_TRACE_SEG_EVENTS * sizeof(memhook_event))
/* How many done segments a claim tries before it takes a fresh one:
 * enough that a collector keeping up keeps the area small. */
#define REUSE_TRIES 8

MH_HOT _Atomic int mh_trace_on;

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

/* Process-wide by nature: the one area of this process image, in a page
 * of its own that every fork child sees zeroed (see the top of the file).
 * A .bss variable cannot be wiped (it is not an anonymous mapping of its
 * own), hence the page; g_local_fallback where the kernel has no
 * MADV_WIPEONFORK (< 4.14): a raw-fork child there writes into nothing, as
 * every child did before. */
struct fork_local {
    mh_trace_area *_Atomic area;
};
static struct fork_local *_Atomic g_local;
static struct fork_local g_local_fallback;
/* The header page of this image's area, or in a raw-fork child its
 * parent's (inherited): where a child that has no area counts its events.
 * Cleared, and the inherited page unmapped, by a fork() child's handler. */
static mh_trace_area *_Atomic g_header;
/* The area's generation (bumped whenever the area is forgotten, so a
 * thread's cached segment of an older one is never written). */
static _Atomic uint32_t g_gen = 1;
/* Events that came while there was no area (between a fork and the
 * child's new area): added to the next area's `lost`. */
static _Atomic uint64_t g_lost_without_area;
/* done_total when a full search last found nothing: until the collector
 * finishes another segment, a full area is not searched again.  With it,
 * why that search found nothing: segments waited for the collector (1), or
 * every one was owned by a live thread (0) - counted in lost or lost_owned,
 * so the collector can name the cause. */
static _Atomic uint64_t g_full_at = UINT64_MAX;
static _Atomic int g_full_behind = 1;
/* Closes a thread's segment when it exits (so the segment can be reused). */
static pthread_key_t g_exit_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
/* Streamer vs exit; a leaf of the lock order (csrc/core/mh_lock_order.h). */
static pthread_mutex_t g_anchor_lock = PTHREAD_MUTEX_INITIALIZER;

/* The calling thread's segment. */
static __thread struct {
    uint32_t gen;  /* g_gen it was claimed under; 0: none */
    uint32_t seg;
    uint32_t at;   /* events written into it */
} tl __attribute__((tls_model("initial-exec")));

static uint32_t *state_of(mh_trace_area *a) { return (uint32_t *)((char *)a + a->state_off); }
static int32_t *tid_of(mh_trace_area *a) { return (int32_t *)((char *)a + a->tid_off); }
static uint64_t *claim_of(mh_trace_area *a) { return (uint64_t *)((char *)a + a->claim_off); }
static uint64_t *pub_of(mh_trace_area *a) { return (uint64_t *)((char *)a + a->published_off); }
static uint64_t *done_of(mh_trace_area *a) { return (uint64_t *)((char *)a + a->done_off); }
static uint64_t *first_of(mh_trace_area *a) { return (uint64_t *)((char *)a + a->first_off); }
static memhook_event *events_of(mh_trace_area *a, uint32_t seg)
{
    return (memhook_event *)((char *)a + a->events_off + seg * SEG_BYTES);
}

static void close_segment(mh_trace_area *a, uint32_t seg)
{
    __atomic_store_n(&state_of(a)[seg], MH_TRACE_SEG_CLOSED, __ATOMIC_RELEASE);
}

static mh_trace_area *current_area(void)
{
    struct fork_local *l = atomic_load_explicit(&g_local, memory_order_acquire);
    return l != NULL ? atomic_load_explicit(&l->area, memory_order_acquire) : NULL;
}

static void thread_exit(void *unused)
{
    (void)unused;
    mh_trace_area *a = current_area();
    if (a != NULL && tl.gen == atomic_load(&g_gen))
        close_segment(a, tl.seg);
    tl.gen = 0;
}

static void make_key(void) { pthread_key_create(&g_exit_key, thread_exit); }

static bool take(mh_trace_area *a, uint32_t i, uint32_t from)
{
    uint32_t expect = from;
    return __atomic_compare_exchange_n(&state_of(a)[i], &expect, MH_TRACE_SEG_CLAIMING, false,
                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

/* A CLOSED segment the collector finished. */
static bool take_done(mh_trace_area *a, uint32_t i)
{
    if (__atomic_load_n(&state_of(a)[i], __ATOMIC_RELAXED) != MH_TRACE_SEG_CLOSED)
        return false;
    uint64_t claim = __atomic_load_n(&claim_of(a)[i], __ATOMIC_RELAXED);
    if (__atomic_load_n(&done_of(a)[i], __ATOMIC_ACQUIRE) != claim)
        return false;
    return take(a, i, MH_TRACE_SEG_CLOSED);
}

static long find_segment(mh_trace_area *a)
{
    uint64_t used = __atomic_load_n(&a->fresh, __ATOMIC_RELAXED);
    if (used > a->nseg)
        used = a->nseg;
    for (int k = 0; used > 0 && k < REUSE_TRIES; k++) {
        uint32_t i = (uint32_t)(__atomic_fetch_add(&a->scan, 1, __ATOMIC_RELAXED) % used);
        if (take_done(a, i))
            return i;
    }
    if (used < a->nseg) {
        uint64_t i = __atomic_fetch_add(&a->fresh, 1, __ATOMIC_RELAXED);
        if (i < a->nseg && take(a, (uint32_t)i, MH_TRACE_SEG_FREE))
            return (long)i;
    }
    /* Full: look at every segment, but only once per segment the
     * collector finishes (a stalled collector must not make every event
     * cost a search). */
    uint64_t done = __atomic_load_n(&a->done_total, __ATOMIC_ACQUIRE);
    if (atomic_load_explicit(&g_full_at, memory_order_relaxed) == done)
        return -1;
    uint32_t waiting = 0;  /* CLOSED, not yet finished by the collector */
    for (uint32_t i = 0; i < a->nseg; i++) {
        if (__atomic_load_n(&state_of(a)[i], __ATOMIC_RELAXED) != MH_TRACE_SEG_CLOSED)
            continue;
        if (take_done(a, i))
            return i;
        waiting++;
    }
    atomic_store_explicit(&g_full_behind, waiting != 0, memory_order_relaxed);
    atomic_store_explicit(&g_full_at, done, memory_order_relaxed);
    return -1;
}

/* Out of line: the thread has no segment of this area, or it is full. */
static bool claim(mh_trace_area *a, uint32_t gen, int32_t tid, uint64_t first)
{
    if (tl.gen == gen)
        close_segment(a, tl.seg);
    else
        pthread_setspecific(g_exit_key, (void *)1);  /* key < 32: no malloc */
    tl.gen = 0;
    long i = find_segment(a);
    if (i < 0)
        return false;
    uint32_t seg = (uint32_t)i;
    __atomic_store_n(&pub_of(a)[seg], 0, __ATOMIC_RELAXED);
    tid_of(a)[seg] = tid;
    first_of(a)[seg] = first;
    uint64_t n = __atomic_fetch_add(&a->claims, 1, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&claim_of(a)[seg], n, __ATOMIC_RELEASE);
    __atomic_store_n(&state_of(a)[seg], MH_TRACE_SEG_OWNED, __ATOMIC_RELEASE);
    tl.gen = gen;
    tl.seg = seg;
    tl.at = 0;
    mh_trace_want_streamer();  /* the image's first event starts it (trace.c) */
    return true;
}

/* --stacks: this ALLOC's native frames into a stack record of its own;
 * 1 + its index, or 0 when the records are used up (counted there). */
static uint64_t record_stack(mh_trace_area *a)
{
    uint64_t i = __atomic_fetch_add(&a->stacks_next, 1, __ATOMIC_RELAXED);
    if (i >= a->stacks_cap)
        return 0;
    uint64_t *rec = (uint64_t *)((char *)a + a->stacks_off + i * (a->stack_depth + 1) * 8);
    rec[0] = mh_frames_stack(&mh_caller_tl, rec + 1, a->stack_depth, mh_text_contains);
    return i + 1;
}

/* --stacks, --python: what the ALLOC's seq in the area says (trace_proto.h). */
static uint64_t record_frames(mh_trace_area *a)
{
    uint64_t seq = a->stack_depth != 0 ? record_stack(a) : 0;
    if (a->py_depth != 0)
        seq |= mh_pyframes_record(a) << 32;
    return seq;
}

/* Out of line: an event with no area to go to - a fork child before its
 * own area (none of the program's code runs then), one whose area could
 * not be made, or a raw-fork child, whose only record of it is the
 * parent's counter in the header page it inherited. */
static void lost_without_area(void)
{
    mh_trace_area *h = atomic_load_explicit(&g_header, memory_order_relaxed);
    if (h != NULL)
        __atomic_fetch_add(&h->lost_forked, 1, __ATOMIC_RELAXED);
    else
        atomic_fetch_add_explicit(&g_lost_without_area, 1, memory_order_relaxed);
}

void mh_trace_record(const memhook_event *e)
{
    mh_trace_area *a = current_area();
    if (__builtin_expect(a == NULL, 0)) {
        lost_without_area();
        return;
    }
    uint32_t gen = atomic_load_explicit(&g_gen, memory_order_relaxed);
    if (__builtin_expect(tl.gen != gen || tl.at == MH_TRACE_SEG_EVENTS, 0) && !claim(a, gen, e->tid, e->timestamp_ns)) {
        if (atomic_load_explicit(&g_full_behind, memory_order_relaxed))
            __atomic_fetch_add(&a->lost, 1, __ATOMIC_RELAXED);
        else
            __atomic_fetch_add(&a->lost_owned, 1, __ATOMIC_RELAXED);
        return;
    }
    memhook_event *slot = &events_of(a, tl.seg)[tl.at];
    *slot = *e;
    /* The queue's own words are not the trace's (queue.h): its link in
     * seq, its private flags (but the raw-TSC one, which the collector
     * converts). */
    slot->seq = 0;
    slot->flags &= ~(MH_EVENT_PRIVATE & ~MH_EVENT_RAW_TSC);
    uint64_t depths;  /* stack_depth and py_depth: one load, one test */
    memcpy(&depths, &a->stack_depth, sizeof depths);
    if (__builtin_expect(depths != 0, 0) && e->kind == MEMHOOK_EVENT_ALLOC)
        slot->seq = record_frames(a);
    tl.at++;
    __atomic_store_n(&pub_of(a)[tl.seg], tl.at, __ATOMIC_RELEASE);
}

static uint64_t align_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

static void anchor_now(uint64_t *tsc, uint64_t *ns)
{
    if (!mh_clock_tsc) {
        *tsc = 0;
        *ns = mh_monotonic_ns();
        return;
    }
    mh_clock_anchor(tsc, ns);
}

static struct fork_local *local_page(void)
{
    struct fork_local *l = atomic_load(&g_local);
    if (l != NULL)
        return l;  /* (a fork child's copy of the page is wiped, and still wipes) */
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && madvise(p, 4096, MADV_WIPEONFORK) == 0) {
        l = p;
    } else {
        mh_debug("memhook trace: no MADV_WIPEONFORK (%s): a child made by a raw fork "
                 "system call would write into nothing", strerror(errno));
        if (p != MAP_FAILED)
            munmap(p, 4096);
        l = &g_local_fallback;
    }
    atomic_store(&g_local, l);
    return l;
}

/* A memfd that can be sealed, where the kernel knows MFD_ALLOW_SEALING. */
static int area_memfd(void)
{
    int fd = memfd_create("memhook-trace", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 && errno == EINVAL)
        fd = memfd_create("memhook-trace", MFD_CLOEXEC);
    return fd;
}

int mh_trace_area_create(unsigned mb, unsigned stack_depth, unsigned py_depth)
{
    pthread_once(&g_key_once, make_key);
    struct fork_local *local = local_page();
    uint64_t nseg = (uint64_t)mb * 1024 * 1024 / SEG_BYTES;
    uint64_t off = 4096;
    uint64_t state_off = off;
    off = align_up(off + nseg * 4, 64);
    uint64_t tid_off = off;
    off = align_up(off + nseg * 4, 64);
    uint64_t claim_off = off;
    off = align_up(off + nseg * 8, 64);
    uint64_t pub_off = off;
    off = align_up(off + nseg * 8, 64);
    uint64_t done_off = off;
    off = align_up(off + nseg * 8, 64);
    uint64_t first_off = off;
    off = align_up(off + nseg * 8, 4096);
    uint64_t modules_off = off;
    off = align_up(off + MH_TRACE_MODULES_BYTES, 4096);
    uint64_t stacks_off = off;
    uint64_t stacks_cap = stack_depth == 0 ? 0
                          : (uint64_t)MH_TRACE_STACKS_MB * 1024 * 1024 / ((stack_depth + 1) * 8);
    off = align_up(off + stacks_cap * (stack_depth + 1) * 8, 4096);
    uint64_t py_off = off;
    uint64_t py_cap = py_depth ? (uint64_t)MH_TRACE_PY_MB * 1024 * 1024 : 0;
    off = align_up(off + py_cap, 4096);
    uint64_t codes_off = off;
    uint64_t codes_cap = py_depth ? (uint64_t)MH_TRACE_CODES_MB * 1024 * 1024 : 0;
    off = align_up(off + codes_cap, 4096);
    uint64_t events_off = off;
    uint64_t size = events_off + nseg * SEG_BYTES;
    int fd = area_memfd();
    if (fd < 0)
        return -1;
    void *map = MAP_FAILED;
    if (ftruncate(fd, (off_t)size) == 0) {
        /* Where sealing is refused (no MFD_ALLOW_SEALING), the collector
         * reads with pread and survives a shrink on its own. */
        (void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
        map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    /* All but the header page: a raw-fork child counts its losses there. */
    if (map == MAP_FAILED || madvise((char *)map + 4096, size - 4096, MADV_DONTFORK) != 0) {
        int err = errno;
        if (map != MAP_FAILED)
            munmap(map, size);
        close(fd);
        errno = err;
        return -1;
    }
    mh_trace_area *a = map;
    a->magic = MH_TRACE_AREA_MAGIC;
    a->version = MH_TRACE_VERSION;
    a->seg_events = MH_TRACE_SEG_EVENTS;
    a->nseg = (uint32_t)nseg;
    a->size = size;
    a->state_off = state_off;
    a->tid_off = tid_off;
    a->claim_off = claim_off;
    a->published_off = pub_off;
    a->done_off = done_off;
    a->events_off = events_off;
    a->first_off = first_off;
    a->modules_off = modules_off;
    a->modules_cap = MH_TRACE_MODULES_BYTES;
    a->stacks_off = stacks_off;
    a->stacks_cap = stacks_cap;
    a->stack_depth = stack_depth;
    a->py_depth = py_depth;
    a->py_off = py_off;
    a->py_cap = py_cap;
    a->codes_off = codes_off;
    a->codes_cap = codes_cap;
    a->pid = (int32_t)getpid();
    anchor_now(&a->tsc0, &a->ns0);
    a->tsc1 = a->tsc0;
    a->ns1 = a->ns0;
    a->lost = atomic_exchange(&g_lost_without_area, 0);
    atomic_store(&g_full_at, UINT64_MAX);
    atomic_store(&g_full_behind, 1);
    atomic_store(&g_header, a);
    atomic_store_explicit(&local->area, a, memory_order_release);
    atomic_store(&mh_trace_on, 1);
    mh_objects_watch_dl();  /* dlopen/dlclose now write module records */
    return fd;
}

mh_trace_area *mh_trace_area_current(void) { return current_area(); }

void mh_trace_area_forget(void)
{
    /* The fork child: the parent's segments are not here (MADV_DONTFORK),
     * and its header page, which is, is not this child's to write. */
    struct fork_local *l = atomic_load(&g_local);
    if (l != NULL)
        atomic_store(&l->area, NULL);
    mh_trace_area *h = atomic_exchange(&g_header, NULL);
    if (h != NULL)
        munmap(h, 4096);
    atomic_fetch_add(&g_gen, 1);
    tl.gen = 0;
    pthread_mutex_init(&g_anchor_lock, NULL);
}

void mh_trace_area_anchor(void)
{
    mh_trace_area *a = current_area();
    if (a == NULL)
        return;
    uint64_t tsc, ns;
    anchor_now(&tsc, &ns);
    pthread_mutex_lock(&g_anchor_lock);
    /* A seqlock the collector reads: odd while the pair changes.  Release
     * stores keep the three in order (plain stores on x86-64). */
    __atomic_store_n(&a->anchor_seq, a->anchor_seq + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&a->tsc1, tsc, __ATOMIC_RELEASE);
    __atomic_store_n(&a->ns1, ns, __ATOMIC_RELEASE);
    __atomic_store_n(&a->anchor_seq, a->anchor_seq + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_anchor_lock);
}

void mh_trace_area_mark_exited(void)
{
    mh_trace_area *a = current_area();
    if (a != NULL)
        __atomic_store_n(&a->exited, 1, __ATOMIC_RELEASE);
}
