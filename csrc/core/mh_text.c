/*
 * mh_text.c - the executable-text snapshot of mh_text.h.
 *
 * Two buffers and a sequence number (a seqlock over both): readers use
 * buffer (seq >> 1) & 1; a refresh makes seq odd, writes the other buffer,
 * then makes seq even again, which turns readers to it.  A reader notes
 * seq, searches, and reads seq again: if a refresh began writing its
 * buffer meanwhile (seq passed 2 * (seq >> 1) + 2), the answer is "not
 * text" (static buffers: a race costs a frame, never a fault).
 */
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "mh_objects.h"
#include "mh_text.h"

/* Ranges one snapshot holds: a PyTorch process maps ~1,000 objects, each
 * with one executable segment (rarely two).  Objects past this are left
 * out: walks through them end early. */
#define TEXT_RANGES 8192

typedef struct {
    uintptr_t lo, hi;
} text_range;

/* Process-wide by nature: what is code is a property of the process's
 * mappings.  Written under g_lock only; 256 KiB of .bss, touched only by
 * processes that walk stacks. */
static text_range g_text[2][TEXT_RANGES];
static uint32_t g_count[2];
static _Atomic uint64_t g_seq;  /* buffer 0 (empty) current until the first refresh */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_watching;

bool mh_text_contains(uintptr_t a)
{
    uint64_t seq = atomic_load_explicit(&g_seq, memory_order_acquire);
    uint64_t buf = (seq >> 1) & 1;
    const text_range *r = g_text[buf];
    uint32_t lo = 0, hi = __atomic_load_n(&g_count[buf], __ATOMIC_RELAXED);
    if (hi > TEXT_RANGES)
        hi = TEXT_RANGES;
    uint32_t n = hi;
    while (lo < hi) {  /* the first range whose end is above a */
        uint32_t mid = lo + (hi - lo) / 2;
        if (r[mid].hi <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    bool in = lo < n && r[lo].lo <= a && a < r[lo].hi;
    atomic_thread_fence(memory_order_acquire);  /* the reads above before the check */
    return in && atomic_load_explicit(&g_seq, memory_order_relaxed) <= (seq | 1) + 1;
}

typedef struct {
    text_range *out;
    uint32_t n;
} collect_state;

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    collect_state *c = arg;
    for (int i = 0; i < info->dlpi_phnum && c->n < TEXT_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || ph->p_memsz == 0)
            continue;
        c->out[c->n].lo = info->dlpi_addr + ph->p_vaddr;
        c->out[c->n].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        c->n++;
    }
    return 0;
}

static int by_start(const void *x, const void *y)
{
    const text_range *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* The child has one thread: a refresh another thread was in at fork()
 * never ends there; its half-written buffer was not current yet, so going
 * back to the even number before it keeps the complete one.  Run by
 * csrc/cuda/fork_order.c with every other module's child handler. */
void mh_text_fork_child(void)
{
    pthread_mutex_init(&g_lock, NULL);
    uint64_t seq = atomic_load_explicit(&g_seq, memory_order_relaxed);
    if (seq & 1)
        atomic_store_explicit(&g_seq, seq - 1, memory_order_relaxed);
}

static void refresh(void)
{
    pthread_mutex_lock(&g_lock);
    uint64_t seq = atomic_load_explicit(&g_seq, memory_order_relaxed);  /* even */
    text_range *out = g_text[((seq >> 1) & 1) ^ 1];
    uint32_t *count = &g_count[((seq >> 1) & 1) ^ 1];
    atomic_store_explicit(&g_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);  /* odd before the buffer changes */
    collect_state c = {.out = out, .n = 0};
    dl_iterate_phdr(collect, &c);
    qsort(out, c.n, sizeof *out, by_start);
    uint32_t m = 0;  /* merge overlaps, so one range answers a search */
    for (uint32_t i = 0; i < c.n; i++) {
        if (m > 0 && out[i].lo <= out[m - 1].hi) {
            if (out[i].hi > out[m - 1].hi)
                out[m - 1].hi = out[i].hi;
            continue;
        }
        out[m++] = out[i];
    }
    __atomic_store_n(count, m, __ATOMIC_RELAXED);
    atomic_store_explicit(&g_seq, seq + 2, memory_order_release);
    pthread_mutex_unlock(&g_lock);
}

void mh_text_watch(void)
{
    if (atomic_exchange(&g_watching, true))
        return;
    mh_objects_observe(refresh);
    refresh();
}
