/*
 * run_at_load.c - `memhook run -- CMD`: the core in LD_PRELOAD installs the
 * hooks when it loads, with no trace (MEMHOOK_INSTALL_AT_LOAD=1, the mode
 * from MEMHOOK_CUDA_MODE), so an unmodified program's allocations feed the
 * process-wide cache that memhook_query answers from.
 *
 * Without a consumer the hooks' events would only pile up in the queue (it
 * grows, never drops).  A keeper thread bounds it: every KEEP_POLL_MS it
 * runs the feed (mh_queue_feed_run), which puts what was published in the
 * cache and, while nothing in the process has ever drained, takes it out of
 * the queue - exactly what a memhook_query does.  A consumer that starts
 * later (Python's memhook.install() in CMD) then drains as usual and the
 * keeper only feeds; since the keeper dropped events it never saw
 * delivered, that consumer's coverage is not vouched for (install.c reads
 * mh_queue_trimmed), and it asks the driver where its cache lacks a range.
 *
 * The keeper starts with the process image's first event, not at load: a
 * program that changes per-thread credentials before running anything
 * CUDA (setpriv, su: see the top of csrc/trace/trace.c) must stay
 * single-threaded.  A fork child starts its own at its first event
 * (fork_order.c clears the flag).  Under `memhook trace` this file does
 * nothing: the hooks go in for the trace (startup_order.c), and its
 * streamer bounds the queue.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "cuda_hooks.h"
#include "event_lane.h"
#include "log.h"
#include "mh_options.h"
#include "mh_thread.h"
#include "queue.h"

#include "memhook/memhook.h"

#define KEEP_POLL_MS 10

/* Process-wide: one keeper per process image.  1 once this image's keeper
 * was started (or its start was tried). */
static _Atomic int g_keeper;

static void *keeper_main(void *arg)
{
    (void)arg;
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = KEEP_POLL_MS * 1000000L};
    for (;;) {
        mh_queue_feed_run(true);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* From mh_lane_slow_slot, in a hook: glibc's pthread_create takes only
 * glibc's own locks, which a thread inside a hook does not hold. */
static void want_keeper(void)
{
    int expect = 0;
    if (atomic_load_explicit(&g_keeper, memory_order_relaxed) != 0 ||
        !atomic_compare_exchange_strong(&g_keeper, &expect, 1))
        return;
    int rc = mh_thread_start_quiet(keeper_main, "memhook-keeper");
    if (rc != 0)
        mh_warn("memhook run: cannot start the thread that keeps the event queue short (%s): "
                "the queue grows until something queries or drains it",
                strerror(rc));
}

void mh_run_fork_child(void)
{
    atomic_store(&g_keeper, 0);  /* the parent's keeper did not come along */
}

/* After the fork handlers are registered and everything the hooks record
 * into is ready (csrc/cuda/startup_order.c). */
void mh_run_at_load(void)
{
    if (!mh_opts.install_at_load)
        return;
    if (mh_opts.trace_socket != NULL && *mh_opts.trace_socket != '\0')
        return;  /* memhook trace installs, and bounds the queue */
    unsigned mode = 0;
    char why[512];
    if (memhook_mode_parse(mh_opts.cuda_mode, &mode, why, sizeof why) != 0) {
        mh_warn("memhook run: MEMHOOK_CUDA_MODE: %s; no hooks installed", why);
        return;
    }
    mh_lane_set_on_segment(want_keeper);
    if (memhook_hooks_install(mode, why, sizeof why) != 0)
        mh_warn("memhook run: installing the hooks failed: %s", why);
}
