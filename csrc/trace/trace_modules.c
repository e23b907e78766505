/*
 * trace_modules.c - module records in the trace area: which object was
 * loaded where, so the collector can name an event's caller after the
 * process exited or dlclosed the object (trace_proto.h: mh_trace_module).
 *
 * Why in the process and not from /proc/PID/maps at the collector: a
 * library that is dlopened, allocates and is dlclosed between two looks
 * of the collector would never be seen there; the process records it
 * synchronously.  Records are written by mh_trace_modules_sync: at area
 * creation (every object), after every dlopen/dlclose memhook's reloc
 * interposition sees (before dlopen returns to its caller), after install,
 * and from the streamer's poll for objects loaded behind reloc's back
 * (bistro alone): a load record per object new since the last sync, an
 * unload record per object gone.  A record is written whole, then
 * modules_used is published (release): the collector reads only complete
 * ones.  Never from a hook: the loader's lock (dl_iterate_phdr) and ours.
 */
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "mh_objects.h"
#include "mh_time.h"
#include "trace_lane.h"

#define KNOWN_MAX 4096

/* Process-wide by nature: what the current area has been told is loaded.
 * Under g_lock. */
static struct {
    mh_trace_area *area;  /* the area the table describes */
    uint32_t n;
    struct {
        uint64_t base;
        uint64_t name_hash;
        uint8_t seen;
    } obj[KNOWN_MAX];
    unsigned long long adds, subs;  /* the loader's counters at the last sync */
} g_known;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Not held across fork(): the child makes it afresh (a sync interrupted by
 * fork left the parent's table).  The child makes a new area, which may
 * well be mapped where the parent's was (that one is not in the child:
 * MADV_DONTFORK): it must be told of every object again, so the table
 * starts over.  fork_order.c runs this before the trace's own child
 * handler, whose new area syncs the table. */
void mh_trace_modules_fork_child(void)
{
    pthread_mutex_init(&g_lock, NULL);
    g_known.area = NULL;
    g_known.n = 0;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static void append(mh_trace_area *a, uint32_t kind, uint64_t base, uint64_t lo, uint64_t hi,
                   const char *path)
{
    size_t plen = strlen(path);
    uint32_t len = (uint32_t)((sizeof(mh_trace_module) + plen + 1 + 7) & ~(size_t)7);
    uint64_t used = a->modules_used;
    if (used + len > a->modules_cap) {
        __atomic_fetch_add(&a->modules_lost, 1, __ATOMIC_RELAXED);
        return;
    }
    char *at = (char *)a + a->modules_off + used;
    mh_trace_module m = {.len = len, .kind = kind, .ts_ns = mh_monotonic_ns(), .base = base,
                         .lo = lo, .hi = hi};
    memcpy(at, &m, sizeof m);
    memcpy(at + sizeof m, path, plen);
    memset(at + sizeof m + plen, 0, len - sizeof m - plen);
    __atomic_store_n(&a->modules_used, used + len, __ATOMIC_RELEASE);
}

typedef struct {
    mh_trace_area *a;
    char exe[1024];
} sync_state;

static int visit(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    sync_state *s = arg;
    const char *name = info->dlpi_name != NULL ? info->dlpi_name : "";
    bool main_program = name[0] == '\0';
    uint64_t h = hash_name(main_program ? "<exe>" : name);
    for (uint32_t i = 0; i < g_known.n; i++)
        if (g_known.obj[i].base == info->dlpi_addr && g_known.obj[i].name_hash == h) {
            g_known.obj[i].seen = 1;
            return 0;
        }
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uint64_t start = info->dlpi_addr + ph->p_vaddr;
        if (start < lo)
            lo = start;
        if (start + ph->p_memsz > hi)
            hi = start + ph->p_memsz;
    }
    if (hi == 0)
        return 0;
    append(s->a, MH_TRACE_MODULE_LOAD, info->dlpi_addr, lo, hi, main_program ? s->exe : name);
    if (g_known.n < KNOWN_MAX) {
        g_known.obj[g_known.n].base = info->dlpi_addr;
        g_known.obj[g_known.n].name_hash = h;
        g_known.obj[g_known.n].seen = 1;
        g_known.n++;
    }
    return 0;
}

static int counters(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    unsigned long long *c = arg;
    c[0] = info->dlpi_adds;
    c[1] = info->dlpi_subs;
    return 1;  /* the first object is enough */
}

static void sync_locked(mh_trace_area *a)
{
    if (g_known.area != a) {
        g_known.area = a;
        g_known.n = 0;
    }
    sync_state s = {.a = a};
    ssize_t n = readlink("/proc/self/exe", s.exe, sizeof s.exe - 1);
    s.exe[n > 0 ? n : 0] = '\0';
    for (uint32_t i = 0; i < g_known.n; i++)
        g_known.obj[i].seen = 0;
    unsigned long long c[2] = {0, 0};
    dl_iterate_phdr(counters, c);
    dl_iterate_phdr(visit, &s);
    g_known.adds = c[0];
    g_known.subs = c[1];
    /* Gone since the last sync: an unload record (its load record stays). */
    uint32_t keep = 0;
    for (uint32_t i = 0; i < g_known.n; i++) {
        if (g_known.obj[i].seen) {
            g_known.obj[keep++] = g_known.obj[i];
            continue;
        }
        append(a, MH_TRACE_MODULE_UNLOAD, g_known.obj[i].base, 0, 0, "");
    }
    g_known.n = keep;
}

void mh_trace_modules_sync(void)
{
    mh_trace_area *a = mh_trace_area_current();
    if (a == NULL)
        return;
    pthread_mutex_lock(&g_lock);
    sync_locked(a);
    pthread_mutex_unlock(&g_lock);
}

void mh_trace_modules_poll(void)
{
    mh_trace_area *a = mh_trace_area_current();
    if (a == NULL)
        return;
    unsigned long long c[2] = {0, 0};
    dl_iterate_phdr(counters, c);
    pthread_mutex_lock(&g_lock);
    bool changed = g_known.area != a || c[0] != g_known.adds || c[1] != g_known.subs;
    pthread_mutex_unlock(&g_lock);
    /* Through mh_objects_changed: CUDA's text snapshot may be stale too. */
    if (changed)
        mh_objects_changed();
}

void mh_trace_modules_at_load(void)
{
    mh_objects_observe(mh_trace_modules_sync);
}
