/*
 * event_storm.c - argv[1] events as fast as the hooks' own recording path
 * takes them: memhook_events_record (the function a hook calls, through the
 * same queue), alternating ALLOC and FREE of 64 rotating 4 KiB buffers, so
 * the live set stays small while the event count grows.  For the
 * million-event test of `memhook trace`; needs memhook preloaded.
 * With argv[2] (ms): after half the events, prints "event_storm: half"
 * and sleeps that long before the rest (a program still running when
 * something else happens to the trace).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    typedef uint64_t (*record_fn)(int, int, uint64_t, uint64_t, int, int, int);
    typedef int (*index_fn)(const char *);
    record_fn record = (record_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_events_record");
    index_fn index = (index_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_hook_index");
    if (!record || !index) {
        fprintf(stderr, "event_storm: memhook is not preloaded\n");
        return 90;
    }
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    long pause_ms = argc > 2 ? atol(argv[2]) : -1;
    int fa = index("cuMemAlloc_v2"), ff = index("cuMemFree_v2");
    for (long i = 0; i + 1 < n; i += 2) {
        if (pause_ms >= 0 && i == n / 4 * 2) {
            printf("event_storm: half\n");
            fflush(stdout);
            usleep((useconds_t)pause_ms * 1000);
        }
        uint64_t addr = 0x7f0000000000ull + (uint64_t)(i / 2 % 64) * 4096;
        record(1, fa, addr, 4096, 1, 0, 0);
        record(2, ff, addr, 4096, 1, 0, 0);
    }
    if (n % 2)
        record(1, fa, 0x7f1000000000ull, 4096, 1, 0, 0);
    printf("event_storm: %ld events\n", n);
    return 0;
}
