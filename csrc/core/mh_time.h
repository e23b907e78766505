/*
 * mh_time.h - memhook's one reading of CLOCK_MONOTONIC, in nanoseconds.
 *
 * The clock events carry (memhook_event.timestamp_ns) and every deadline the
 * core waits on.  Inline: the hook path reads it where the TSC is not used
 * (csrc/queue/clock.c).  clock_gettime is async-signal-safe and, through the
 * vDSO, makes no system call: fine in a hook, a signal handler, or with
 * other threads stopped (bistro's text_poke.c).
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

#endif
