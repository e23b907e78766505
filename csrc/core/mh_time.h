/*
 * mh_time.h - memhook's one reading of CLOCK_MONOTONIC, in nanoseconds, of
 * its coarse twin, and of a thread's CPU clock.
 *
 * The clock events carry (memhook_event.timestamp_ns) and every deadline the
 * core waits on.  Inline: the hook path reads it where the TSC is not used
 * (csrc/queue/clock.c).  clock_gettime is async-signal-safe and, through the
 * vDSO, makes no system call: fine in a hook, a signal handler, or with
 * other threads stopped (bistro's text_poke.c).
 *
 * CLOCK_MONOTONIC_COARSE is the same clock read at its last tick (1-4 ms
 * old): the vDSO serves it from the kernel's data page without reading any
 * counter, so it costs a few loads, a fraction of CLOCK_MONOTONIC or rdtsc
 * (which a VM may make slower still; docs/performance.md has the figures).
 * It is what an event carries where nobody asked for precise time
 * (csrc/queue/clock.c says when).
 */
#ifndef MEMHOOK_CORE_TIME_H
#define MEMHOOK_CORE_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mh_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mh_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The CPU time thread `tid` of this process has run, in nanoseconds, or -1
 * when it cannot be read (the thread is gone).  Its clock id is the
 * kernel's per-thread CPU clock of that tid, built as glibc's
 * pthread_getcpuclockid builds it (from a tid: bistro's text_poke.c has no
 * pthread_t for the threads it reads from /proc).  A system call. */
static inline int64_t mh_thread_cpu_ns(int tid)
{
    clockid_t id = (clockid_t)((~(unsigned)tid << 3) | 4u /* per thread */ | 2u /* sched */);
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
