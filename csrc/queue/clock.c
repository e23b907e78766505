/*
 * clock.c - event timestamps, and the marker epoch.
 *
 * Where nobody needs an event's precise time - outside `memhook trace`, with
 * no subscriber that asked for it (memhook_events_precise_time) - a hook
 * takes the cheapest stamp it can: CLOCK_MONOTONIC_COARSE, a few loads from
 * the vDSO's page, unless reading the TSC costs less here (the two are
 * timed, not assumed: a sandbox or VM may serve the clock otherwise, and
 * rdtsc's cost varies as much between hosts; docs/performance.md has both
 * kinds).  The drain's order does not come from time (event_drain.c), so such
 * a stamp is for people; the coarse clock gives them a tick's precision
 * (1-4 ms).  Which one is decided once, at load, by timing both
 * (mh_clock_at_load; MEMHOOK_CLOCK=tsc or coarse decides instead).
 *
 * Precise stamps carry CLOCK_MONOTONIC nanoseconds, but reading that clock
 * costs more through the vDSO than the rest of recording an event
 * (docs/performance.md).  So where the CPU has an invariant TSC (the
 * same rate on every core, in every power state: what Linux's own "tsc"
 * clocksource needs), a hook stores the raw TSC (rdtsc, a few ns) and the
 * event is flagged MH_EVENT_RAW_TSC; the drain converts every such stamp to
 * CLOCK_MONOTONIC before anyone sees it, against an anchor (TSC, clock)
 * read at that moment:
 *
 *     ns = anchor_ns - (anchor_tsc - tsc) * ns_per_tick
 *
 * ns_per_tick is measured over the whole life of the process (from an
 * anchor taken at load to the current one), so its error shrinks as the
 * process runs; an event's error is its age at the drain times that
 * relative error (a few ns for the young events a drain usually sees).
 * Without an invariant TSC, or with MEMHOOK_CLOCK=monotonic, hooks read
 * CLOCK_MONOTONIC directly.
 */
#include <cpuid.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "memhook_internal/api.h"
#include "mh_options.h"
#include "queue.h"

/* Process-wide: the TSC and its rate are (invariant TSC), and the hooks of
 * every thread read the switches.  Written once, at load (mh_clock_at_load). */
MH_HOT bool mh_clock_tsc;
MH_HOT bool mh_clock_tsc_always;
/* Process-wide, as the subscribers that asked (Python's memhook.subscribe
 * with precise_time): every hook reads it.  A count: each asks and lets go
 * on its own. */
MH_HOT _Atomic uint32_t mh_clock_precise_wanted;
/* Process-wide: see queue.h. */
MH_HOT _Atomic uint32_t mh_marker_epoch;
static uint64_t g_tsc0, g_ns0;   /* the anchor taken at load */
/* Consumer side (called under the queue's consumer lock). */
static double g_ns_per_tick;

/* The smallest baseline ns_per_tick is measured over where stamps must be
 * precise: the first drain of a just-loaded process waits at most this
 * long, once.  Where they need not be (TSC stamps taken only because they
 * are cheaper), a short baseline does: its error scales an event's age,
 * and the conversion keeps the TSC's order whatever the rate. */
#define MIN_BASELINE_NS 4000000ull
#define MIN_BASELINE_CHEAP_NS 100000ull

void mh_clock_anchor(uint64_t *tsc, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t a = __builtin_ia32_rdtsc();
        uint64_t t = mh_monotonic_ns();
        uint64_t b = __builtin_ia32_rdtsc();
        if (b - a < best) {
            best = b - a;
            *tsc = a + (b - a) / 2;
            *ns = t;
        }
    }
}

static bool tsc_invariant(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return false;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d >> 8) & 1u;  /* CPUID.80000007H:EDX[8]: invariant TSC */
}

/* Precise stamps of different threads are compared (the trace's collector
 * merges by them; the drain filters holds with them), so every core's TSC
 * must be one clock.  Linux drops "tsc" from the usable clock sources when its
 * checks find the cores' counters out of step; where the file cannot be
 * read, the invariant-TSC flag alone decides. */
static bool tsc_usable_by_kernel(void)
{
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/available_clocksource", "re");
    if (f == NULL)
        return true;
    char line[256] = "";
    bool listed = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!listed)
        return true;
    char *save = NULL;
    for (char *tok = strtok_r(line, " \n", &save); tok != NULL; tok = strtok_r(NULL, " \n", &save))
        if (strcmp(tok, "tsc") == 0)
            return true;
    return false;
}

/* TSC ticks that `reads` reads of a clock take, the best of a few tries
 * (a preempted try only ever takes longer).  `tsc`: the ordered TSC read a
 * hook makes (lfence; rdtsc); else the coarse clock. */
static uint64_t cost_of_reads(bool tsc, int reads)
{
    uint64_t best = UINT64_MAX, sink = 0;
    for (int round = 0; round < 8; round++) {
        uint64_t t0 = __builtin_ia32_rdtsc();
        for (int i = 0; i < reads; i++) {
            if (tsc) {
                __builtin_ia32_lfence();
                sink += __builtin_ia32_rdtsc();
            } else {
                sink += mh_coarse_ns();
            }
        }
        uint64_t t = __builtin_ia32_rdtsc() - t0;
        best = t < best ? t : best;
    }
    __asm__ volatile("" : : "r"(sink));
    return best;
}

/* Whether every stamp is to be a TSC reading: asked (MEMHOOK_CLOCK=tsc),
 * or by default where it is the cheaper read - by a quarter at least, the
 * conversion the drain then makes being the coarse clock's to save. */
static bool tsc_for_every_stamp(void)
{
    if (mh_opts.clock == MH_CLOCK_TSC)
        return true;
    if (mh_opts.clock != MH_CLOCK_AUTO)
        return false;
    (void)cost_of_reads(false, 4);  /* (the vDSO's pages faulted in) */
    uint64_t coarse = cost_of_reads(false, 32), tsc = cost_of_reads(true, 32);
    bool cheaper = tsc * 4 < coarse * 3;
    mh_debug("clock: 32 reads take %llu TSC ticks from the coarse clock, %llu from the TSC: "
             "stamps nobody asked to be precise read the %s",
             (unsigned long long)coarse, (unsigned long long)tsc, cheaper ? "TSC" : "coarse clock");
    return cheaper;
}

void mh_clock_at_load(void)
{
    if (mh_opts.clock == MH_CLOCK_MONOTONIC)
        return;
    if (!tsc_invariant() || !tsc_usable_by_kernel()) {
        if (mh_opts.clock == MH_CLOCK_TSC)
            mh_warn("MEMHOOK_CLOCK=tsc: this CPU's TSC is not invariant, or Linux does not "
                    "use it as a clock; stamps are read from CLOCK_MONOTONIC(_COARSE)");
        return;
    }
    mh_clock_anchor(&g_tsc0, &g_ns0);
    mh_clock_tsc = true;
    mh_clock_tsc_always = tsc_for_every_stamp();
}

int memhook_testing_clock_tsc_always(void) { return mh_clock_tsc_always; }

double memhook_clock_ns_per_tick(void)
{
    if (!mh_clock_tsc)
        return 0.0;
    uint64_t tsc, ns;
    do
        mh_clock_anchor(&tsc, &ns);
    while (ns - g_ns0 < MIN_BASELINE_NS || tsc == g_tsc0);  /* (once, just after load) */
    return (double)(ns - g_ns0) / (double)(tsc - g_tsc0);
}

/* Whether converted stamps must be precise now: a subscriber asked.  (The
 * trace converts its own copies, against the anchors its area records.) */
static bool precise_wanted(void)
{
    return atomic_load_explicit(&mh_clock_precise_wanted, memory_order_relaxed) != 0;
}

/* Consumer side: the anchor the last mh_clock_prepare read. */
static uint64_t g_tsc1, g_ns1;

void mh_clock_prepare(void)
{
    if (!mh_clock_tsc)
        return;
    mh_clock_anchor(&g_tsc1, &g_ns1);
    uint64_t least = precise_wanted() ? MIN_BASELINE_NS : MIN_BASELINE_CHEAP_NS;
    while (g_ns1 - g_ns0 < least || g_tsc1 == g_tsc0)  /* once, just after load */
        mh_clock_anchor(&g_tsc1, &g_ns1);
    g_ns_per_tick = (double)(g_ns1 - g_ns0) / (double)(g_tsc1 - g_tsc0);
}

uint64_t mh_clock_ns_of(const memhook_event *e)
{
    if (!(e->flags & MH_EVENT_RAW_TSC))
        return e->timestamp_ns;
    /* raw can be a little past the anchor: an event published after it was
     * read, or the cores' TSCs a few ticks apart.  The distance is signed
     * (a stamp is never 2^63 ticks off), which x86-64 converts to double in
     * one instruction where an unsigned one takes a branch and several; a
     * negative product truncates toward zero as the magnitude's would. */
    int64_t ticks = (int64_t)(e->timestamp_ns - g_tsc1);
    return g_ns1 + (uint64_t)(int64_t)((double)ticks * g_ns_per_tick);
}

void mh_clock_convert(memhook_event *events, size_t count)
{
    size_t first = 0;
    while (first < count && !(events[first].flags & MH_EVENT_RAW_TSC))
        first++;
    if (first == count)
        return;
    mh_clock_prepare();
    for (size_t i = first; i < count; i++) {
        memhook_event *e = &events[i];
        if (!(e->flags & MH_EVENT_RAW_TSC))
            continue;
        e->timestamp_ns = mh_clock_ns_of(e);
        e->flags &= ~MH_EVENT_RAW_TSC;
    }
}

uint32_t mh_marker_flags(void)
{
    uint32_t e = atomic_fetch_add_explicit(&mh_marker_epoch, 1, memory_order_acq_rel) + 1;
    return MH_EVENT_MARKER | ((e << MH_EVENT_EPOCH_SHIFT) & MH_EVENT_EPOCH_MASK);
}

int memhook_events_precise_time(int want)
{
    if (want) {
        atomic_fetch_add(&mh_clock_precise_wanted, 1);
        return 0;
    }
    uint32_t n = atomic_load(&mh_clock_precise_wanted);
    while (n != 0 && !atomic_compare_exchange_weak(&mh_clock_precise_wanted, &n, n - 1)) {
    }
    return n != 0 ? 0 : EINVAL;
}
