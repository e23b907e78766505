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

/* What an event handed out (its result settled) changes. */
MH_HIDDEN void mh_fill_note(const memhook_event *e);
/* The allocation handed out at addr and not freed since, if any. */
MH_HIDDEN bool mh_fill_find(uint64_t addr, mh_fill_rec *out);
/* Whether a FREE of addr was handed out since the last batch went to the
 * cache's feed (or too many to tell): the cache's record there is ended,
 * though the feed has not staged its operation yet. */
MH_HIDDEN bool mh_fill_ended(uint64_t addr);
/* The events handed out so far were fed to the cache. */
MH_HIDDEN void mh_fill_fed(void);
/* Fill a FREE recorded with its address only (MH_DEVICE_FILL) from rec, or
 * (rec NULL) say its size is unknown; a ranged one (MH_EVENT_RANGE) keeps
 * the size its call named. */
MH_HIDDEN void mh_fill_apply(memhook_event *e, const mh_fill_rec *rec);

#endif
