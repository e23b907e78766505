/*
 * bistro_install.c - time to install (and remove) 40 hooks on 40 distinct
 * functions.  Goal: < 5 ms for the 40 installs (UCX's bistro waits 50 ms per
 * function).  Baseline, same run: the bare, unsafe floor of a patch -- per
 * function mprotect RWX, memcpy 5 bytes, mprotect back -- on the same
 * functions (and then put back).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bistro_bench_common.h"
#include "memhook/memhook.h"
#include "memhook_internal/api.h"

#define N 40
#define REF(n) bench_fn##n,
static bench_fn fns[N] = {BENCH_LIST(REF)};
static bench_fn volatile origs[N];

static long hook(long a, long b) { return origs[0](a, b) + 1000; }

static void naive_patch(void *at, const unsigned char *bytes, size_t n)
{
    long ps = sysconf(_SC_PAGESIZE);
    void *page = (void *)((unsigned long)at & ~(unsigned long)(ps - 1));
    mprotect(page, (size_t)ps, PROT_READ | PROT_WRITE | PROT_EXEC);
    memcpy(at, bytes, n);
    mprotect(page, (size_t)ps, PROT_READ | PROT_EXEC);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    memhook_bistro_patch *p[N];
    for (int r = 0; r < rounds; r++) {
        unsigned char saved[N][5];
        double t0 = now_s();
        for (int i = 0; i < N; i++) {
            unsigned char jmp[5] = {0xE9, 0, 0, 0, 0};
            memcpy(saved[i], (void *)fns[i], 5);
            naive_patch((void *)fns[i], jmp, 5); /* jmp +0: harmless */
        }
        double naive = now_s() - t0;
        for (int i = 0; i < N; i++)
            naive_patch((void *)fns[i], saved[i], 5);

        t0 = now_s();
        for (int i = 0; i < N; i++) {
            char why[512];
            if (memhook_bistro_install((void *)fns[i], (void *)hook, 0, (void **)&origs[i],
                                       &p[i], why, sizeof why)) {
                fprintf(stderr, "%s\n", why);
                return 1;
            }
        }
        double inst = now_s() - t0;
        long check = fns[0](1, 2);
        t0 = now_s();
        for (int i = 0; i < N; i++)
            memhook_bistro_remove(p[i]);
        double rem = now_s() - t0;
        printf("round %d (%s): install 40 hooks %.3f ms (%.1f us each) | remove 40 %.3f ms | "
               "baseline naive mprotect+memcpy+mprotect x40 %.3f ms | goal < 5 ms%s\n", r,
               r == 0 ? "cold: maps islands" : "warm: trampolines reused", inst * 1e3,
               inst * 1e6 / N, rem * 1e3, naive * 1e3, check == 1003 ? "" : " [WRONG RESULT]");
    }
    return 0;
}
