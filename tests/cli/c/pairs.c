/*
 * pairs.c - a traced program's smallest workload for tests/cli: argv[1]
 * ALLOC/FREE pairs recorded with memhook_events_record (4 KiB each), then
 * one line: "pairs: pid P traced T preload L" (T: 1 when memhook is in the
 * process; L: its LD_PRELOAD, or "-").  Untraced it records nothing and
 * says so; exit status 0 either way.
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
    long n = argc > 1 ? atol(argv[1]) : 1;
    if (record != NULL && index != NULL) {
        int fa = index("cuMemAlloc_v2"), ff = index("cuMemFree_v2");
        uint64_t base = 0x7e0000000000ull + ((uint64_t)getpid() << 24);
        for (long i = 0; i < n; i++) {
            record(1, fa, base + (uint64_t)i * 4096, 4096, 1, 0, 0);
            record(2, ff, base + (uint64_t)i * 4096, 4096, 1, 0, 0);
        }
    }
    const char *preload = getenv("LD_PRELOAD");
    printf("pairs: pid %d traced %d preload %s\n", (int)getpid(), record != NULL,
           preload != NULL ? preload : "-");
    return 0;
}
