/*
 * handoff_storm.c - argv[1] threads pass argv[3] addresses among themselves,
 * argv[2] rounds each: a thread records the FREE of an address it holds,
 * then hands the address to the shared pool (as a driver hands freed memory
 * to the next allocation), and the thread that takes it records its ALLOC.
 * Whatever order the trace reads the threads' segments in, every FREE of an
 * address must come out before the ALLOC that reuses it.  Records through
 * memhook_events_record (the hooks' path); needs memhook preloaded.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef uint64_t (*record_fn)(int, int, uint64_t, uint64_t, int, int, int);

static record_fn record;
static int fa, ff;
static long rounds;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *pool;
static long pooled;

static uint64_t take(void)
{
    for (;;) {
        pthread_mutex_lock(&lock);
        if (pooled > 0) {
            uint64_t a = pool[--pooled];
            pthread_mutex_unlock(&lock);
            return a;
        }
        pthread_mutex_unlock(&lock);
        sched_yield();
    }
}

static void give(uint64_t a)
{
    pthread_mutex_lock(&lock);
    pool[pooled++] = a;
    pthread_mutex_unlock(&lock);
}

static void *worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < rounds; i++) {
        uint64_t a = take();
        record(1, fa, a, 4096, 1, 0, 0);
        record(2, ff, a, 4096, 1, 0, 0);
        give(a);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    typedef int (*index_fn)(const char *);
    record = (record_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_events_record");
    index_fn index = (index_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_hook_index");
    if (!record || !index) {
        fprintf(stderr, "handoff_storm: memhook is not preloaded\n");
        return 90;
    }
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    rounds = argc > 2 ? atol(argv[2]) : 10000;
    long addrs = argc > 3 ? atol(argv[3]) : 2;
    fa = index("cuMemAlloc_v2");
    ff = index("cuMemFree_v2");
    pool = calloc((size_t)addrs, sizeof *pool);
    for (long i = 0; i < addrs; i++)
        pool[pooled++] = 0x7f0000000000ull + (uint64_t)i * 4096;
    pthread_t t[64];
    for (int i = 0; i < threads && i < 64; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads && i < 64; i++)
        pthread_join(t[i], NULL);
    printf("handoff_storm: %ld events\n", 2L * rounds * (threads < 64 ? threads : 64));
    return 0;
}
