/*
 * startup_order.c - what the core does when it is loaded and unloaded, in
 * one place: the library's only constructor and destructor.
 *
 * The core arrives three ways - linked by the Python extension, in
 * LD_PRELOAD under `memhook trace` or `memhook run`, dlopened by a C
 * transport - and in the last two it may install the hooks before the
 * program's main().  Each module exports its step (the *_at_load
 * functions); this file calls them in the order below, each line saying
 * why it stands where it does.  fork_order.c does the same for fork().
 *
 * One constructor, not one per module, because the order is the design:
 * with a constructor per module, each with a priority, "before any
 * install" was a claim every file made about the others' numbers and
 * about the link order.  Here a step that needs another's work comes
 * after it, where both can be read together.
 *
 * It needs no priority: it is the library's only constructor, and the
 * loader runs it after the constructors of the libraries the core needs
 * and before those of the objects that need the core.
 * tests/test_startup_order.py fails on a constructor or destructor
 * anywhere else in the core's sources.
 */
#include <stdbool.h>

#include "cache.h"
#include "caller.h"
#include "cuda_hooks.h"
#include "mh_options.h"
#include "mh_startup.h"
#include "queue.h"
#include "reloc.h"
#include "trace_exec.h"
#include "trace_lane.h"
#include "ucm_feed.h"

#include "memhook/memhook.h"

/* HELLO carries the install's reason; trace.c keeps as many bytes. */
#define INSTALL_WHY_MAX 512

/* `memhook trace`: the image's area is made before the hooks go in (the
 * install's events and module records land in it), and HELLO goes out
 * after, since it tells the collector how the install went.  The trace
 * installs nothing itself: this layer owns the hooks. */
static void trace_at_load(void)
{
    if (!mh_trace_open_at_load())
        return;
    unsigned mode = 0;
    char why[INSTALL_WHY_MAX] = "";
    int rc = memhook_mode_parse(mh_opts.cuda_mode, &mode, why, sizeof why);
    if (rc == 0)
        rc = memhook_hooks_install(mode, why, sizeof why);
    else
        mode = 0;
    mh_trace_hello_at_load(mode, rc, why);
}

__attribute__((constructor)) static void memhook_load(void)
{
    /* libc's loader entry points (reloc/registry.c), before any step looks
     * a symbol up through them: the core's own lookups must not pass
     * through another tool's GOT hook on dlsym/dlopen. */
    mh_registry_at_load();
    /* The knobs: every later step reads mh_opts. */
    mh_options_at_load();
    /* The observers of "the loaded objects changed" (mh_objects.h), before
     * anything can tell of a change (an install, reloc's dlopen wrapper);
     * they hear of one in this order: CUDA's text ranges, which events'
     * callers are found with, then the trace's module records. */
    mh_caller_at_load();
    mh_trace_modules_at_load();
    /* MEMHOOK_LOG_LEVEL, before any step below logs. */
    mh_log_at_load();
    /* reloc takes interposers and unload watches only before its first
     * install. */
    mh_proc_address_at_load();
    /* libc's exec, posix_spawn and popen, looked up before anything can
     * exec: the lookup may allocate, which a vfork child must not. */
    mh_trace_exec_at_load();
    mh_trace_popen_at_load();
    /* Invalid switch values, now that the log level may silence them. */
    mh_options_warn_at_load();
    /* The fork() handlers, before any lock they take can be held: before
     * the first install, and before a trace's area exists (its child
     * handler runs last, after the queue's and the hooks' repair). */
    mh_fork_order_at_load();
    /* What a load with MEMHOOK_CUDA_MODE set does, and which core this
     * is: said at info level once the level is known. */
    mh_loader_at_load();
    mh_version_at_load();
    /* What the hooks' events go through, before an install can record
     * one: the clock that stamps them, the cache's feed from the queue
     * (before any drain), the cache's readers and its driver answer
     * (before any query). */
    mh_clock_at_load();
    mh_cache_feed_at_load();
    mh_cache_readers_at_load();
    mh_driver_calls_at_load();
    /* Pointer attributes on or off (MEMHOOK_POINTER_ATTRIBUTES), before an
     * install decides whether to route them. */
    mh_pointer_attributes_at_load();
    /* UCX's libucm arriving by dlopen is fed from then on (ucm_feed.c):
     * watched before an install at load can make its first event. */
    mh_ucm_feed_at_load();
    /* The hooks installed at load, for `memhook run` (no trace) or for
     * `memhook trace`: at most one of the two applies. */
    mh_run_at_load();
    trace_at_load();
    /* What a traced image's exec and posix_spawn read to keep its
     * children in the trace: the core's path, the knobs, the loader's
     * identity.  No step above execs; a driver constructor run by the
     * install could, and its child's environment would not be mended. */
    mh_trace_env_at_load();
    mh_trace_escape_at_load();
}

/* At exit or an unload: the trace's area marked exited, handed over if it
 * is not yet (trace.c also registers this with atexit). */
__attribute__((destructor)) static void memhook_unload(void)
{
    mh_trace_at_unload();
}
