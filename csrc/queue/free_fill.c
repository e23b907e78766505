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

/* The table, the held ALLOC and the ended list (free_fill.h says why they
 * are there, not here). */
mh_fill_hot mh_fill_now;
static mh_fill_hot *const fs = &mh_fill_now;

static size_t home(uint64_t addr, size_t cap)
{
    return mh_fill_home(addr, cap);
}

static fill_slot *find_slot(uint64_t addr)
{
    if (fs->cap == 0)
        return NULL;
    for (size_t i = home(addr, fs->cap);; i = (i + 1) & (fs->cap - 1)) {
        if (fs->slots[i].addr == addr)
            return &fs->slots[i];
        if (fs->slots[i].addr == 0)
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
    size_t cap = fs->cap != 0 ? fs->cap * 2 : 1024;
    fill_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return false;
    for (size_t i = 0; i < fs->cap; i++)
        if (fs->slots[i].addr != 0)
            put(slots, cap, fs->slots[i].addr, &fs->slots[i].rec);
    free(fs->slots);
    fs->slots = slots;
    fs->cap = cap;
    return true;
}

static void insert(uint64_t addr, const mh_fill_rec *rec)
{
    fill_slot *s = find_slot(addr);
    if (s != NULL) {  /* (its FREE went by unseen: a gap, or a native recorder) */
        s->rec = *rec;
        return;
    }
    if ((fs->count + 1) * 2 > fs->cap && !grow())
        return;
    put(fs->slots, fs->cap, addr, rec);
    fs->count++;
}

static void erase(uint64_t addr)
{
    fill_slot *s = find_slot(addr);
    if (s == NULL)
        return;
    size_t i = (size_t)(s - fs->slots);
    /* Backward shift: move each later member of the run into the hole when
     * its home does not lie cyclically in (hole, it]. */
    size_t mask = fs->cap - 1;
    for (size_t j = (i + 1) & mask; fs->slots[j].addr != 0; j = (j + 1) & mask) {
        size_t h = home(fs->slots[j].addr, fs->cap);
        bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
        if (!stays) {
            fs->slots[i] = fs->slots[j];
            i = j;
        }
    }
    fs->slots[i].addr = 0;
    fs->count--;
}

static void clear(void)
{
    if (fs->count != 0)
        memset(fs->slots, 0, fs->cap * sizeof *fs->slots);
    fs->count = 0;
    fs->held.addr = 0;
}

/* The held record's address is never also in the table: it is held only
 * after forget() erased its address there, and goes to the table only as
 * it stops being held.  So a FREE of the held address costs a compare. */
static void forget(uint64_t addr)
{
    if (fs->held.addr == addr) {
        fs->held.addr = 0;
        return;
    }
    if (fs->count != 0)
        erase(addr);
}

/* A marker that ends what consumers may believe: the driver unloaded, a
 * gap in the hooks, a context torn down. */
static void note_marker(const memhook_event *e)
{
    if ((e->flags & (MEMHOOK_EVENT_DRIVER_UNLOADED | MEMHOOK_EVENT_HOOKS_GAP)) ||
        e->result == 0) {
        clear();  /* (of a reset: which of them another context owns, the driver knows) */
        fs->ended_all = true;  /* (the cache's records too, until it is fed) */
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
        if (fs->held.addr != 0)
            insert(fs->held.addr, &fs->held.rec);
        fs->held = (fill_slot){e->address, {e->size, e->mem_type, e->device}};
    } else if (e->kind == MEMHOOK_EVENT_FREE) {
        forget(e->address);
        if (fs->nended < MH_FILL_ENDED_MAX)
            fs->ended[fs->nended++] = e->address;
        else
            fs->ended_all = true;
    }
}

/* Whether a FREE of addr was handed out since the last batch went to the
 * cache's feed (or too many to tell): the cache's record there is ended,
 * though the feed has not staged its operation yet. */
static bool ended(uint64_t addr)
{
    if (fs->ended_all)
        return true;
    for (size_t i = 0; i < fs->nended; i++)
        if (fs->ended[i] == addr)
            return true;
    return false;
}

void mh_fill_fed(void)
{
    fs->nended = 0;
    fs->ended_all = false;
}

bool mh_fill_find(uint64_t addr, mh_fill_rec *out, mh_fill_fallback_fn fallback)
{
    if (fs->held.addr == addr && addr != 0) {
        *out = fs->held.rec;
        return true;
    }
    const fill_slot *s = find_slot(addr);
    if (s != NULL) {
        *out = s->rec;
        return true;
    }
    return fallback != NULL && !ended(addr) && fallback(addr, out);
}

void mh_fill_handed_rest(memhook_event *e, memhook_event *also, mh_fill_fallback_fn fallback)
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
