/*
 * free_fill.c - the drain's record of the allocations it handed out
 * (free_fill.h says what for).
 *
 * Open addressing with linear probing, deletion by backward shift (no
 * tombstones: an allocator that hands out ever new addresses keeps the
 * probe runs short), grown at half full.  Out of memory it stops
 * recording: a FREE it does not know is sized unknown, which the cache
 * resolves through the driver - never a wrong size.
 */
#include <stdlib.h>
#include <string.h>

#include "free_fill.h"

typedef mh_fill_slot fill_slot;

/* Process-wide like the event order it follows; under the consumer lock. */
static fill_slot *g_slots;
static size_t g_cap, g_count;
/* The held ALLOC and the ended list (free_fill.h says why they are there). */
mh_fill_hot mh_fill_now;

static size_t home(uint64_t addr, size_t cap)
{
    return (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static fill_slot *find_slot(uint64_t addr)
{
    if (g_cap == 0)
        return NULL;
    for (size_t i = home(addr, g_cap);; i = (i + 1) & (g_cap - 1)) {
        if (g_slots[i].addr == addr)
            return &g_slots[i];
        if (g_slots[i].addr == 0)
            return NULL;
    }
}

static void put(fill_slot *slots, size_t cap, uint64_t addr, const mh_fill_rec *rec)
{
    size_t i = home(addr, cap);
    while (slots[i].addr != 0 && slots[i].addr != addr)
        i = (i + 1) & (cap - 1);
    slots[i].addr = addr;
    slots[i].rec = *rec;
}

static bool grow(void)
{
    size_t cap = g_cap != 0 ? g_cap * 2 : 1024;
    fill_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return false;
    for (size_t i = 0; i < g_cap; i++)
        if (g_slots[i].addr != 0)
            put(slots, cap, g_slots[i].addr, &g_slots[i].rec);
    free(g_slots);
    g_slots = slots;
    g_cap = cap;
    return true;
}

static void insert(uint64_t addr, const mh_fill_rec *rec)
{
    fill_slot *s = find_slot(addr);
    if (s != NULL) {  /* (its FREE went by unseen: a gap, or a native recorder) */
        s->rec = *rec;
        return;
    }
    if ((g_count + 1) * 2 > g_cap && !grow())
        return;
    put(g_slots, g_cap, addr, rec);
    g_count++;
}

static void erase(uint64_t addr)
{
    fill_slot *s = find_slot(addr);
    if (s == NULL)
        return;
    size_t i = (size_t)(s - g_slots);
    /* Backward shift: move each later member of the run into the hole when
     * its home does not lie cyclically in (hole, it]. */
    for (size_t j = (i + 1) & (g_cap - 1); g_slots[j].addr != 0; j = (j + 1) & (g_cap - 1)) {
        size_t h = home(g_slots[j].addr, g_cap);
        bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (!stays) {
            g_slots[i] = g_slots[j];
            i = j;
        }
    }
    g_slots[i].addr = 0;
    g_count--;
}

static void clear(void)
{
    if (g_count != 0)
        memset(g_slots, 0, g_cap * sizeof *g_slots);
    g_count = 0;
    mh_fill_now.held.addr = 0;
}

/* The held record's address is never in the table too: it is held only
 * after forget() erased its address there, and goes to the table only as
 * it stops being held.  So a FREE of the held address costs a compare. */
static void forget(uint64_t addr)
{
    if (mh_fill_now.held.addr == addr) {
        mh_fill_now.held.addr = 0;
        return;
    }
    if (g_count != 0)
        erase(addr);
}

/* A marker that ends what consumers may believe: the driver unloaded, a
 * gap in the hooks, a context torn down. */
static void note_marker(const memhook_event *e)
{
    if ((e->flags & (MEMHOOK_EVENT_DRIVER_UNLOADED | MEMHOOK_EVENT_HOOKS_GAP)) ||
        e->result == 0) {
        clear();  /* (of a reset: which of them another context owns, the driver knows) */
        mh_fill_now.ended_all = true;  /* (the cache's records too, until it is fed) */
    }
}

static inline void note(const memhook_event *e)
{
    if (__builtin_expect(e->flags & (MEMHOOK_EVENT_DRIVER_UNLOADED | MEMHOOK_EVENT_HOOKS_GAP |
                                     MEMHOOK_EVENT_CONTEXT_RESET), 0)) {
        note_marker(e);
        return;
    }
    if (e->result != 0 || e->address == 0)
        return;
    if (e->kind == MEMHOOK_EVENT_ALLOC) {
        forget(e->address);  /* (an older record there is wrong now) */
        if (e->size == 0 || (e->flags & MH_EVENT_UNPAIRED))
            return;
        if (mh_fill_now.held.addr != 0)
            insert(mh_fill_now.held.addr, &mh_fill_now.held.rec);
        mh_fill_now.held = (fill_slot){e->address, {e->size, e->mem_type, e->device}};
    } else if (e->kind == MEMHOOK_EVENT_FREE) {
        forget(e->address);
        if (mh_fill_now.nended < MH_FILL_ENDED_MAX)
            mh_fill_now.ended[mh_fill_now.nended++] = e->address;
        else
            mh_fill_now.ended_all = true;
    }
}

/* Whether a FREE of addr was handed out since the last batch went to the
 * cache's feed (or too many to tell): the cache's record there is ended,
 * though the feed has not staged its operation yet. */
static bool ended(uint64_t addr)
{
    if (mh_fill_now.ended_all)
        return true;
    for (size_t i = 0; i < mh_fill_now.nended; i++)
        if (mh_fill_now.ended[i] == addr)
            return true;
    return false;
}

void mh_fill_fed(void)
{
    mh_fill_now.nended = 0;
    mh_fill_now.ended_all = false;
}

bool mh_fill_find(uint64_t addr, mh_fill_rec *out, mh_fill_fallback_fn fallback)
{
    if (mh_fill_now.held.addr == addr && addr != 0) {
        *out = mh_fill_now.held.rec;
        return true;
    }
    const fill_slot *s = find_slot(addr);
    if (s != NULL) {
        *out = s->rec;
        return true;
    }
    return fallback != NULL && !ended(addr) && fallback(addr, out);
}

static __attribute__((noinline)) void handed(memhook_event *e, memhook_event *also,
                                              mh_fill_fallback_fn fallback)
{
    if (e->kind == MEMHOOK_EVENT_FREE && e->device == MH_DEVICE_FILL) {
        mh_fill_rec rec;
        const mh_fill_rec *found = mh_fill_find(e->address, &rec, fallback) ? &rec : NULL;
        mh_fill_apply(e, found);
        if (also != NULL)
            mh_fill_apply(also, found);
    }
    note(e);
}

void mh_fill_handed_rest(memhook_event *e, memhook_event *also, mh_fill_fallback_fn fallback)
{
    /* An ALLOC while nothing is held and its address is in no probe run of
     * the table (so no older record there) is held at once; the rest, as
     * note() and mh_fill_find say. */
    uint64_t addr = e->address;
    if (e->kind == MEMHOOK_EVENT_ALLOC && mh_fill_now.held.addr == 0 && addr != 0 &&
        e->size != 0 && e->result == 0 &&
        (e->flags & (MEMHOOK_EVENT_DRIVER_UNLOADED | MEMHOOK_EVENT_HOOKS_GAP |
                     MEMHOOK_EVENT_CONTEXT_RESET | MH_EVENT_UNPAIRED)) == 0 &&
        (g_count == 0 || g_slots[home(addr, g_cap)].addr == 0)) {
        mh_fill_now.held = (fill_slot){addr, {e->size, e->mem_type, e->device}};
        return;
    }
    handed(e, also, fallback);
}
