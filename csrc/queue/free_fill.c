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

typedef struct fill_slot {
    uint64_t addr;  /* 0: empty */
    mh_fill_rec rec;
} fill_slot;

/* Process-wide like the event order it follows; under the consumer lock. */
static fill_slot *g_slots;
static size_t g_cap, g_count;
/* The last ALLOC handed out, held back from the table: most FREEs follow
 * their ALLOC closely (an allocator handing one address out and back), and
 * then the pair costs a compare, not an insert and an erase. */
static fill_slot g_held;

/* The FREEs handed out and not fed to the cache yet (a look's worth): the
 * cache's record of a driver answer lags them (event_drain.c's fill_find).
 * A fixed list, scanned only for a FREE nobody else can size; when it
 * fills up, every address counts as ended until the next feed. */
#define ENDED_MAX 1024
static uint64_t g_ended[ENDED_MAX];
static size_t g_nended;
static bool g_ended_all;

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
    g_held.addr = 0;
}

/* The held record's address is never in the table too: it is held only
 * after forget() erased its address there, and goes to the table only as
 * it stops being held.  So a FREE of the held address costs a compare. */
static void forget(uint64_t addr)
{
    if (g_held.addr == addr) {
        g_held.addr = 0;
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
        g_ended_all = true;  /* (the cache's records too, until it is fed) */
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
        if (g_held.addr != 0)
            insert(g_held.addr, &g_held.rec);
        g_held = (fill_slot){e->address, {e->size, e->mem_type, e->device}};
    } else if (e->kind == MEMHOOK_EVENT_FREE) {
        forget(e->address);
        if (g_nended < ENDED_MAX)
            g_ended[g_nended++] = e->address;
        else
            g_ended_all = true;
    }
}

/* Whether a FREE of addr was handed out since the last batch went to the
 * cache's feed (or too many to tell): the cache's record there is ended,
 * though the feed has not staged its operation yet. */
static bool ended(uint64_t addr)
{
    if (g_ended_all)
        return true;
    for (size_t i = 0; i < g_nended; i++)
        if (g_ended[i] == addr)
            return true;
    return false;
}

void mh_fill_fed(void)
{
    g_nended = 0;
    g_ended_all = false;
}

bool mh_fill_find(uint64_t addr, mh_fill_rec *out, mh_fill_fallback_fn fallback)
{
    if (g_held.addr == addr && addr != 0) {
        *out = g_held.rec;
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

void mh_fill_handed(memhook_event *e, memhook_event *also, mh_fill_fallback_fn fallback)
{
    /* A backlog is mostly an allocation handed out and back: an ALLOC
     * while nothing is held and its address is in no probe run of the
     * table (so no older record there), then the FREE of the held
     * address.  Those settle here; the rest, as note() and
     * mh_fill_find say, out of line. */
    uint64_t addr = e->address;
    if (__builtin_expect((e->flags & (MEMHOOK_EVENT_DRIVER_UNLOADED | MEMHOOK_EVENT_HOOKS_GAP |
                                      MEMHOOK_EVENT_CONTEXT_RESET | MH_EVENT_UNPAIRED)) == 0 &&
                             e->result == 0 && addr != 0, 1)) {
        if (e->kind == MEMHOOK_EVENT_FREE && addr == g_held.addr && g_nended < ENDED_MAX) {
            if (e->device == MH_DEVICE_FILL) {
                mh_fill_apply(e, &g_held.rec);
                if (also != NULL)
                    mh_fill_apply(also, &g_held.rec);
            }
            g_held.addr = 0;
            g_ended[g_nended++] = addr;
            return;
        }
        if (e->kind == MEMHOOK_EVENT_ALLOC && g_held.addr == 0 && e->size != 0 &&
            (g_count == 0 || g_slots[home(addr, g_cap)].addr == 0)) {
            g_held = (fill_slot){addr, {e->size, e->mem_type, e->device}};
            return;
        }
    }
    handed(e, also, fallback);
}
