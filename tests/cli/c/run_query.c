/* run_query.c - an unmodified program's view under `memhook run`: it never
 * links memhook nor installs anything; it finds the core's API in the
 * process (dlsym(RTLD_DEFAULT, ...)), as a transport probing for memhook
 * would, and checks that the hooks are on and feed the cache.
 *
 * argv[1]: ALLOC/FREE pairs made before the checks (the queue's keeper must
 * take their events out of the queue although nothing here drains).
 * argv[2] "fork": then a fork child makes as many calls, and its own keeper
 * (the parent's thread did not come along) must keep its queue short.
 * Prints "run_query: mode=M found=1 ..." and exits 0 when every check holds;
 * "run_query: no memhook" (exit 4) when the core is not in the process. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memhook/cuda_abi.h"
#include "memhook/memhook.h"

#define NEED(lib, name) need_sym(lib, #name)
static void *need_sym(void *lib, const char *name)
{
    void *fn = dlsym(lib, name);
    if (fn == NULL) {
        fprintf(stderr, "run_query: %s not found\n", name);
        exit(2);
    }
    return fn;
}

static int check(int ok, const char *what)
{
    if (!ok)
        fprintf(stderr, "run_query: FAILED: %s\n", what);
    return ok;
}

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 0;
    unsigned (*hooks_mode)(void) = dlsym(RTLD_DEFAULT, "memhook_hooks_mode");
    if (hooks_mode == NULL) {
        printf("run_query: no memhook\n");
        return 4;
    }
    int (*query)(const void *, size_t, memhook_region *) = NEED(RTLD_DEFAULT, memhook_query);
    int (*query_cached)(const void *, size_t, memhook_region *) =
        NEED(RTLD_DEFAULT, memhook_query_cached);
    void (*queue_stats)(memhook_queue_stats *) = NEED(RTLD_DEFAULT, memhook_queue_stats_get);

    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (cuda == NULL) {
        fprintf(stderr, "run_query: no libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    CUresult (*cu_init)(unsigned) = NEED(cuda, cuInit);
    CUresult (*cu_device_get)(CUdevice *, int) = NEED(cuda, cuDeviceGet);
    CUresult (*cu_retain)(CUcontext *, CUdevice) = NEED(cuda, cuDevicePrimaryCtxRetain);
    CUresult (*cu_set_current)(CUcontext) = NEED(cuda, cuCtxSetCurrent);
    CUresult (*cu_alloc)(CUdeviceptr *, size_t) = NEED(cuda, cuMemAlloc_v2);
    CUresult (*cu_free)(CUdeviceptr) = NEED(cuda, cuMemFree_v2);
    CUdevice dev;
    CUcontext ctx;
    if (cu_init(0) || cu_device_get(&dev, 0) || cu_retain(&ctx, dev) || cu_set_current(ctx)) {
        fprintf(stderr, "run_query: no CUDA context\n");
        return 2;
    }
    int ok = check(hooks_mode() != 0, "memhook_hooks_mode() is nonzero");

    for (long i = 0; i < pairs; i++) {
        CUdeviceptr p;
        if (cu_alloc(&p, 4096) == CUDA_SUCCESS)
            cu_free(p);
    }
    enum { SIZE = 1 << 20 };
    CUdeviceptr buf;
    ok &= check(cu_alloc(&buf, SIZE) == CUDA_SUCCESS, "cuMemAlloc");

    /* Nothing in this program drains: the keeper feeds the cache within a
     * few of its polls, which the no-drain query then sees. */
    memhook_region r = {.struct_size = sizeof r};
    int fed = 0;
    for (int tries = 0; tries < 2000 && !fed; tries++) {
        fed = query_cached((void *)(uintptr_t)(buf + 100), 64, &r) == 0 &&
              r.mem_type == MEMHOOK_MEMORY_CUDA;
        if (!fed)
            nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
    }
    ok &= check(fed, "the keeper fed the cache (memhook_query_cached answers CUDA)");
    memhook_queue_stats st = {0};
    queue_stats(&st);
    ok &= check(st.produced >= (uint64_t)(2 * pairs + 1), "the hooks recorded every call");
    ok &= check(st.produced - st.consumed <= 2 * 255 + 64,
                "the queue was kept short with no consumer");

    r = (memhook_region){.struct_size = sizeof r};
    ok &= check(query((void *)(uintptr_t)(buf + 100), 64, &r) == 0, "memhook_query returns 0");
    ok &= check(r.mem_type == MEMHOOK_MEMORY_CUDA && r.origin == MEMHOOK_ORIGIN_HOOKS &&
                    r.base == buf && r.size == SIZE && r.alloc_id != 0,
                "a device allocation: CUDA, its extent and an id, from the hooks");
    char host[64];
    memhook_region h = {.struct_size = sizeof h};
    ok &= check(query(host, sizeof host, &h) == 0 && h.mem_type == MEMHOOK_MEMORY_HOST &&
                    h.origin == MEMHOOK_ORIGIN_HOOKS,
                "host memory: HOST, vouched for by the hooks");
    cu_free(buf);
    memhook_region f = {.struct_size = sizeof f};
    ok &= check(query((void *)(uintptr_t)buf, 64, &f) == 0 && f.mem_type != MEMHOOK_MEMORY_CUDA,
                "a freed allocation is no longer CUDA");
    if (argc > 2 && strcmp(argv[2], "fork") == 0) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            memhook_queue_stats before = {0}, after = {0};
            queue_stats(&before);
            for (long i = 0; i < pairs; i++) {
                CUdeviceptr p;
                if (cu_alloc(&p, 4096) == CUDA_SUCCESS)
                    cu_free(p);
            }
            int kept = 0;
            for (int tries = 0; tries < 2000 && !kept; tries++) {
                queue_stats(&after);
                kept = after.produced - after.consumed <= 2 * 255 + 64;
                if (!kept)
                    nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
            }
            /* (At least one event a call: the simulator's allocations fail
             * in a fork child, as CUDA's do, and a failed ALLOC is an event.) */
            kept &= after.produced - before.produced >= (uint64_t)pairs;
            _exit(check(kept, "the fork child's queue was kept short") ? 0 : 1);
        }
        int wst = 0;
        ok &= check(child > 0 && waitpid(child, &wst, 0) == child && WIFEXITED(wst) &&
                        WEXITSTATUS(wst) == 0,
                    "the fork child's checks");
    }
    printf("run_query: mode=%u found=1 produced=%llu consumed=%llu origin=%d ok=%d\n",
           hooks_mode(), (unsigned long long)st.produced, (unsigned long long)st.consumed,
           r.origin, ok);
    return ok ? 0 : 1;
}
