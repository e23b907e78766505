/*
 * bistro_call_overhead.c - ns per call: direct call of the unpatched
 * function (the baseline, same run) vs a call of the patched function, which
 * goes target -> jmp -> hook -> trampoline -> rest of the function.  The hook
 * does nothing but call the original, so the difference is bistro's cost.
 * Run both jump forms.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bistro_bench_common.h"
#include "memhook/memhook.h"
#include "memhook_internal/api.h"

static bench_fn volatile real_fn;

__attribute__((noinline)) static long hook(long a, long b) { return real_fn(a, b); }

static double ns_per_call(bench_fn volatile fn, long iters)
{
    long sink = 0;
    double t0 = now_s();
    for (long i = 0; i < iters; i++)
        sink += fn(i, 1);
    double t = now_s() - t0;
    if (sink == 42)
        puts("");
    return t * 1e9 / (double)iters;
}

static double best(bench_fn fn, long iters)
{
    double b = 1e9;
    for (int r = 0; r < 5; r++) {
        double v = ns_per_call(fn, iters);
        if (v < b)
            b = v;
    }
    return b;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 20000000;
    ns_per_call(bench_fn0, iters / 10); /* warm up */
    for (int size = 5; size <= 12; size += 7) {
        double direct = best(bench_fn0, iters);
        char why[512];
        void *orig = NULL;
        memhook_bistro_patch *p;
        int rc = memhook_bistro_install((void *)bench_fn0, (void *)hook, size, &orig, &p, why,
                                        sizeof why);
        if (rc) {
            fprintf(stderr, "install failed: %s\n", why);
            return 1;
        }
        real_fn = (bench_fn)orig;
        double tramp = best((bench_fn)orig, iters);
        double patched = best(bench_fn0, iters);
        memhook_bistro_remove(p);
        double direct_after = best(bench_fn0, iters);
        printf("call overhead (%2d-byte jump): direct %.2f ns/call (after remove %.2f) | "
               "trampoline alone %.2f ns/call | patched fn -> hook -> trampoline %.2f ns/call "
               "(+%.2f ns)\n", size, direct, direct_after, tramp, patched, patched - direct);
    }
    return 0;
}
