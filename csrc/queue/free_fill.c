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

static void forget(uint64_t addr)
{
    if (g_held.addr == addr)
        g_held.addr = 0;
    if (g_count != 0)
        erase(addr);
}

void mh_fill_note(const memhook_event *e)
{
    if (e->flags & (MEMHOOK_EVENT_DRIVER_UNLOADED | MEMHOOK_EVENT_HOOKS_GAP)) {
        clear();
        g_ended_all = true;  /* (the cache's records too, until it is fed) */
        return;
    }
    if (e->flags & MEMHOOK_EVENT_CONTEXT_RESET) {
        if (e->result == 0) {
            clear();  /* (which of them another context owns, the driver knows) */
            g_ended_all = true;
        }
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

bool mh_fill_ended(uint64_t addr)
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

bool mh_fill_find(uint64_t addr, mh_fill_rec *out)
{
    const fill_slot *s = g_held.addr == addr && addr != 0 ? &g_held : find_slot(addr);
    if (s == NULL)
        return false;
    *out = s->rec;
    return true;
}

void mh_fill_apply(memhook_event *e, const mh_fill_rec *rec)
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
