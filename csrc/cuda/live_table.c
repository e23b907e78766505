/*
 * live_table.c - address -> (size, type, device) of the allocations the
 * hooks have seen and not yet seen freed.
 *
 * Used only with exact sizes (emit.c: the trace, a subscriber that asked,
 * UCX fed): a FREE then carries the allocation's size from the hook, and
 * asking the driver (cuMemGetAddressRange) costs a driver lock and a tree
 * walk per free - and the driver does not answer at all for host-located
 * pool memory.  The table answers in a few loads; when it cannot
 * (allocation made before install, or the table is crowded), the FREE
 * falls back to the driver.
 *
 * Outside exact sizes the drain fills a FREE's size from its ALLOC
 * (queue/free_fill.h); docs/design/causal-merge.md says how what the
 * table did in the hook is done without it.
 *
 * Lock-free open addressing with linear probing over a fixed array mapped
 * on first use (MAP_NORESERVE: only touched pages cost memory).  A key is
 * EMPTY, TOMB (deleted), BUSY (being written) or an address; an insert
 * claims an EMPTY/TOMB slot with a CAS to BUSY, writes the record and
 * publishes the address with a release store; a FREE finds the record, and
 * once its event is out, CASes the address to TOMB (or EMPTY at a chain's
 * end).  Keys are unique among live allocations
 * (CUDA never hands out one address twice without a free between), so an
 * insert may reuse the first TOMB it meets.  Probes stop after
 * MAX_PROBE slots; that bounds the time in a hook, and a miss is still
 * correct (the driver answers).
 *
 * Generations: the table outlives uninstall(), while the program frees
 * and allocates unseen, so a record carries the generation its call began
 * in and one of another generation is never believed (its FREE asks the
 * driver); install.c starts a new generation at every uninstall and at
 * every install from mode none.  docs/design/causal-merge.md, "The live
 * table's generations", has the argument.
 */
#include <stdatomic.h>
#include <sys/mman.h>

#include "cuda_hooks.h"

#define TABLE_BITS 16u
#define TABLE_SLOTS (1u << TABLE_BITS)
#define MAX_PROBE 64u

#define KEY_EMPTY 0u
#define KEY_TOMB 1u
#define KEY_BUSY 2u

typedef struct live_slot {
    _Atomic uint64_t key;
    mh_live rec;
} live_slot;

/* Process-wide: allocations are (any thread frees what another made).
 * Not MH_HOT: only exact sizes read it, and on the hot line it pushed the
 * switches every hooked call reads onto a second line.  A line of its own
 * instead, so that no variable written elsewhere shares it. */
static struct {
    _Alignas(64) _Atomic(live_slot *) table;
} g_live;
/* Process-wide like the table whose records it dates; see the top. */
MH_HOT uint32_t mh_live_gen = 1;

void mh_live_new_generation(bool sweep)
{
    uint32_t gen = __atomic_add_fetch(&mh_live_gen, 1, __ATOMIC_ACQ_REL);
    live_slot *t = atomic_load_explicit(&g_live.table, memory_order_acquire);
    if (!sweep || t == NULL)
        return;
    /* Tombstone what is stale now.  A CAS that races an insert rewriting
     * the same address (stale overwrite: addr -> BUSY -> addr) may drop a
     * fresh record; its FREE then asks the driver, as any miss does. */
    for (uint32_t i = 0; i < TABLE_SLOTS; i++) {
        uint64_t k = atomic_load_explicit(&t[i].key, memory_order_acquire);
        if (k > KEY_BUSY && t[i].rec.gen != gen)
            atomic_compare_exchange_strong(&t[i].key, &k, KEY_TOMB);
    }
}

static live_slot *table(void)
{
    live_slot *t = atomic_load_explicit(&g_live.table, memory_order_acquire);
    if (t != NULL)
        return t;
    void *m = mmap(NULL, sizeof(live_slot) * TABLE_SLOTS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    live_slot *expected = NULL;
    if (!atomic_compare_exchange_strong(&g_live.table, &expected, (live_slot *)m)) {
        munmap(m, sizeof(live_slot) * TABLE_SLOTS);
        return expected;
    }
    return m;
}

static uint32_t home(uint64_t addr)
{
    return (uint32_t)((addr * 0x9E3779B97F4A7C15ull) >> (64 - TABLE_BITS));
}

static bool is_address(uint64_t key) { return key > KEY_BUSY; }

bool mh_live_insert(uint64_t addr, const mh_live *rec)
{
    live_slot *t = table();
    if (t == NULL || !is_address(addr))
        return false;
    uint32_t h = home(addr);
    live_slot *free_slot = NULL;
    for (uint32_t i = 0; i < MAX_PROBE; i++) {
        live_slot *s = &t[(h + i) & (TABLE_SLOTS - 1)];
        uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == addr) {
            /* A stale record (its free went by unseen): overwrite it. */
            if (atomic_compare_exchange_strong(&s->key, &k, KEY_BUSY)) {
                s->rec = *rec;
                atomic_store_explicit(&s->key, addr, memory_order_release);
                return true;
            }
            continue;
        }
        if ((k == KEY_TOMB || k == KEY_EMPTY) && free_slot == NULL)
            free_slot = s;
        if (k == KEY_EMPTY)
            break;  /* addr is not further along the chain */
    }
    while (free_slot != NULL) {
        uint64_t k = atomic_load_explicit(&free_slot->key, memory_order_acquire);
        if (k != KEY_TOMB && k != KEY_EMPTY)
            break;
        if (atomic_compare_exchange_strong(&free_slot->key, &k, KEY_BUSY)) {
            free_slot->rec = *rec;
            atomic_store_explicit(&free_slot->key, addr, memory_order_release);
            return true;
        }
    }
    /* Lost the slot to another thread: claim the first free one from home. */
    for (uint32_t i = 0; i < MAX_PROBE; i++) {
        live_slot *s = &t[(h + i) & (TABLE_SLOTS - 1)];
        uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if ((k == KEY_TOMB || k == KEY_EMPTY) &&
            atomic_compare_exchange_strong(&s->key, &k, KEY_BUSY)) {
            s->rec = *rec;
            atomic_store_explicit(&s->key, addr, memory_order_release);
            return true;
        }
    }
    return false;
}

/* Tombstones are only needed INSIDE a chain: a slot whose successor is
 * EMPTY ends its chain, so a take there leaves EMPTY instead of TOMB, and
 * the run of tombstones before it can become EMPTY too.  Without this
 * every address the table has ever held leaves a tombstone; once no EMPTY
 * slot is left near an address, each insert scans all MAX_PROBE slots
 * looking for a stale record of it (a stream-ordered pool handing out new
 * addresses gets there: docs/performance.md).
 *
 * Lock-free and conservative: each step is a CAS from TOMB to EMPTY, tried
 * only on a slot just seen to be a tombstone, and the walk stops at the
 * first slot that is not one or changed under it.  The one race it admits
 * - an insert claiming the EMPTY successor just as a take empties the slot
 * before it - cuts that record off its chain; the record is then not
 * found and its FREE asks the driver for the size, which is what any miss
 * of this table does (see the top of the file). */
static void sweep_tombs_before(live_slot *t, uint32_t i)
{
    for (uint32_t n = 0; n < MAX_PROBE; n++) {
        i = (i - 1) & (TABLE_SLOTS - 1);
        uint64_t k = atomic_load_explicit(&t[i].key, memory_order_relaxed);
        if (k != KEY_TOMB || !atomic_compare_exchange_strong(&t[i].key, &k, KEY_EMPTY))
            return;
    }
}

bool mh_live_find(uint64_t addr, mh_live *out, uint32_t *where)
{
    live_slot *t = atomic_load_explicit(&g_live.table, memory_order_acquire);
    if (t == NULL || !is_address(addr))
        return false;
    uint32_t h = home(addr);
    for (uint32_t i = 0; i < MAX_PROBE; i++) {
        uint32_t at = (h + i) & (TABLE_SLOTS - 1);
        uint64_t k = atomic_load_explicit(&t[at].key, memory_order_acquire);
        if (k == KEY_EMPTY)
            return false;
        if (k == addr) {
            *out = t[at].rec;
            if (out->gen != __atomic_load_n(&mh_live_gen, __ATOMIC_ACQUIRE)) {
                mh_live_remove(addr, at);  /* stale: see the top of the file */
                return false;
            }
            *where = at;
            return true;
        }
    }
    return false;
}

void mh_live_remove(uint64_t addr, uint32_t where)
{
    live_slot *t = atomic_load_explicit(&g_live.table, memory_order_acquire);
    bool chain_end = atomic_load_explicit(&t[(where + 1) & (TABLE_SLOTS - 1)].key,
                                          memory_order_acquire) == KEY_EMPTY;
    /* A CAS although a slot holding a live address has no other writer
     * (inserts claim only EMPTY or TOMB slots, sweeps turn only TOMB into
     * EMPTY; a concurrent double free of the address makes it fail, which
     * is harmless): the caller uses this locked instruction as the fence
     * between publishing the FREE and reading the pending flag (emit.c). */
    uint64_t k = addr;
    if (atomic_compare_exchange_strong(&t[where].key, &k, chain_end ? KEY_EMPTY : KEY_TOMB) &&
        chain_end)
        sweep_tombs_before(t, where);
}

void mh_live_forget_all(void)
{
    live_slot *t = atomic_load_explicit(&g_live.table, memory_order_acquire);
    if (t == NULL)
        return;
    /* (a record being written, BUSY, is one its ALLOC makes now: current) */
    for (uint32_t i = 0; i < TABLE_SLOTS; i++) {
        uint64_t k = atomic_load_explicit(&t[i].key, memory_order_acquire);
        if (is_address(k))
            atomic_compare_exchange_strong(&t[i].key, &k, KEY_TOMB);
    }
}
