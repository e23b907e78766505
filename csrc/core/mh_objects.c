/*
 * mh_objects.c - the observers of mh_objects.h.
 */
#include <stdatomic.h>
#include <stdbool.h>

#include "log.h"
#include "mh_objects.h"

/* Process-wide by nature: who wants to hear of a change of the process's
 * loaded objects.  Written at load only (csrc/cuda/startup_order.c), read
 * afterwards. */
static mh_objects_observer g_observers[MH_OBJECTS_OBSERVERS_MAX];
static unsigned g_count;
/* Process-wide: whether this process is traced (set once, never cleared;
 * a fork child of a traced process is traced too). */
static atomic_bool g_watch_dl;

void mh_objects_observe(mh_objects_observer fn)
{
    if (g_count == MH_OBJECTS_OBSERVERS_MAX) {
        mh_error("mh_objects_observe: more than %d observers", MH_OBJECTS_OBSERVERS_MAX);
        return;
    }
    g_observers[g_count++] = fn;
}

void mh_objects_changed(void)
{
    for (unsigned i = 0; i < g_count; i++)
        g_observers[i]();
}

void mh_objects_watch_dl(void) { atomic_store_explicit(&g_watch_dl, true, memory_order_relaxed); }

void mh_objects_changed_by_dl(void)
{
    if (atomic_load_explicit(&g_watch_dl, memory_order_relaxed))
        mh_objects_changed();
}
