/*
 * pyframes_walk_bench.c - the cost of --python's capture alone
 * (csrc/trace/pyframes.c, pycode.c), in the Python process that loads it:
 * bench/hooks/pyframes_bench.py --walk builds it with the capture's sources into
 * a shared library and calls pyframes_walk_bench() through ctypes, DEPTH
 * Python frames deep.  The area is a plain buffer set up as the trace's
 * would be; its Python records are reused each call (so no page faults:
 * the end-to-end bench has those).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyframes.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static mh_trace_area *g_area;

/* Frames captured per call into *frames; ns per call. */
__attribute__((visibility("default"))) double pyframes_walk_bench(unsigned depth, long n, unsigned *frames)
{
    if (g_area == NULL) {
        size_t size = 4096 + (8u << 20) + (8u << 20);
        g_area = calloc(1, size);
        if (g_area == NULL)
            return -1;
        g_area->py_off = 4096;
        g_area->py_cap = 8u << 20;
        g_area->codes_off = 4096 + (8u << 20);
        g_area->codes_cap = 8u << 20;
        mh_pyframes_watch();
        mh_pyframes_area_ready(g_area);
    }
    g_area->py_depth = depth;
    uint64_t t0 = now_ns();
    uint64_t ref = 0;
    for (long i = 0; i < n; i++) {
        g_area->py_used = 0;
        ref = mh_pyframes_record(g_area);
    }
    uint64_t t1 = now_ns();
    const uint64_t *rec = (const uint64_t *)((char *)g_area + g_area->py_off);
    *frames = ref ? (unsigned)(rec[ref - 1] & 0xffff) : 0;
    return (double)(t1 - t0) / (double)n;
}

/* The baseline: the same loop around a call that does nothing. */
__attribute__((noinline)) static uint64_t empty(mh_trace_area *a)
{
    __asm__ volatile("" : : "r"(a) : "memory");
    return 1;
}

__attribute__((visibility("default"))) double pyframes_empty_bench(long n)
{
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++)
        empty(g_area);
    return (double)(now_ns() - t0) / (double)n;
}
