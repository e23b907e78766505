/*
 * fork_exec.c - a process tree for tests/cli: fork, exec, and events that
 * cross fork() pending in the queue.
 *
 *   parent     records a 7 MiB ALLOC+FREE pair with memhook_events_record
 *              just before forking (still in the queue when it forks: the
 *              children must not send them again), then
 *   child 1    fork(): cudaMalloc 1 MiB, cudaFree, exit
 *   child 2    fork() + execv(self, "exec-child"): cudaMalloc 3 MiB, cudaFree
 *   parent     after both: cudaMalloc 5 MiB, never freed
 *
 * The parent touches CUDA only after its children are done (CUDA may not
 * be used across fork).  Linked with libcudart_static.a.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cudart_sim.h"

#define MiB (1024u * 1024u)

static void alloc_free(size_t size, int keep)
{
    void *p = NULL;
    if (cudaMalloc(&p, size) != cudaSuccess) {
        fprintf(stderr, "fork_exec: cudaMalloc(%zu) failed\n", size);
        exit(90);
    }
    if (!keep && cudaFree(p) != cudaSuccess) {
        fprintf(stderr, "fork_exec: cudaFree failed\n");
        exit(91);
    }
}

static void wait_ok(pid_t pid)
{
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "fork_exec: child %d failed (status %#x)\n", (int)pid, status);
        exit(92);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "exec-child") == 0) {
        alloc_free(3 * MiB, 0);
        return 0;
    }
    typedef uint64_t (*record_fn)(int, int, uint64_t, uint64_t, int, int, int);
    typedef int (*index_fn)(const char *);
    record_fn record = (record_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_events_record");
    index_fn index = (index_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_hook_index");
    if (record && index) {  /* only when memhook is preloaded */
        int fn = index("cuMemAlloc_v2"), fr = index("cuMemFree_v2");
        record(1, fn, 0x7000000, 7 * MiB, 1, 0, 0);
        record(2, fr, 0x7000000, 7 * MiB, 1, 0, 0);
    }
    pid_t c1 = fork();
    if (c1 == 0) {
        alloc_free(1 * MiB, 0);
        exit(0);
    }
    wait_ok(c1);
    pid_t c2 = fork();
    if (c2 == 0) {
        char *args[] = {argv[0], "exec-child", NULL};
        execv("/proc/self/exe", args);
        _exit(93);
    }
    wait_ok(c2);
    alloc_free(5 * MiB, 1);
    printf("fork_exec: parent %d, children %d %d\n", (int)getpid(), (int)c1, (int)c2);
    return 0;
}
