/*
 * free_fill.h - the drain's record of the allocations it handed out, which
 * sizes the FREEs the hooks recorded with their address only (queue.h,
 * MH_DEVICE_FILL).
 *
 * The drain's side of what the live table was in the hook: address ->
 * (size, type, device) of every successful ALLOC handed out and not yet
 * freed in the order.  Consumer side only (the queue's consumer lock), so
 * a plain hash table.  A marker that ends what consumers may believe (the
 * driver unloaded, a context torn down, a gap in the hooks) empties it: a
 * FREE after it finds nothing here; the cache's record of a driver answer
 * may size it (event_drain.c), else it carries size 0 with
 * MEMHOOK_EVENT_SIZE_UNKNOWN, which makes the cache ask the driver.
 */
#ifndef MEMHOOK_FREE_FILL_H
#define MEMHOOK_FREE_FILL_H

#include <stdbool.h>
#include <stdint.h>

#include "queue.h"

typedef struct mh_fill_rec {
    uint64_t size;
    int16_t mem_type;
    int16_t device;
} mh_fill_rec;

/* Where a FREE of addr is sized when the drain's record does not know it:
 * the cache's record of a driver answer (event_drain.c asks the feed's
 * extent callback).  Consulted only while no FREE of addr was handed out
 * since the last batch went to the feed (the cache's record lags those). */
typedef bool (*mh_fill_fallback_fn)(uint64_t addr, mh_fill_rec *out);
/* The allocation handed out at addr and not freed since, else fallback's
 * answer (NULL: none). */
MH_HIDDEN bool mh_fill_find(uint64_t addr, mh_fill_rec *out, mh_fill_fallback_fn fallback);
/* free_fill.c's state, in the header for the inline path below (which
 * settles a backlog's common events without a call).  Consumer side only
 * (the queue's consumer lock); process-wide like the event order.
 *  - the table: open addressing over `slots` (cap a power of two, 0
 *    before the first insert), `count` in use;
 *  - the last ALLOC handed out, held back from the table: most FREEs
 *    follow their ALLOC closely (an allocator handing one address out and
 *    back), and then the pair costs a compare, not an insert and an erase;
 *  - the FREEs handed out and not fed to the cache yet (a look's worth:
 *    the cache's record of a driver answer lags them), scanned only for a
 *    FREE nobody else can size; when the list fills up, every address
 *    counts as ended until the next feed. */
typedef struct mh_fill_slot {
    uint64_t addr;  /* 0: empty */
    mh_fill_rec rec;
} mh_fill_slot;
#define MH_FILL_ENDED_MAX 1024
typedef struct mh_fill_hot {
    mh_fill_slot *slots;
    size_t cap, count;
    mh_fill_slot held;
    size_t nended;
    bool ended_all;
    uint64_t ended[MH_FILL_ENDED_MAX];
} mh_fill_hot;
MH_HIDDEN extern mh_fill_hot mh_fill_now;

/* An address's first slot in a table of cap slots. */
static inline size_t mh_fill_home(uint64_t addr, size_t cap)
{
    return (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

/* mh_fill_handed past its inline path (below). */
MH_HIDDEN void mh_fill_handed_rest(memhook_event *e, memhook_event *also,
                                   mh_fill_fallback_fn fallback);

/* The events handed out so far were fed to the cache. */
MH_HIDDEN void mh_fill_fed(void);
/* Fill a FREE recorded with its address only (MH_DEVICE_FILL) from rec, or
 * (rec NULL) say its size is unknown; a ranged one (MH_EVENT_RANGE) keeps
 * the size its call named.  (Inline: every such FREE handed out pays it,
 * twice under the tee.) */
static inline void mh_fill_apply(memhook_event *e, const mh_fill_rec *rec)
{
    /* (a query of the FREE's own thread may read the slot meanwhile,
     * mh_queue_own_events: the size before the flag that says it is known) */
    bool ranged = e->flags & MH_EVENT_RANGE;  /* (names its size: type and device only) */
    if (rec != NULL) {
        if (!ranged)
            __atomic_store_n(&e->size, rec->size, __ATOMIC_RELEASE);
        e->mem_type = rec->mem_type;
        e->device = rec->device;
        __atomic_store_n(&e->flags, e->flags & ~MEMHOOK_EVENT_SIZE_UNKNOWN, __ATOMIC_RELEASE);
    } else {
        e->device = -1;
    }
}

/* An event being handed out (its result settled, the private flags still
 * on): a FREE recorded with its address only (MH_DEVICE_FILL) is filled
 * as mh_fill_find finds it, in e and in `also` unless NULL (the tee's slot:
 * the drain hands the event out again from there); then the record
 * follows the event (an ALLOC recorded, a FREE's allocation forgotten, a
 * marker that ends what consumers may believe empties it).  One call per
 * event: the whole of the drain's sizing of a backlog passes here.
 *
 * Inline, a backlog's common pair: an ALLOC while nothing is held and its
 * address starts no probe run of the table (so no older record is there
 * to forget), then the FREE of the held address (which is never also in
 * the table: free_fill.c's forget(), so the table stays as it is).  The
 * rest out of line. */
static inline void mh_fill_handed(memhook_event *e, memhook_event *also,
                                  mh_fill_fallback_fn fallback)
{
    mh_fill_hot *h = &mh_fill_now;
    uint64_t addr = e->address;
    if (__builtin_expect((e->flags & (MEMHOOK_EVENT_DRIVER_UNLOADED | MEMHOOK_EVENT_HOOKS_GAP |
                                      MEMHOOK_EVENT_CONTEXT_RESET | MH_EVENT_UNPAIRED)) == 0 &&
                             e->result == 0 && addr != 0, 1)) {
        if (e->kind == MEMHOOK_EVENT_FREE && addr == h->held.addr &&
            h->nended < MH_FILL_ENDED_MAX) {
            if (e->device == MH_DEVICE_FILL) {
                mh_fill_apply(e, &h->held.rec);
                if (also != NULL)
                    mh_fill_apply(also, &h->held.rec);
            }
            h->held.addr = 0;
            h->ended[h->nended++] = addr;
            return;
        }
        if (e->kind == MEMHOOK_EVENT_ALLOC && h->held.addr == 0 && e->size != 0 &&
            (h->count == 0 || h->slots[mh_fill_home(addr, h->cap)].addr == 0)) {
            h->held = (mh_fill_slot){addr, {e->size, e->mem_type, e->device}};
            return;
        }
    }
    mh_fill_handed_rest(e, also, fallback);
}

#endif
