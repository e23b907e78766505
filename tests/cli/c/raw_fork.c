/*
 * raw_fork.c - a child made by the raw fork system call (no atfork
 * handlers run, as some runtimes, sandboxes and crash handlers make them)
 * that records events.  The parent records argv[1] ALLOC/FREE pairs before
 * the fork and after the child ended, the child argv[2] pairs; prints
 * "raw_fork: parent P child C status S" and exits with the child's exit
 * status (100 + N if a signal N ended it).  Needs memhook preloaded.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

typedef uint64_t (*record_fn)(int, int, uint64_t, uint64_t, int, int, int);
static record_fn record;
static int fa, ff;

static void pairs(long n, uint64_t base)
{
    for (long i = 0; i < n; i++) {
        record(1, fa, base + (uint64_t)i * 4096, 4096, 1, 0, 0);
        record(2, ff, base + (uint64_t)i * 4096, 4096, 1, 0, 0);
    }
}

int main(int argc, char **argv)
{
    typedef int (*index_fn)(const char *);
    record = (record_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_events_record");
    index_fn index = (index_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_hook_index");
    if (!record || !index) {
        fprintf(stderr, "raw_fork: memhook is not preloaded\n");
        return 90;
    }
    long parent_pairs = argc > 1 ? atol(argv[1]) : 5;
    long child_pairs = argc > 2 ? atol(argv[2]) : 10;
    fa = index("cuMemAlloc_v2");
    ff = index("cuMemFree_v2");
    pairs(parent_pairs, 0x7f0000000000ull);
    fflush(stdout);
    long kid = syscall(SYS_fork);
    if (kid < 0) {
        perror("raw_fork: fork");
        return 91;
    }
    if (kid == 0) {
        pairs(child_pairs, 0x7f1000000000ull);
        _exit(0);
    }
    int status = 0;
    while (waitpid((pid_t)kid, &status, 0) < 0) {
    }
    pairs(parent_pairs, 0x7f2000000000ull);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
    printf("raw_fork: parent %d child %ld status %d\n", (int)getpid(), kid, code);
    return code;
}
