/*
 * region_map.c - the memory-type cache's map: one immutable snapshot of
 * sorted regions, published by an atomic pointer, replaced whole by its one
 * writer, read by any number of threads with no lock and no wait.
 *
 * A reader takes one acquire load of an immutable snapshot: no validation,
 * no retry, no lock, so it never waits for the writer and a signal handler
 * reads the last published state.  The one writer pays instead: each
 * drained batch is folded and merged into a new array, O(n + k log k).
 * Old snapshots are freed by epochs with an asymmetric fence (membarrier;
 * readers fence themselves where it is missing): a reader pays plain
 * stores to a slot of its own thread, no fence.  Memory comes from mmap, not malloc: a query that remembers
 * a driver answer writes, and a query must not malloc (it may run in a
 * signal handler, or inside malloc's own caller).
 * docs/design/native-cache.md has the argument.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache.h"
#include "log.h"

/* ---- memory ---- */

static void *map_bytes(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The same, populated at once: a snapshot is written whole right after,
 * and a fault a page costs a large commit more than its copy. */
static void *map_populated(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static size_t page_round(size_t bytes)
{
    size_t page = 4096;
    return (bytes + page - 1) & ~(page - 1);
}

/* Grow a writer-side array to hold `need` elements of `elem` bytes
 * (contents kept).  False when no memory could be mapped. */
static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t want = *cap ? *cap : 256;
    while (want < need)
        want *= 2;
    size_t old_bytes = page_round(*cap * elem), new_bytes = page_round(want * elem);
    void *q = *p == NULL ? map_bytes(new_bytes)
                         : mremap(*p, old_bytes, new_bytes, MREMAP_MAYMOVE);
    if (q == NULL || q == MAP_FAILED)
        return false;
    *p = q;
    *cap = new_bytes / elem;
    return true;
}

/* ---- snapshots ---- */

typedef struct snap {
    size_t n;              /* regions */
    size_t pow;            /* keys: a power of two >= n, padded with UINT64_MAX */
    size_t bytes;          /* of the mapping */
    uint64_t retire_epoch;
    struct snap *retired_next;
    const uint64_t *keys;  /* the regions' starts */
    /* The last key of each BLOCK of keys (NULL below 2 * BLOCK keys): the
     * levels of the search above a block, dense enough to stay in the L1
     * cache, where the same levels over `keys` touch a line each. */
    const uint64_t *top;
    /* The guide (NULL where it would save little: guide_build), in place
     * of the index: entry b is the number of keys below guide_lo + (b <<
     * guide_shift), so a pointer's bucket gives the search's start over
     * `keys` in one load, and guide_step (a power of two, or 0) is the
     * first of the few steps left, the same for every bucket. */
    const uint32_t *guide;
    uint64_t guide_lo;
    size_t guide_last;     /* the last bucket */
    size_t guide_step;
    unsigned guide_shift;
    const mh_region *regions;
    /* The batch's last step, compact: for j = the number of starts <= x,
     * ends[j] is the end of region j - 1 (ends[0] = 0: below every region)
     * and meta[j] what the answer needs of it (META_*), so a pointer's
     * answer costs two small loads and no branch, where the region itself
     * is 32 bytes away in a larger array. */
    const uint64_t *ends;
    const uint8_t *meta;
    uint32_t period_hi;    /* the newest install period of its regions */
    /* How the guide was made, for the next build's (guide_patch,
     * guide_build): after the fields a search reads, which stay in the
     * first cache line. */
    unsigned guide_levels; /* log2 of the widest bucket's keys + 1 */
    size_t guide_trim;     /* the first and last keys left out of its span */
} snap;

/* meta[j]: the type, and whether the region was learned from the hooks and
 * in the snapshot's newest period (vouching: is_vouched). */
#define META_TYPE 0x07u
#define META_HOOKS 0x08u
#define META_NEWEST 0x10u
#define META_VALUES 0x20u

#define BLOCK 16

static const uint64_t g_no_keys[1] = {UINT64_MAX};
static const uint64_t g_no_ends[1] = {0};
static const uint8_t g_no_meta[1] = {0};
/* The snapshot of an empty cache: static, never retired. */
static snap g_empty = {.n = 0, .pow = 1, .keys = g_no_keys, .regions = NULL, .ends = g_no_ends,
                       .meta = g_no_meta};

/* Reclaimed snapshots kept for the next builds (a writer's mmap and munmap
 * per drained batch would hold the consumer lock longer). */
#define SPARE_SNAPS 4

/* The keys' length for a power of two `pow` >= n: the keys padded with
 * UINT64_MAX to pow, and, where there is a block index, by a quarter more
 * (a guide's steps span at most a quarter of pow: a search of UINT64_MAX,
 * to which every key answers "at or below", may step that far past the
 * last key). */
static inline size_t keys_len(size_t pow)
{
    return pow >= 2 * BLOCK ? pow + pow / 4 : pow;
}

/* A snapshot with room for `cap` regions, written by the caller into
 * s->regions before snap_finish (its keys are laid out for `cap`; a
 * smaller map uses a prefix of them). */
static snap *snap_alloc(snap **spare, size_t cap)
{
    size_t pow = 1;
    while (pow < cap)
        pow <<= 1;
    size_t head = (sizeof(snap) + 63) & ~(size_t)63;
    size_t ntop = pow >= 2 * BLOCK ? pow / BLOCK : 0;
    /* (the keys and their padding, the block index, the guide: a 32-bit
     * entry a key where there is an index, then the ends and the meta) */
    size_t nguide = ntop ? pow / 2 : 0;
    size_t bytes = page_round(head + (keys_len(pow) + ntop + nguide + cap + 1) *
                                         sizeof(uint64_t) +
                              cap * sizeof(mh_region) + cap + 1);
    char *m = NULL;
    for (int i = 0; i < SPARE_SNAPS && m == NULL; i++)
        if (spare[i] != NULL && spare[i]->bytes >= bytes && spare[i]->bytes <= 4 * bytes) {
            bytes = spare[i]->bytes;
            m = (char *)spare[i];
            spare[i] = NULL;
        }
    if (m == NULL)
        m = map_populated(bytes);
    if (m == NULL)
        return NULL;
    snap *s = (snap *)m;
    uint64_t *keys = (uint64_t *)(m + head);
    const mh_region *regions = (const mh_region *)(keys + keys_len(pow) + ntop + nguide);
    const uint64_t *ends = (const uint64_t *)(regions + cap);
    *s = (snap){.bytes = bytes, .keys = keys, .regions = regions, .ends = ends,
                .meta = (const uint8_t *)(ends + cap + 1)};
    return s;
}

/* The steps a guide of nb buckets of 2^shift bytes from lo leaves over the
 * n keys (its table into g), or SIZE_MAX where it would leave more than
 * `most`.  The pointers of bucket b have between g[b] and g[b + 1] keys at
 * or below them; below lo is bucket 0, past the last bucket's start the
 * last one (up to n: a pointer of UINT64_MAX, at or above every key,
 * steps past them all into the padding, and every count from there on is
 * at least n). */
static size_t guide_fill(uint32_t *g, size_t nb, const uint64_t *keys, size_t n, uint64_t lo,
                         unsigned shift, size_t most)
{
    size_t j = 0, below = 0;  /* keys below this bucket's start, and the last one's */
    size_t widest = 0, cap = most >= 63 ? SIZE_MAX : (size_t)1 << most;
    uint64_t step = (uint64_t)1 << shift, at = lo;
    g[0] = 0;
    for (size_t b = 1; b <= nb; b++) {
        /* (the next bucket's start, UINT64_MAX once past the address space
         * and for the last bucket's end) */
        at = b == nb || at > UINT64_MAX - step ? UINT64_MAX : at + step;
        while (j < n && keys[j] < at)
            j++;
        if (j - below + 1 > widest) {
            widest = j - below + 1;
            if (widest > cap)
                return SIZE_MAX;
        }
        if (b < nb)
            g[b] = (uint32_t)j;
        below = j;
    }
    size_t levels = 0;
    while (((size_t)1 << levels) < widest)
        levels++;
    return levels;
}

/* The shift that makes nb buckets span the keys but the first and last t. */
static unsigned guide_shift_for(const uint64_t *keys, size_t n, size_t t, size_t nb)
{
    uint64_t span = keys[n - 1 - t] - keys[t];
    unsigned shift = 0;
    while ((span >> shift) >= nb)
        shift++;
    return shift;
}

/* The guide over the n keys (padded to pow), into g (pow entries), or
 * none; prev is the snapshot it replaces.
 *
 * A pointer's bucket is its offset from the guide's first key, shifted so
 * that the buckets (as many as the padded keys) span the keys, so a binary
 * search of the widest bucket's width, from the bucket's entry, finds the
 * pointer's count of keys.  Where the keys are spread evenly that is a
 * step or two in place of log2(pow).  A few far outliers (a region far
 * below or above the rest) would stretch the span over the rest: the guide
 * is tried with the first and last 1, 4, 16 and 64 keys left out of its
 * span too (pointers past its ends fall into its first or last bucket,
 * which then hold those keys), and the one that leaves fewest steps kept.
 * Where the keys crowd into a few buckets all the same (clusters far
 * apart), the guide would save little and is left out: the search is the
 * block index's.
 *
 * Each try is a pass over the keys and buckets, and a map under the
 * deferral's threshold is republished at every drain's commit - once a
 * query where a program asks about each buffer it makes - so the tries
 * are spent only where they can pay: the trim prev kept is tried first
 * (a commit moves a few keys, rarely the outliers), and the others only
 * where it now leaves more steps than it did, and more than two (a trim
 * can save at most those).  A map that doubles or halves is searched
 * afresh, which bounds how long a choice outlives the layout it suited
 * (one that did not get worse is kept, though another might now do
 * better: at most the steps it left before). */
static void guide_build(snap *s, const uint64_t *keys, size_t n, size_t pow, uint32_t *g,
                        const snap *prev)
{
    static const size_t trims[] = {0, 1, 4, 16, 64};
    s->guide = NULL;
    size_t nb = pow, levels_all = 0;
    while (((size_t)1 << levels_all) < pow)
        levels_all++;
    /* (two steps saved pay the bucket's arithmetic; the keys' padding
     * holds a quarter of pow) */
    if (levels_all < 2)
        return;
    size_t best = levels_all - 2, best_trim = 0, filled = SIZE_MAX, enough = 2;
    size_t first = 0;
    if (prev->guide != NULL && prev->pow == pow && 2 * prev->guide_trim < n) {
        first = prev->guide_trim;
        enough = prev->guide_levels > enough ? prev->guide_levels : enough;
    }
    size_t levels = guide_fill(g, nb, keys, n, keys[first], guide_shift_for(keys, n, first, nb),
                               best);
    filled = first;
    if (levels != SIZE_MAX) {
        best = levels;
        best_trim = first;
        s->guide = g;
    }
    for (size_t i = 0; i < sizeof trims / sizeof trims[0] && best > 1 &&
                       (s->guide == NULL || best > enough); i++) {
        size_t t = trims[i];
        if (2 * t >= n)
            break;
        if (t == first)
            continue;
        levels = guide_fill(g, nb, keys, n, keys[t], guide_shift_for(keys, n, t, nb), best);
        filled = t;
        if (levels == SIZE_MAX || (levels == best && s->guide != NULL))
            continue;
        best = levels;
        best_trim = t;
        s->guide = g;
    }
    if (s->guide == NULL)
        return;
    unsigned shift = guide_shift_for(keys, n, best_trim, nb);
    if (filled != best_trim)  /* (the table of the one kept, again) */
        guide_fill(g, nb, keys, n, keys[best_trim], shift, SIZE_MAX);
    s->guide_lo = keys[best_trim];
    s->guide_last = nb - 1;
    s->guide_step = ((size_t)1 << best) >> 1;
    s->guide_shift = shift;
    s->guide_levels = (unsigned)best;
    s->guide_trim = best_trim;
}

/* The guide's bucket of x (guide_start's, over prev's span). */
static inline size_t guide_bucket(const snap *prev, uint64_t x)
{
    uint64_t b = ((x - prev->guide_lo) & -(uint64_t)(x >= prev->guide_lo)) >> prev->guide_shift;
    return b < prev->guide_last ? (size_t)b : prev->guide_last;
}

#define PATCH_MOST 64

/* to[i] = from[i] + d, for the m counts (d modulo 2^32: the sums are
 * counts again).  In eights, which the compiler makes vector adds, where
 * a plain loop stays a load, an add and a store a count. */
static void counts_plus(uint32_t *restrict to, const uint32_t *restrict from, size_t m,
                        uint32_t d)
{
    size_t i = 0;
    for (; i + 8 <= m; i += 8)
        for (int k = 0; k < 8; k++)
            to[i + k] = from[i + k] + d;
    for (; i < m; i++)
        to[i] = from[i] + d;
}

typedef struct {
    size_t bucket;
    int delta;  /* +1: a key added, -1: one dropped */
} guide_change;

/* prev's guide, patched for the n keys into g, where they differ from
 * prev's by at most PATCH_MOST and no bucket outgrows its steps, or no
 * guide where prev's tries found none worth it; false where a guide must
 * be built afresh (guide_build).
 *
 * A commit of a drain that ran behind a query (a program that asks about
 * each buffer it makes) adds or drops a key or two: a pass over the
 * buckets that tests each against the next key, guide_build's, costs as
 * much as the rest of the snapshot's build, where the same table is prev's
 * plus the count of keys added less those dropped below each bucket - a
 * copy, and a walk of the keys that stops at the few that differ.  prev's
 * span and steps stay: the table counts the keys exactly whatever the span
 * (keys past it fall into its end buckets), and a bucket a new key would
 * widen past the steps sends the build back to guide_build, so the guide
 * never gets worse than its steps; a layout it suits less (keys dropped,
 * others crowding) is searched afresh once the map doubles or halves.  A
 * map none of whose tries paid (clusters far apart) stays without a guide
 * likewise: each try would stop at the first crowded bucket, but five of
 * them a publish still cost a fifth of the build for no step saved. */
static bool guide_patch(snap *s, const uint64_t *keys, size_t n, size_t pow, uint32_t *g,
                        const snap *prev)
{
    /* (prev has a block index, as s: it tried a guide) */
    if (prev->pow != pow || prev->top == NULL)
        return false;
    guide_change ch[PATCH_MOST];
    size_t nch = 0, i = 0, j = 0, pn = prev->n;
    const uint64_t *pk = prev->keys;
    while (i < pn || j < n) {
        /* (the runs alike, a chunk at a time where they are long: memcmp's
         * vector loop in place of a comparison a key) */
        size_t m = pn - i < n - j ? pn - i : n - j;
        while (m >= 32 && memcmp(pk + i, keys + j, 32 * sizeof *keys) == 0)
            i += 32, j += 32, m -= 32;
        while (m > 0 && pk[i] == keys[j])
            i++, j++, m--;
        if (i == pn && j == n)
            break;
        if (nch == PATCH_MOST)
            return false;
        if (j == n || (i < pn && pk[i] < keys[j]))
            ch[nch++] = (guide_change){guide_bucket(prev, pk[i++]), -1};
        else
            ch[nch++] = (guide_change){guide_bucket(prev, keys[j++]), +1};
    }
    if (prev->guide == NULL)
        return true;
    /* (a key in bucket k counts below every bucket after k; the changes
     * come in the keys' order, so their buckets ascend) */
    const uint32_t *pg = prev->guide;
    size_t at = 0, nb = prev->guide_last + 1;
    int32_t d = 0;
    for (size_t c = 0; c <= nch; c++) {
        size_t end = c < nch ? ch[c].bucket + 1 : nb;
        if (d == 0)
            memcpy(g + at, pg + at, (end - at) * sizeof *g);
        else
            counts_plus(g + at, pg + at, end - at, (uint32_t)d);
        at = end;
        if (c < nch)
            d += ch[c].delta;
    }
    size_t cap = (size_t)1 << prev->guide_levels;
    for (size_t c = 0; c < nch; c++) {
        size_t k = ch[c].bucket;
        if (ch[c].delta > 0 && (k < nb - 1 ? g[k + 1] : n) - g[k] + 1 > cap)
            return false;
    }
    s->guide = g;
    s->guide_lo = prev->guide_lo;
    s->guide_last = prev->guide_last;
    s->guide_step = prev->guide_step;
    s->guide_shift = prev->guide_shift;
    s->guide_levels = prev->guide_levels;
    s->guide_trim = prev->guide_trim;
    return true;
}

/* The keys, the block index and its guide of the n regions written into s,
 * to replace prev. */
static void snap_finish(snap *s, size_t n, const snap *prev)
{
    size_t pow = 1;
    while (pow < n)
        pow <<= 1;
    size_t ntop = pow >= 2 * BLOCK ? pow / BLOCK : 0;
    uint64_t *keys = (uint64_t *)s->keys, *top = keys + keys_len(pow);
    for (size_t i = 0; i < n; i++)
        keys[i] = s->regions[i].start;
    for (size_t i = n; i < keys_len(pow); i++)
        keys[i] = UINT64_MAX;
    for (size_t j = 0; j < ntop; j++)
        top[j] = keys[j * BLOCK + BLOCK - 1];
    s->guide = NULL;
    if (ntop && !guide_patch(s, keys, n, pow, (uint32_t *)(top + ntop), prev))
        guide_build(s, keys, n, pow, (uint32_t *)(top + ntop), prev);
    uint32_t hi = 0;
    for (size_t i = 0; i < n; i++)
        hi = s->regions[i].period > hi ? s->regions[i].period : hi;
    uint64_t *ends = (uint64_t *)s->ends;
    uint8_t *meta = (uint8_t *)s->meta;
    ends[0] = 0;
    meta[0] = 0;
    for (size_t i = 0; i < n; i++) {
        const mh_region *r = &s->regions[i];
        ends[i + 1] = r->end;
        meta[i + 1] = (uint8_t)((r->type & META_TYPE) |
                                (r->origin == MEMHOOK_ORIGIN_HOOKS ? META_HOOKS : 0) |
                                (r->period == hi ? META_NEWEST : 0));
    }
    s->period_hi = hi;
    s->n = n;
    s->pow = pow;
    s->top = ntop ? top : NULL;
}

static snap *snap_build(snap **spare, const mh_region *regions, size_t n, const snap *prev)
{
    snap *s = snap_alloc(spare, n);
    if (s == NULL)
        return NULL;
    if (n)
        memcpy((mh_region *)s->regions, regions, n * sizeof(mh_region));
    snap_finish(s, n, prev);
    return s;
}

static void snap_free(snap **spare, snap *s)
{
    if (s == &g_empty)
        return;
    for (int i = 0; spare != NULL && i < SPARE_SNAPS; i++)
        if (spare[i] == NULL) {
            spare[i] = s;
            return;
        }
    munmap(s, s->bytes);
}

/* ---- the cache ---- */

/* mh_cache_op's fold: a direct-mapped table from an op's exact range to
 * the last queued op of that range (a collision only loses a fold). */
#define FOLD_SLOTS 4096u

typedef struct mh_mark {
    _Atomic uint64_t *where;
    uint64_t value;
} mh_mark;

/* Ops in event order, and the counters to store once they are published. */
typedef struct oplist {
    mh_op *ops;
    size_t n, cap;
    size_t run_start;             /* ops before it lie behind a barrier: never folded */
    /* The last op of a range (oplist_add): the range's hash above, the op's
     * index + 1 below (0: none), so a slot of another range is told apart
     * without loading its op. */
    uint64_t last_of[FOLD_SLOTS];
    mh_mark *marks;
    size_t nmarks, marks_cap;
} oplist;

struct mh_cache {
    mh_cache_head head;           /* (first: read inline, cache.h) */
    _Atomic(snap *) current;
    _Atomic uint32_t period;      /* odd: hooks installed */
    _Atomic bool coverage;
    _Atomic bool broken;          /* a write lost memory: nothing is vouched */
    _Atomic uint64_t generation;  /* operations queued (mh_cache_generation) */
    atomic_flag seat;             /* the writer's */
    /* The writer's own (the seat held): the ops queued, in event order. */
    oplist *q;
    /* The feed's (the queue's consumer lock held): ops of the drain call in
     * progress, moved to q at its commit - so the feed holds the seat only
     * for that move and the publish, and a query finds it free otherwise. */
    oplist *stage;
    oplist lists[2];
    uint64_t queued;              /* ops queued so far (`generation` at each seat release) */
    mh_region *work[2];
    size_t work_cap[2];
    void *coords;
    size_t coords_cap;
    void *coords_tmp;
    size_t coords_tmp_cap;
    size_t *radix;                /* the sort's digit counts (1 << 16) */
    uint32_t *heap;
    size_t heap_cap;
    uint8_t *alive;
    size_t alive_cap;
    void *segs;
    size_t segs_cap;
    snap *retired;
    size_t retired_bytes, retired_count;
    snap *spare[SPARE_SNAPS];
};

/* Process-wide, as allocations are: unique for the life of the process
 * across every cache, so that a key a registration cache holds is never
 * handed to another allocation. */
static _Atomic uint64_t g_next_alloc_id = 1;

/* The process's one cache: of static storage, so that it exists before any
 * constructor feeds it and is never freed (readers may be anywhere). */
mh_cache mh_process_cache = {.current = &g_empty, .period = 0, .seat = ATOMIC_FLAG_INIT,
                             .q = &mh_process_cache.lists[0],
                             .stage = &mh_process_cache.lists[1]};

/* ---- readers: epoch slots ---- */

/* A reader's slot: the epoch it read before loading the snapshot, 0 when
 * it reads nothing.  One line each: readers never share a written line. */
#define READER_SLOTS 1024
struct reader_slot {
    _Alignas(64) _Atomic uint64_t epoch;
    _Atomic int used;
};
/* Process-wide, as the threads that read: every cache's readers. */
static struct reader_slot g_slots[READER_SLOTS];
/* Readers of threads that found no free slot: counted (a locked add,
 * which is a full fence); the writer frees nothing while any is inside. */
static _Atomic uint64_t g_overflow_readers;
static _Atomic uint64_t g_epoch = 1;
/* membarrier(PRIVATE_EXPEDITED) is registered: readers need no fence. */
static bool g_asymmetric;
static pthread_key_t g_slot_key;
static bool g_slot_key_ok;
/* The calling thread's slot + 1 (0: none yet). */
static __thread int t_slot __attribute__((tls_model("initial-exec")));

static void slot_release(void *arg)
{
    int i = (int)(intptr_t)arg - 1;
    if (i >= 0 && i < READER_SLOTS) {
        atomic_store_explicit(&g_slots[i].epoch, 0, memory_order_release);
        atomic_store_explicit(&g_slots[i].used, 0, memory_order_release);
    }
    t_slot = 0;
}

void mh_cache_readers_at_load(void)
{
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer does not know membarrier: readers fence themselves. */
    g_asymmetric = false;
#else
    g_asymmetric = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
    g_slot_key_ok = pthread_key_create(&g_slot_key, slot_release) == 0;
}

static int slot_claim(void)
{
    for (int i = 0; i < READER_SLOTS; i++) {
        int free_ = 0;
        if (atomic_load_explicit(&g_slots[i].used, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&g_slots[i].used, &free_, 1)) {
            t_slot = i + 1;
            /* (glibc keeps the first 32 keys' values in the thread
             * descriptor: no allocation, safe from a signal handler.) */
            if (g_slot_key_ok)
                pthread_setspecific(g_slot_key, (void *)(intptr_t)(i + 1));
            return i;
        }
    }
    return -1;
}

typedef struct reader {
    struct reader_slot *slot;  /* NULL: counted in g_overflow_readers */
    uint64_t saved;
} reader;

static inline snap *read_begin(mh_cache *c, reader *rd)
{
    int i = t_slot - 1;
    if (__builtin_expect(i < 0, 0))
        i = slot_claim();
    if (__builtin_expect(i < 0, 0)) {
        rd->slot = NULL;
        atomic_fetch_add(&g_overflow_readers, 1);
        return atomic_load_explicit(&c->current, memory_order_acquire);
    }
    struct reader_slot *s = &g_slots[i];
    rd->slot = s;
    rd->saved = atomic_load_explicit(&s->epoch, memory_order_relaxed);
    if (rd->saved == 0) {  /* (nested in a signal handler: the outer epoch stands) */
        uint64_t e = atomic_load_explicit(&g_epoch, memory_order_acquire);
        if (__builtin_expect(g_asymmetric, 1)) {
            atomic_store_explicit(&s->epoch, e, memory_order_relaxed);
            atomic_signal_fence(memory_order_seq_cst);  /* (the writer's membarrier fences) */
        } else {
            atomic_store_explicit(&s->epoch, e, memory_order_seq_cst);  /* a full barrier */
        }
    }
    return atomic_load_explicit(&c->current, memory_order_acquire);
}

static inline void read_end(reader *rd)
{
    if (__builtin_expect(rd->slot == NULL, 0))
        atomic_fetch_sub(&g_overflow_readers, 1);
    else
        atomic_store_explicit(&rd->slot->epoch, rd->saved, memory_order_release);
}

/* Free what no reader can hold any more (the seat held).  `force`: now,
 * whatever the amount retired. */
static void reclaim(mh_cache *c, bool force)
{
    if (c->retired == NULL)
        return;
    if (!force && c->retired_count < 8 && c->retired_bytes < (1u << 20))
        return;
    if (g_asymmetric && syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
        return;  /* (cannot happen once registered: try again next round) */
    /* (a locked read-modify-write: the writer's own full barrier) */
    if (atomic_fetch_add(&g_overflow_readers, 0) != 0)
        return;
    uint64_t oldest = UINT64_MAX;
    for (int i = 0; i < READER_SLOTS; i++) {
        uint64_t e = atomic_load_explicit(&g_slots[i].epoch, memory_order_acquire);
        if (e != 0 && e < oldest)
            oldest = e;
    }
    snap **link = &c->retired;
    while (*link != NULL) {
        snap *s = *link;
        if (s->retire_epoch < oldest) {
            *link = s->retired_next;
            c->retired_bytes -= s->bytes;
            c->retired_count--;
            snap_free(c->spare, s);
        } else {
            link = &s->retired_next;
        }
    }
}

/* After a change a reader's answer may depend on (mh_cache_version).
 * (Release: a reader that sees the new version sees the change.) */
static void version_bump(mh_cache *c)
{
    atomic_fetch_add_explicit(&c->head.version, 1, memory_order_release);
}

/* A write lost memory: nothing is vouched for from now on. */
static void set_broken(mh_cache *c)
{
    atomic_store(&c->broken, true);
    version_bump(c);
}

static void publish(mh_cache *c, snap *s)
{
    snap *old = atomic_exchange_explicit(&c->current, s, memory_order_acq_rel);
    version_bump(c);
    if (old != &g_empty) {
        old->retire_epoch = atomic_fetch_add(&g_epoch, 1);
        old->retired_next = c->retired;
        c->retired = old;
        c->retired_bytes += old->bytes;
        c->retired_count++;
    }
    reclaim(c, false);
}

/* ---- searching ---- */

/* The guide's start for x: the number of keys below its bucket's start. */
static inline size_t guide_start(const snap *s, uint64_t x)
{
    /* (a mask, not a conditional: compilers branch on that one, and a
     * batch's pointers fall below the guide's span at random) */
    uint64_t off = (x - s->guide_lo) & -(uint64_t)(x >= s->guide_lo);
    uint64_t b = off >> s->guide_shift;
    return s->guide[b < s->guide_last ? b : s->guide_last];
}

/* The index of the last region whose start is <= x, or -1: branchless
 * (the keys' length is a power of two). */
static inline size_t search_pos(const snap *s, uint64_t x)
{
    const uint64_t *k = s->keys;
    size_t pos = 0, step = s->pow >> 1;
    if (s->guide != NULL) {
        pos = guide_start(s, x);
        step = s->guide_step;
    } else if (s->top != NULL) {
        /* (the levels above a block: a step of sb blocks compares the key
         * at pos + sb * BLOCK - 1, the last of a block) */
        const uint64_t *t = s->top;
        size_t pb = 0;
        for (size_t sb = s->pow / BLOCK >> 1; sb != 0; sb >>= 1)
            pb += t[pb + sb - 1] <= x ? sb : 0;
        pos = pb * BLOCK;
        step = BLOCK >> 1;
    }
    for (; step != 0; step >>= 1)
        pos += k[pos + step - 1] <= x ? step : 0;
    return pos;
}

static inline long last_at_or_before(const snap *s, uint64_t x)
{
    const uint64_t *k = s->keys;
    size_t pos = search_pos(s, x);
    pos += (size_t)(k[pos] <= x);
    long i = (long)pos - 1;
    return i < (long)s->n ? i : (long)s->n - 1;
}

uint32_t mh_cache_period(const mh_cache *c)
{
    return atomic_load_explicit(&c->period, memory_order_acquire);
}

void mh_cache_period_next(mh_cache *c, bool installed)
{
    uint32_t p = atomic_load(&c->period);
    if (((p & 1u) != 0) != installed) {  /* (a mode switch keeps the period) */
        atomic_store_explicit(&c->period, p + 1, memory_order_release);
        version_bump(c);
    }
}

void mh_cache_set_coverage(mh_cache *c, bool complete)
{
    if (atomic_exchange_explicit(&c->coverage, complete, memory_order_acq_rel) != complete)
        version_bump(c);
}

bool mh_cache_coverage(const mh_cache *c)
{
    return atomic_load_explicit(&c->coverage, memory_order_acquire);
}

uint64_t mh_cache_generation(const mh_cache *c)
{
    return atomic_load_explicit(&c->generation, memory_order_acquire);
}

static inline bool is_vouched(const mh_region *r, uint32_t period, bool coverage)
{
    return (period & 1u) && r->period == period && r->type != MEMHOOK_MEMORY_UNKNOWN &&
           (r->origin == MEMHOOK_ORIGIN_HOOKS || coverage);
}

int mh_cache_classify(mh_cache *c, uint64_t ptr, uint64_t end, mh_found_region *out)
{
    uint32_t period = mh_cache_period(c);
    bool coverage = mh_cache_coverage(c);
    if (atomic_load_explicit(&c->broken, memory_order_relaxed))
        period = 0;  /* (vouches for nothing) */
    out->host_vouched = (period & 1u) && coverage;
    reader rd;
    const snap *s = read_begin(c, &rd);
    int found = MH_FOUND_ABSENT;
    if (s->n != 0) {
        long i = last_at_or_before(s, ptr);
        const mh_region *rs = s->regions;
        if (i >= 0 && ptr < rs[i].end) {
            out->r = rs[i];
            out->vouched = is_vouched(&rs[i], period, coverage);
            if (end <= rs[i].end) {
                found = MH_FOUND_IN;
            } else {
                /* Runs past it: touching regions of one type behave as one. */
                found = MH_FOUND_MIXED;
                uint64_t at = rs[i].end;
                for (size_t j = (size_t)i + 1; j < s->n; j++) {
                    if (rs[j].start != at || rs[j].type != out->r.type)
                        break;
                    if (rs[j].device != out->r.device)
                        out->r.device = -1;
                    if (rs[j].alloc_id != out->r.alloc_id)
                        out->r.alloc_id = 0;
                    out->vouched &= is_vouched(&rs[j], period, coverage);
                    at = rs[j].end;
                    if (end <= at) {
                        out->r.end = at;
                        found = MH_FOUND_RUN;
                        break;
                    }
                }
            }
        } else if ((size_t)(i + 1) < s->n && rs[i + 1].start < end) {
            found = MH_FOUND_MIXED;
        }
    }
    read_end(&rd);
    return found;
}

static inline __attribute__((always_inline)) bool hit_at(mh_cache *c, uint64_t ptr,
                                                          uint64_t end, mh_hit *out)
{
    /* (the version first: what is read after it is as new or newer) */
    out->version = mh_cache_version(c);
    uint32_t period = mh_cache_period(c);
    bool coverage = mh_cache_coverage(c);
    if (!(period & 1u) || atomic_load_explicit(&c->broken, memory_order_relaxed))
        return false;
    reader rd;
    const snap *s = read_begin(c, &rd);
    const mh_region *rs = s->regions;
    long i = last_at_or_before(s, ptr);
    bool ok;
    if (i >= 0 && ptr < rs[i].end) {
        const mh_region *r = &rs[i];
        ok = end <= r->end && is_vouched(r, period, coverage);
        out->lo = r->start;
        out->hi = r->end;
        out->alloc_id = r->alloc_id;
        out->device = r->device;
        out->type = r->type;
        out->gap = false;
        out->origin = r->origin;
    } else {
        out->lo = i >= 0 ? rs[i].end : 0;
        out->hi = (size_t)(i + 1) < s->n ? rs[i + 1].start : UINT64_MAX;
        ok = coverage && end <= out->hi;
        out->alloc_id = 0;
        out->device = -1;
        out->type = MEMHOOK_MEMORY_HOST;
        out->gap = true;
        out->origin = MEMHOOK_ORIGIN_HOOKS;
    }
    read_end(&rd);
    return ok;
}

bool mh_cache_hit(mh_cache *c, uint64_t ptr, uint64_t end, mh_hit *out)
{
    return hit_at(c, ptr, end, out);
}

bool mh_cache_hit_noted(mh_cache *c, uint64_t ptr, uint64_t end, mh_hit *out,
                        uint64_t seen[4])
{
    bool ok = hit_at(c, ptr, end, out);
    /* (read before the stores below, which may alias *out: from the
     * registers the search left them in, not read back) */
    uint64_t lo = out->lo, hi = out->hi;
    seen[2] = seen[0];
    seen[3] = seen[1];
    seen[0] = lo;
    seen[1] = hi;
    return ok;
}

/* The answer of each meta value (META_*) for mh_cache_types, given the
 * period, the coverage and the snapshot's newest period (is_vouched). */
static void meta_answers(uint8_t *out, const snap *s, uint32_t period, bool coverage)
{
    bool current = (period & 1u) && s->period_hi == period;
    for (unsigned m = 0; m < META_VALUES; m++) {
        uint8_t type = (uint8_t)(m & META_TYPE);
        bool vouched = current && (m & META_NEWEST) && type != MEMHOOK_MEMORY_UNKNOWN &&
                       ((m & META_HOOKS) || coverage);
        out[m] = vouched ? type : (uint8_t)(MH_TYPE_UNVOUCHED | type);
    }
}

/* The answer for x, from j = the number of region starts <= x: with no
 * branch (where a batch's pointers fall in regions and out of them at
 * random, a branch on it would be mispredicted every other time). */
static inline uint8_t type_at(const snap *s, const uint8_t *answers, uint8_t absent, size_t j,
                              uint64_t x)
{
    uint8_t in = (uint8_t) - (uint8_t)(x < s->ends[j]);
    return (uint8_t)((answers[s->meta[j]] & in) | (absent & (uint8_t)~in));
}

/* The number of region starts <= x (at most n) of each of q[0 .. LANES),
 * into js: sixteen searches side by side, each lane its own variables (its
 * position and its pointer, not an array the compiler keeps in memory):
 * their loads are independent, so the core overlaps their misses, and a
 * level costs a lane a load, a compare and a conditional add. */
enum { LANES = 16 };

static inline __attribute__((always_inline)) void search16(const snap *s, const uint64_t *q,
                                                            size_t *js)
{
    const uint64_t *k = s->keys;
    size_t n = s->n;
#define MH_LANES(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define MH_LOAD(l) uint64_t x##l = q[l]; size_t p##l = 0;
    MH_LANES(MH_LOAD)
#undef MH_LOAD
    size_t step = s->pow >> 1;
    if (s->guide != NULL) {
        /* (each lane's start from its bucket, in a loop of its own: the
         * shift stays in its register) */
        size_t start[LANES];
        for (size_t l = 0; l < LANES; l++)
            start[l] = guide_start(s, q[l]);
#define MH_GUIDE(l) p##l = start[l];
        MH_LANES(MH_GUIDE)
#undef MH_GUIDE
        step = s->guide_step;
    } else if (s->top != NULL) {
        const uint64_t *t = s->top;
        for (size_t sb = s->pow / BLOCK >> 1; sb != 0; sb >>= 1) {
#define MH_TOP(l) p##l += t[p##l + sb - 1] <= x##l ? sb : 0;
            MH_LANES(MH_TOP)
#undef MH_TOP
        }
#define MH_BLOCK(l) p##l *= BLOCK;
        MH_LANES(MH_BLOCK)
#undef MH_BLOCK
        step = BLOCK >> 1;
    }
    for (; step != 0; step >>= 1) {
#define MH_STEP(l) p##l += k[p##l + step - 1] <= x##l ? step : 0;
        MH_LANES(MH_STEP)
#undef MH_STEP
    }
    /* (the padding keys are the largest value: at most n) */
#define MH_FINISH(l)                                                                    \
    {                                                                                   \
        size_t j = p##l + (size_t)(k[p##l] <= x##l);                                    \
        js[l] = j <= n ? j : n;                                                         \
    }
    MH_LANES(MH_FINISH)
#undef MH_FINISH
#undef MH_LANES
}

/* Whether q[0 .. m) ascend (a caller walking its buffers in order). */
static inline bool ascending(const uint64_t *q, size_t m)
{
    unsigned down = 0;
    for (size_t i = 1; i < m; i++)
        down |= q[i] < q[i - 1];
    return down == 0;
}

/* The number of region starts <= x, from j, that number for a pointer at
 * or below x: a few steps forward, else a search. */
static inline size_t advance(const snap *s, size_t j, uint64_t x)
{
    for (int i = 0; i < 4 && j < s->n && s->keys[j] <= x; i++)
        j++;
    if (j < s->n && s->keys[j] <= x)
        j = (size_t)(last_at_or_before(s, x) + 1);
    return j;
}

/* A batch's position after its last ascending sixteen pointers. */
typedef struct walk {
    size_t j;    /* the number of starts <= x */
    uint64_t x;
    bool on;     /* (j and x hold one) */
} walk;

/* The number of region starts <= x of each of q[0 .. LANES), into js.
 * Sixteen pointers in ascending order walk the starts from the last one's
 * position (a merge of two sorted lists: most steps are none or one where
 * pointers are denser than regions); others are searched side by side. */
static inline __attribute__((always_inline)) void positions16(const snap *s, const uint64_t *q,
                                                              size_t *js, walk *w)
{
    if (!ascending(q, LANES)) {
        search16(s, q, js);
        return;
    }
    size_t j = w->on && q[0] >= w->x ? w->j : (size_t)(last_at_or_before(s, q[0]) + 1);
    for (size_t l = 0; l < LANES; l++)
        js[l] = j = advance(s, j, q[l]);
    *w = (walk){j, q[LANES - 1], true};
}

size_t mh_cache_types(mh_cache *c, const uint64_t *ptrs, size_t count, uint8_t *types, bool host)
{
    uint8_t absent = host ? MEMHOOK_MEMORY_HOST : MH_TYPE_ABSENT;
    size_t open = 0;  /* (types left to resolve: counted branch-free) */
    uint32_t period = mh_cache_period(c);
    bool coverage = mh_cache_coverage(c);
    if (atomic_load_explicit(&c->broken, memory_order_relaxed))
        period = 0;
    reader rd;
    const snap *s = read_begin(c, &rd);
    size_t n = s->n;
    uint8_t answers[META_VALUES];
    meta_answers(answers, s, period, coverage);
    size_t done = 0;
    if (n == 0) {
        memset(types, absent, count);
        done = count;
        open = host ? 0 : count;
    }
    /* A pointer outside the span of the regions is in none: where a block
     * holds many such (host memory a transport passes usually lies outside
     * the VA the driver hands out), they are answered at once and only the
     * others searched, gathered with no branch.  Where its first sixteen
     * are mostly inside, the block is searched whole (the gathering would
     * cost more than it saves). */
    enum { GATHER = 256 };
    uint64_t lo = n ? s->keys[0] : 0, width = n ? s->ends[n] - lo : 0;
    walk w = {0};
    while (done < count) {
        size_t m = count - done < GATHER ? count - done : GATHER, kept = 0;
        size_t inside = 0;
        for (size_t i = 0; i < m && i < LANES; i++)
            inside += ptrs[done + i] - lo < width;
        if (m >= LANES && inside * 4 >= LANES * 3) {
            size_t whole = m & ~(size_t)(LANES - 1);
            for (size_t i = 0; i < whole; i += LANES) {
                const uint64_t *q = ptrs + done + i;
                size_t js[LANES];
                positions16(s, q, js, &w);
#pragma GCC unroll 16
                for (size_t l = 0; l < LANES; l++) {
                    uint8_t t = type_at(s, answers, absent, js[l], q[l]);
                    types[done + i + l] = t;
                    open += t >= MH_TYPE_UNVOUCHED;
                }
            }
            done += whole;
            continue;
        }
        uint32_t at[GATHER];
        uint64_t xs[GATHER];
        for (size_t i = 0; i < m; i++) {
            uint64_t x = ptrs[done + i];
            types[done + i] = absent;
            at[kept] = (uint32_t)i;
            xs[kept] = x;
            kept += x - lo < width;
        }
        open += host ? 0 : m - kept;
        size_t i = 0;
        for (; i + LANES <= kept; i += LANES) {
            size_t js[LANES];
            positions16(s, xs + i, js, &w);
            /* (unrolled: js stays in registers) */
#pragma GCC unroll 16
            for (size_t l = 0; l < LANES; l++) {
                uint8_t t = type_at(s, answers, absent, js[l], xs[i + l]);
                types[done + at[i + l]] = t;
                open += t >= MH_TYPE_UNVOUCHED;
            }
        }
        for (; i < kept; i++) {
            uint8_t t = type_at(s, answers, absent, (size_t)(last_at_or_before(s, xs[i]) + 1),
                                xs[i]);
            types[done + at[i]] = t;
            open += t >= MH_TYPE_UNVOUCHED;
        }
        done += m;
    }
    read_end(&rd);
    return open;
}

void mh_cache_hits(mh_cache *c, const uint64_t *ptrs, size_t count, mh_hit *out, bool *ok)
{
    uint64_t version = mh_cache_version(c);
    uint32_t period = mh_cache_period(c);
    bool coverage = mh_cache_coverage(c);
    if (!(period & 1u) || atomic_load_explicit(&c->broken, memory_order_relaxed)) {
        memset(ok, 0, count * sizeof *ok);
        return;
    }
    reader rd;
    const snap *s = read_begin(c, &rd);
    uint8_t answers[META_VALUES];
    meta_answers(answers, s, period, coverage);
    walk w = {0};
    for (size_t done = 0; done < count; done += LANES) {
        size_t js[LANES], m = count - done < LANES ? count - done : LANES;
        if (m == LANES)
            positions16(s, ptrs + done, js, &w);
        else
            for (size_t l = 0; l < m; l++)
                js[l] = (size_t)(last_at_or_before(s, ptrs[done + l]) + 1);
        for (size_t l = 0; l < m; l++) {
            size_t j = js[l];
            uint64_t x = ptrs[done + l];
            mh_hit *h = &out[done + l];
            if (x < s->ends[j]) {
                const mh_region *r = &s->regions[j - 1];
                ok[done + l] = answers[s->meta[j]] < MH_TYPE_UNVOUCHED;
                *h = (mh_hit){version, r->start, r->end, r->alloc_id, r->device, r->type, false,
                              r->origin};
            } else {
                ok[done + l] = coverage;
                *h = (mh_hit){version, s->ends[j], j < s->n ? s->keys[j] : UINT64_MAX, 0, -1,
                              MEMHOOK_MEMORY_HOST, true, MEMHOOK_ORIGIN_HOOKS};
            }
        }
    }
    read_end(&rd);
}

/* ---- the writer ---- */

bool mh_cache_write_begin(mh_cache *c, bool wait)
{
    while (atomic_flag_test_and_set_explicit(&c->seat, memory_order_acquire)) {
        if (!wait)
            return false;
        sched_yield();
    }
    return true;
}

static inline bool is_paint(const mh_op *op)
{
    return op->kind == MH_OP_ASSIGN || op->kind == MH_OP_REMOVE;
}

static inline uint64_t fold_hash(uint64_t start, uint64_t end)
{
    return (start * 0x9e3779b97f4a7c15ull) ^ (end * 0xc2b2ae3d27d4eb4full);
}

/* Append an op to a list.  An assignment of the exact range of an earlier
 * one in the same run (no barrier between them) makes that one dead: it
 * paints every byte the earlier one did, after it, and nothing in between
 * reads the state (barriers end a run).  So an allocator handing one
 * address out and back - two ops an event pair, for ever - keeps one op
 * queued, not thousands, and the commit has nothing to fold or sort. */
static bool oplist_add(mh_cache *c, oplist *l, const mh_op *op)
{
    size_t at = l->n;
    if (is_paint(op)) {
        uint64_t h = fold_hash(op->start, op->end);
        uint64_t *slot = &l->last_of[(h >> 20) & (FOLD_SLOTS - 1)];
        uint64_t tag = h & ~0xffffffffull;
        size_t j = (size_t)(uint32_t)*slot - 1;  /* (huge: none) */
        if ((*slot & ~0xffffffffull) == tag && j < at && j >= l->run_start &&
            l->ops[j].start == op->start && l->ops[j].end == op->end && is_paint(&l->ops[j])) {
            if (j + 1 == at)
                at = j;  /* the last op: replaced where it stands */
            else
                l->ops[j].end = l->ops[j].start;  /* dead (empty: the paint skips it) */
        }
        *slot = tag | (uint32_t)(at + 1);
    }
    if (at == l->cap && !grow((void **)&l->ops, &l->cap, at + 1, sizeof(mh_op))) {
        set_broken(c);
        return false;
    }
    l->ops[at] = *op;
    if (op->period == 0)  /* (stamped when queued: a commit may come later) */
        l->ops[at].period = mh_cache_period(c);
    l->n = at + 1;
    if (!is_paint(op))
        l->run_start = l->n;
    return true;
}

static bool oplist_mark(oplist *l, _Atomic uint64_t *where, uint64_t value)
{
    if (l->nmarks == l->marks_cap &&
        !grow((void **)&l->marks, &l->marks_cap, l->nmarks + 1, sizeof(mh_mark)))
        return false;
    l->marks[l->nmarks++] = (mh_mark){where, value};
    return true;
}

static void oplist_clear(oplist *l)
{
    l->n = l->run_start = l->nmarks = 0;
}

static void oplist_unmap(oplist *l)
{
    if (l->ops)
        munmap(l->ops, page_round(l->cap * sizeof(mh_op)));
    if (l->marks)
        munmap(l->marks, page_round(l->marks_cap * sizeof(mh_mark)));
}

bool mh_cache_op(mh_cache *c, const mh_op *op)
{
    c->queued++;
    return oplist_add(c, c->q, op);
}

bool mh_cache_stage_op(mh_cache *c, const mh_op *op)
{
    return oplist_add(c, c->stage, op);
}

bool mh_cache_stage_mark(mh_cache *c, _Atomic uint64_t *where, uint64_t value)
{
    return oplist_mark(c->stage, where, value);
}

/* Let the seat go: what was queued in it now counts (mh_cache_generation). */
static void seat_leave(mh_cache *c)
{
    if (atomic_load_explicit(&c->generation, memory_order_relaxed) != c->queued)
        atomic_store_explicit(&c->generation, c->queued, memory_order_release);
    atomic_flag_clear_explicit(&c->seat, memory_order_release);
}

void mh_cache_stage_commit(mh_cache *c, bool deferrable)
{
    oplist *s = c->stage;
    if (s->n == 0 && s->nmarks == 0)
        return;
    mh_cache_write_begin(c, true);
    if (c->q->n == 0 && c->q->nmarks == 0) {
        /* (the common case: nothing left queued - the lists trade places) */
        c->stage = c->q;
        c->q = s;
        c->queued += s->n;
    } else {
        /* Appended whole, in order.  (The queue's own fold table does not
         * learn them: a later mh_cache_op folds nothing across them.) */
        oplist *q = c->q;
        if (grow((void **)&q->ops, &q->cap, q->n + s->n, sizeof(mh_op))) {
            memcpy(q->ops + q->n, s->ops, s->n * sizeof(mh_op));
            q->n += s->n;
            q->run_start = q->n;
            c->queued += s->n;
        } else {
            set_broken(c);
        }
        for (size_t i = 0; i < s->nmarks; i++)
            oplist_mark(q, s->marks[i].where, s->marks[i].value);
        oplist_clear(s);
    }
    if (deferrable)
        mh_cache_write_end_deferrable(c);
    else
        mh_cache_write_end(c);
}

/* Whether an operation queued after the snapshot may have changed what the
 * snapshot says of [start, end): any barrier (a context reset, the
 * driver's exit: the allocation may be gone), or a write touching it. */
static bool oplist_touches(const oplist *l, uint64_t start, uint64_t end)
{
    for (size_t i = 0; i < l->n; i++) {
        const mh_op *op = &l->ops[i];
        if (op->kind == MH_OP_DEMOTE_AT ? op->start >= start && op->start < end
            : is_paint(op)              ? op->start != op->end && op->start < end && op->end > start
                                        : true)
            return true;
    }
    return false;
}

bool mh_cache_driver_alloc_at(mh_cache *c, uint64_t addr, mh_region *out)
{
    mh_cache_write_begin(c, true);  /* (q and the snapshot hold still) */
    const snap *s = atomic_load_explicit(&c->current, memory_order_acquire);
    long i = s->n != 0 ? last_at_or_before(s, addr) : -1;
    const mh_region *r = i >= 0 ? &s->regions[i] : NULL;
    bool found = r != NULL && r->start == addr && r->origin == MEMHOOK_ORIGIN_DRIVER &&
                 r->period == mh_cache_period(c) && r->type != MEMHOOK_MEMORY_UNKNOWN &&
                 !oplist_touches(c->q, r->start, r->end) &&
                 !oplist_touches(c->stage, r->start, r->end);
    if (found)
        *out = *r;
    seat_leave(c);
    return found;
}

typedef struct coord {
    uint64_t x;
    uint32_t op;     /* index into the run */
    uint32_t start;  /* 1: the op begins here */
} coord;

typedef struct seg {
    uint64_t start, end;
    uint32_t op;
} seg;

/* Stable LSD radix sort of coords by x, 16 bits a pass, passes where every
 * key has the same digit skipped. */
static bool sort_coords(mh_cache *c, coord *a, size_t n)
{
    if (n <= 64) {  /* (a radix pass's counts cost more than this) */
        for (size_t i = 1; i < n; i++) {
            coord v = a[i];
            size_t j = i;
            for (; j > 0 && a[j - 1].x > v.x; j--)
                a[j] = a[j - 1];
            a[j] = v;
        }
        return true;
    }
    size_t sorted = 1;
    while (sorted < n && a[sorted - 1].x <= a[sorted].x)
        sorted++;
    if (sorted >= n)
        return true;  /* (already: an allocator handing out ascending addresses) */
    if (!grow(&c->coords_tmp, &c->coords_tmp_cap, n, sizeof(coord)))
        return false;
    coord *b = c->coords_tmp;
    if (c->radix == NULL && (c->radix = map_bytes((1u << 16) * sizeof(size_t))) == NULL)
        return false;
    size_t *count = c->radix;
    /* 8-bit digits for a short input (their counts are cheap to clear),
     * 16-bit ones for a long one (half the passes). */
    unsigned bits = n < (1u << 16) ? 8 : 16;
    size_t digits = (size_t)1 << bits, dmask = digits - 1;
    for (unsigned shift = 0; shift < 64; shift += bits) {
        memset(count, 0, digits * sizeof(size_t));
        for (size_t i = 0; i < n; i++)
            count[(a[i].x >> shift) & dmask]++;
        if (n == 0 || count[(a[0].x >> shift) & dmask] == n)
            continue;
        size_t sum = 0;
        for (size_t d = 0; d < digits; d++) {
            size_t t = count[d];
            count[d] = sum;
            sum += t;
        }
        for (size_t i = 0; i < n; i++)
            b[count[(a[i].x >> shift) & dmask]++] = a[i];
        coord *t = a;
        a = b;
        b = t;
    }
    if (a != c->coords)
        memcpy(c->coords, a, n * sizeof(coord));
    return true;
}

static void heap_push(uint32_t *h, size_t *n, uint32_t v)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] < v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static void heap_pop(uint32_t *h, size_t *n)
{
    uint32_t v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        uint32_t mv = v;
        if (l < *n && h[l] > mv) {
            m = l;
            mv = h[l];
        }
        if (r < *n && h[r] > mv)
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = v;
}

/* The run's ops folded into disjoint segments, each painted by the last op
 * over it (later events win: each assigns its range). */
static bool overlay(mh_cache *c, const mh_op *ops, size_t k, seg **out, size_t *nout)
{
    /* Ops in address order that do not overlap (an allocator handing out
     * ascending addresses, a leak): each is its own segment - no ends to
     * sort, no sweep. */
    size_t live = 0;
    uint64_t last_end = 0;
    bool ordered = true;
    for (size_t i = 0; i < k && ordered; i++) {
        if (ops[i].start >= ops[i].end)
            continue;  /* (dead) */
        ordered = live == 0 || ops[i].start >= last_end;
        last_end = ops[i].end;
        live++;
    }
    if (ordered) {
        if (!grow(&c->segs, &c->segs_cap, live + 1, sizeof(seg)))
            return false;
        seg *segs = c->segs;
        size_t ns = 0;
        for (size_t i = 0; i < k; i++)
            if (ops[i].start < ops[i].end)
                segs[ns++] = (seg){ops[i].start, ops[i].end, (uint32_t)i};
        *out = segs;
        *nout = ns;
        return true;
    }
    if (!grow(&c->coords, &c->coords_cap, 2 * k, sizeof(coord)) ||
        !grow((void **)&c->heap, &c->heap_cap, k, sizeof(uint32_t)) ||
        !grow((void **)&c->alive, &c->alive_cap, k, 1) ||
        !grow(&c->segs, &c->segs_cap, 2 * k + 1, sizeof(seg)))
        return false;
    coord *co = c->coords;
    size_t nc = 0;
    for (size_t i = 0; i < k; i++) {
        if (ops[i].start >= ops[i].end)
            continue;
        co[nc++] = (coord){ops[i].start, (uint32_t)i, 1};
        co[nc++] = (coord){ops[i].end, (uint32_t)i, 0};
    }
    if (!sort_coords(c, co, nc))
        return false;
    uint32_t *heap = c->heap;
    uint8_t *alive = c->alive;
    seg *segs = c->segs;
    size_t nh = 0, ns = 0;
    for (size_t i = 0; i < nc;) {
        uint64_t x = co[i].x;
        for (; i < nc && co[i].x == x; i++) {
            if (co[i].start) {
                alive[co[i].op] = 1;
                heap_push(heap, &nh, co[i].op);
            } else {
                alive[co[i].op] = 0;
            }
        }
        while (nh && !alive[heap[0]])
            heap_pop(heap, &nh);
        if (nh == 0 || i == nc)
            continue;
        uint64_t next = co[i].x;
        if (ns && segs[ns - 1].end == x && segs[ns - 1].op == heap[0])
            segs[ns - 1].end = next;
        else
            segs[ns++] = (seg){x, next, heap[0]};
    }
    *out = segs;
    *nout = ns;
    return true;
}

/* A working array with room for `need` regions: the one `cur` is not. */
static mh_region *work_other(mh_cache *c, const mh_region *cur, size_t need)
{
    int w = cur == c->work[0] ? 1 : 0;
    if (!grow((void **)&c->work[w], &c->work_cap[w], need, sizeof(mh_region)))
        return NULL;
    return c->work[w];
}

static void piece(mh_region *out, size_t *n, const mh_region *r, uint64_t a, uint64_t b)
{
    if (a >= b)
        return;
    out[*n] = *r;
    out[*n].start = a;
    out[*n].end = b;
    (*n)++;
}

/* The paint run ops[0..k) over cur[0..n): into a working array.  *changed
 * is set when the result differs from cur (a hole over no region does not:
 * the map stays as it is, and nothing is published). */
static bool paint(mh_cache *c, const mh_region **cur, size_t *n, const mh_op *ops, size_t k,
                  bool *changed, snap **into)
{
    seg *segs;
    size_t ns;
    if (!overlay(c, ops, k, &segs, &ns))
        return false;
    if (ns == 0)
        return true;
    bool any = false;
    for (size_t si = 0; si < ns && !any; si++)
        any = ops[segs[si].op].kind == MH_OP_ASSIGN;
    if (!any) {
        /* Holes only: over no region, nothing to do (the common drain of
         * an allocator that handed its address back). */
        const mh_region *old = *cur;
        size_t no = *n, i = 0;
        for (size_t si = 0; si < ns && !any; si++) {
            while (i < no && old[i].end <= segs[si].start)
                i++;
            any = i < no && old[i].start < segs[si].end;
        }
        if (!any)
            return true;
    }
    *changed = true;
    uint64_t id_base = atomic_fetch_add(&g_next_alloc_id, k);
    /* `into`: straight into a new snapshot (the last step of a commit:
     * one copy of the map less). */
    mh_region *out;
    if (into != NULL) {
        *into = snap_alloc(c->spare, *n + 2 * ns + 1);
        out = *into != NULL ? (mh_region *)(*into)->regions : NULL;
    } else {
        out = work_other(c, *cur, *n + 2 * ns + 1);
    }
    if (out == NULL)
        return false;
    const mh_region *old = *cur;
    size_t m = 0, i = 0, no = *n;  /* (`old`, `no`, `i`: the map before this run) */
    uint64_t from = 0;
    for (size_t si = 0; si < ns; si++) {
        const seg *s = &segs[si];
        for (; i < no && old[i].start < s->start; i++) {
            uint64_t a = old[i].start > from ? old[i].start : from;
            uint64_t b = old[i].end < s->start ? old[i].end : s->start;
            piece(out, &m, &old[i], a, b);
            if (old[i].end > s->start)
                break;
        }
        const mh_op *op = &ops[s->op];
        if (op->kind == MH_OP_ASSIGN)
            out[m++] = (mh_region){.start = s->start, .end = s->end,
                                   .alloc_id = op->alloc_id ? op->alloc_id : id_base + s->op,
                                   .period = op->period, .device = op->device, .type = op->type,
                                   .origin = op->origin};
        while (i < no && old[i].end <= s->end)
            i++;
        from = s->end;
    }
    for (; i < no; i++)
        piece(out, &m, &old[i], old[i].start > from ? old[i].start : from, old[i].end);
    *cur = out;
    *n = m;
    return true;
}

/* A barrier op over cur[0..n): into a working array. */
static bool barrier(mh_cache *c, const mh_region **cur, size_t *n, const mh_op *op)
{
    if (op->kind == MH_OP_CLEAR) {
        *n = 0;
        return true;
    }
    mh_region *out = work_other(c, *cur, *n ? *n : 1);
    if (out == NULL)
        return false;
    const mh_region *old = *cur;
    size_t no = *n;
    if (no)
        memcpy(out, old, no * sizeof(mh_region));
    if (op->kind == MH_OP_FORGET_DEVICE) {
        for (size_t i = 0; i < no; i++)
            if (out[i].type != MEMHOOK_MEMORY_UNKNOWN &&
                (op->device < 0 || out[i].device == op->device || out[i].device < 0)) {
                out[i].type = MEMHOOK_MEMORY_UNKNOWN;
                out[i].device = -1;
            }
    } else if (op->kind == MH_OP_DEMOTE_AT) {
        long lo = -1;
        for (size_t i = 0; i < no; i++)  /* (rare: a FREE nobody knew the size of) */
            if (out[i].start <= op->start && op->start < out[i].end) {
                lo = (long)i;
                break;
            }
        /* The run a merging cache would hold as one region.  A region
         * learned in another install period than the FREE's is UNKNOWN in
         * meaning (a hooks gap lies between: the reference marked it so),
         * so it is neither demoted nor part of the run. */
        uint32_t p = op->period;
        if (lo >= 0 && out[lo].type != MEMHOOK_MEMORY_UNKNOWN && out[lo].period == p) {
            uint8_t t = out[lo].type;
            int16_t d = out[lo].device;
            long hi = lo;
            while (lo > 0 && out[lo - 1].end == out[lo].start && out[lo - 1].type == t &&
                   out[lo - 1].device == d && out[lo - 1].period == p)
                lo--;
            while ((size_t)hi + 1 < no && out[hi + 1].start == out[hi].end &&
                   out[hi + 1].type == t && out[hi + 1].device == d && out[hi + 1].period == p)
                hi++;
            for (long i = lo; i <= hi; i++) {
                out[i].type = MEMHOOK_MEMORY_UNKNOWN;
                out[i].device = -1;
            }
        }
    }
    *cur = out;
    return true;
}

/* A drain's commit leaves a batch queued while it is short beside the map
 * (a publish copies the whole map): a query publishes it first
 * (mh_cache_publish_deferred), and a later commit takes it along once
 * twice as many ops are queued as the map has regions (and at least
 * DEFER_OPS).  So a drain's cost per event stays bounded however large
 * the map (a region is copied about once per two ops, amortised; more ops
 * a commit would cost more in its transient arrays than they save): a
 * process where nobody asks pays for the map only every DEFER_OPS events
 * or so, and Python's frequent small drains do not pay a copy of the map
 * each.  Small maps are published at once (their copy is cheap, and a
 * query then finds nothing to do). */
#define DEFER_OPS 65536u
#define DEFER_REGIONS 2048u

void mh_cache_write_end_deferrable(mh_cache *c)
{
    snap *s = atomic_load_explicit(&c->current, memory_order_acquire);
    size_t limit = 2 * s->n > DEFER_OPS ? 2 * s->n : DEFER_OPS;
    if (c->q->n != 0 && c->q->n < limit && s->n >= DEFER_REGIONS) {
        atomic_store_explicit(&c->head.deferred, c->q->n, memory_order_release);
        seat_leave(c);
        return;
    }
    mh_cache_write_end(c);
}

bool mh_cache_publish_deferred(mh_cache *c, bool wait)
{
    if (atomic_load_explicit(&c->head.deferred, memory_order_acquire) == 0)
        return true;
    /* A writer at work publishes, or defers again: a reader does not wait
     * for it (`wait` false), it reads what the map lacks elsewhere. */
    if (!mh_cache_write_begin(c, wait))
        return atomic_load_explicit(&c->head.deferred, memory_order_acquire) == 0;
    mh_cache_write_end(c);
    return true;
}

void mh_cache_write_end(mh_cache *c)
{
    oplist *q = c->q;
    if (q->n != 0) {
        snap *s = atomic_load_explicit(&c->current, memory_order_acquire);
        const mh_region *cur = s->regions;
        size_t n = s->n;
        bool ok = true, changed = false;
        snap *direct = NULL;
        for (size_t i = 0; i < q->n && ok;) {
            if (is_paint(&q->ops[i])) {
                size_t j = i;
                while (j < q->n && is_paint(&q->ops[j]))
                    j++;
                /* (the last run paints into the snapshot itself) */
                ok = paint(c, &cur, &n, q->ops + i, j - i, &changed, j == q->n ? &direct : NULL);
                i = j;
            } else {
                ok = barrier(c, &cur, &n, &q->ops[i]);
                changed = true;
                i++;
            }
        }
        snap *next = NULL;
        if (direct != NULL && ok) {
            snap_finish(direct, n, s);
            next = direct;
        } else if (direct != NULL) {
            snap_free(c->spare, direct);
        } else if (ok && changed) {
            next = snap_build(c->spare, cur, n, s);
        }
        if (next != NULL)
            publish(c, next);
        else if (ok && !changed) {
            /* (the map stays as it is: nothing to publish) */
        } else {
            /* Out of memory: keep answering from what stands, vouching
             * for nothing from now on (a query asks the driver). */
            set_broken(c);
            mh_error("memory-type cache: out of memory applying %zu operations; the cache "
                     "no longer vouches for any answer", q->n);
        }
    }
    /* What waited for these ops to be visible (the queue's per-lane
     * counts: mh_cache_stage_mark), now that they are. */
    for (size_t i = 0; i < q->nmarks; i++)
        atomic_store_explicit(q->marks[i].where, q->marks[i].value, memory_order_release);
    oplist_clear(q);
    /* (only now: a reader that sees no deferred work reads it published) */
    atomic_store_explicit(&c->head.deferred, 0, memory_order_release);
    seat_leave(c);
}

void mh_cache_mark_reserved(mh_cache *c, const uint64_t *pairs, size_t count)
{
    if (!mh_cache_write_begin(c, true))
        return;
    if (c->q->n != 0) {  /* (what a drain left queued first: the gaps are the map's) */
        mh_cache_write_end(c);
        mh_cache_write_begin(c, true);
    }
    reader rd;
    const snap *s = read_begin(c, &rd);  /* (the seat keeps it current) */
    for (size_t p = 0; p < count; p++) {
        uint64_t lo = pairs[2 * p], hi = pairs[2 * p + 1];
        long i = s->n ? last_at_or_before(s, lo) : -1;
        uint64_t at = lo;
        if (i >= 0 && s->regions[i].end > at)
            at = s->regions[i].end;
        for (size_t j = (size_t)(i + 1); at < hi; j++) {
            uint64_t stop = j < s->n && s->regions[j].start < hi ? s->regions[j].start : hi;
            if (at < stop)
                mh_cache_op(c, &(mh_op){.start = at, .end = stop, .kind = MH_OP_ASSIGN,
                                        .device = -1, .type = MEMHOOK_MEMORY_UNKNOWN,
                                        .origin = MEMHOOK_ORIGIN_HOOKS});
            if (j >= s->n)
                break;
            at = s->regions[j].end > at ? s->regions[j].end : at;
        }
    }
    read_end(&rd);
    mh_cache_write_end(c);
}

/* ---- test caches (memhook_testing_cache_*) and fork ---- */

mh_cache *mh_cache_new(void)
{
    mh_cache *c = map_bytes(page_round(sizeof(mh_cache)));
    if (c == NULL)
        return NULL;
    atomic_init(&c->current, &g_empty);
    atomic_flag_clear(&c->seat);
    c->q = &c->lists[0];
    c->stage = &c->lists[1];
    return c;
}

void mh_cache_destroy(mh_cache *c)
{
    if (c == NULL || c == &mh_process_cache)
        return;
    mh_cache_write_begin(c, true);
    snap *s = atomic_exchange(&c->current, &g_empty);
    if (s != &g_empty) {
        s->retire_epoch = atomic_fetch_add(&g_epoch, 1);
        s->retired_next = c->retired;
        c->retired = s;
        c->retired_bytes += s->bytes;
        c->retired_count++;
    }
    /* The caller promises no reader is left: wait for stragglers anyway. */
    while (c->retired != NULL) {
        reclaim(c, true);
        if (c->retired != NULL)
            sched_yield();
    }
    for (int i = 0; i < SPARE_SNAPS; i++)
        if (c->spare[i] != NULL)
            snap_free(NULL, c->spare[i]);
    oplist_unmap(&c->lists[0]);
    oplist_unmap(&c->lists[1]);
    for (int w = 0; w < 2; w++)
        if (c->work[w])
            munmap(c->work[w], page_round(c->work_cap[w] * sizeof(mh_region)));
    if (c->coords)
        munmap(c->coords, page_round(c->coords_cap * sizeof(coord)));
    if (c->coords_tmp)
        munmap(c->coords_tmp, page_round(c->coords_tmp_cap * sizeof(coord)));
    if (c->heap)
        munmap(c->heap, page_round(c->heap_cap * sizeof(uint32_t)));
    if (c->alive)
        munmap(c->alive, page_round(c->alive_cap));
    if (c->segs)
        munmap(c->segs, page_round(c->segs_cap * sizeof(seg)));
    if (c->radix)
        munmap(c->radix, (1u << 16) * sizeof(size_t));
    munmap(c, page_round(sizeof(mh_cache)));
}

int mh_cache_search_steps(mh_cache *c)
{
    reader rd;
    const snap *s = read_begin(c, &rd);
    int steps = 0;
    for (size_t sb = s->guide != NULL ? s->guide_step : s->pow >> 1; sb != 0; sb >>= 1)
        steps++;
    read_end(&rd);
    return steps;
}

size_t mh_cache_regions(mh_cache *c, mh_region *out, size_t capacity)
{
    reader rd;
    const snap *s = read_begin(c, &rd);
    size_t n = s->n;
    for (size_t i = 0; i < n && i < capacity; i++)
        out[i] = s->regions[i];
    read_end(&rd);
    return n;
}

void mh_cache_fork_child(void)
{
    /* A writer of the parent may have held the seat: it is gone, and every
     * published snapshot is whole.  The queued operations stay (a drain's
     * deferred events among them), for the child's next writer; one the
     * vanished writer was applying is applied again, which leaves the map
     * as it was. */
    atomic_flag_clear(&mh_process_cache.seat);
    /* The parent's other threads' slots are idle in the child. */
    for (int i = 0; i < READER_SLOTS; i++)
        if (i != t_slot - 1) {
            atomic_store(&g_slots[i].epoch, 0);
            atomic_store(&g_slots[i].used, 0);
        }
    atomic_store(&g_overflow_readers, 0);
    if (g_asymmetric)  /* (the registration is per process) */
        g_asymmetric = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                               0, 0) == 0;
    /* (a reader of the child falling back to fences meanwhile is fine: its
     * slot store is then a full barrier) */
}
