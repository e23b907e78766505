/*
 * exact_sizes.c - the switch between a FREE sized in the hook and one
 * sized by the drain (memhook_events_exact_sizes).
 *
 * Outside the trace the hooks record a FREE with its address only and the
 * drain fills its size from the ALLOC it pairs with (emit.c, queue/
 * free_fill.c).  A subscriber that asks for exact sizes (Python's
 * subscribe(exact=True)) gets what the trace gets: the live table in the
 * hook, the size as the driver knows it before the free, precise stamps.
 * The hook reads one word to choose, once per call, so a call is on one
 * side whole.  A subscriber that asked gets hook-sized FREEs for the calls
 * that begin after its ask returned; a FREE recorded while the switch was
 * turning is sized by the drain (the same bytes, for an allocation the
 * hooks saw).
 *
 * The live table is written only while the switch is on, so a record made
 * then may outlive its allocation (its FREE came while the switch was off
 * and did not read the table) and its address be reused: when the switch
 * goes from 0 to 1 every record is forgotten before the count moves, so no
 * call that reads the switch on finds one from before.
 */
#include <errno.h>

#include "cuda_hooks.h"

/* Process-wide, as the subscribers it counts; on the hooks' line. */
MH_HOT _Atomic uint32_t mh_exact_wanted;

int memhook_events_exact_sizes(int want)
{
    if (want) {
        uint32_t n = atomic_load(&mh_exact_wanted);
        do {
            if (n == 0)
                mh_live_forget_all();
        } while (!atomic_compare_exchange_weak(&mh_exact_wanted, &n, n + 1));
        return memhook_events_precise_time(1);
    }
    uint32_t n = atomic_load(&mh_exact_wanted);
    do {
        if (n == 0)
            return EINVAL;
    } while (!atomic_compare_exchange_weak(&mh_exact_wanted, &n, n - 1));
    return memhook_events_precise_time(0);
}
