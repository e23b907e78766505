/*
 * fork_order.c - every fork() handler of the core, registered in one
 * place, once, at load.
 *
 * Each module that holds a lock across fork() (so that a child starts with
 * the module between two operations) or repairs its state in the child
 * exports its handlers; this file calls them in the order
 * csrc/core/mh_lock_order.h writes down.  Prepare takes the locks in the
 * lock order, so a fork() never waits for a lock while holding one that the
 * lock's holder may want next; holding the queue's consumer lock hands the
 * child the drain's state between two drains.  Parent and child handlers
 * release in the reverse order; the child repairs the queue and the hooks'
 * pid before anything can record, makes the observers' locks afresh, and
 * runs the trace's handler last: it records into a fresh area, whose module
 * table must have started over first.
 *
 * Why one place, at load: pthread_atfork runs prepare handlers in reverse
 * order of registration, so a module registering later or lazily would
 * take its lock before the earlier ones' and invert the lock order.
 * Registered before any function of the core can run, no lock they cover
 * can be held yet.  docs/design/lock-order.md has the whole argument.
 */
#include <pthread.h>

#include "bistro.h"
#include "cache.h"
#include "caller.h"
#include "cuda_hooks.h"
#include "ucm_feed.h"
#include "log.h"
#include "mh_text.h"
#include "pyframes_abi.h"
#include "queue.h"
#include "reloc.h"
#include "trace_lane.h"

static void fork_prepare(void)
{
    mh_trace_fork_prepare();    /* first: no lock, only a connection for the child */
    mh_install_fork_prepare();
    mh_bistro_fork_prepare();
    mh_reloc_fork_prepare();
    mh_queue_fork_prepare();
}

static void fork_parent(void)
{
    mh_queue_fork_parent();
    mh_reloc_fork_parent();
    mh_bistro_fork_parent();
    mh_install_fork_parent();
    mh_trace_fork_parent();     /* the child's connection: the parent's copy closed */
}

static void fork_child(void)
{
    mh_queue_fork_child();      /* the consumer lock, the lanes, the pending flag */
    mh_cache_fork_child();      /* the cache's writer seat and reader slots */
    mh_emit_fork_child();       /* the pid events carry */
    mh_pointer_attributes_fork_child();  /* the child's driver is not initialised */
    mh_driver_calls_fork_child();        /* nor does it know its devices yet */
    mh_reloc_fork_child();
    mh_bistro_fork_child();
    mh_install_fork_child();
    mh_run_fork_child();        /* memhook run's queue keeper, started again by an event */
    mh_ucm_fork_child();        /* the UCM feed's attach lock, made afresh */
    /* The "objects changed" observers' locks, not held across fork: made
     * afresh (mh_lock_order.h). */
    mh_caller_fork_child();
    mh_text_fork_child();
    mh_py_fork_child();
    mh_trace_modules_fork_child();  /* and its table starts over, for the new area */
    mh_trace_fork_child();          /* last: it records into a new area */
}

/* At load, before anything can take a lock these handlers take: before
 * the hooks can be installed (csrc/cuda/startup_order.c). */
void mh_fork_order_at_load(void)
{
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
        mh_error("cannot register memhook's fork() handlers: a fork child may inherit "
                 "a held lock");
}
