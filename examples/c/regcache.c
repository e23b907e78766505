/*
 * regcache.c - a registration cache keyed by memhook's allocation id, the
 * way a transport (UCX's rcache, libfabric's MR cache, Open MPI's) keys its
 * cache on CU_POINTER_ATTRIBUTE_BUFFER_ID - without a driver call per hit.
 *
 * A "registration" here is whatever a transport pays for once per buffer
 * (an ibv_reg_mr, a cuIpcGetMemHandle, a GDRCopy pin): the example counts
 * them.  A lookup asks memhook_query for the allocation holding the buffer
 * and finds its entry by alloc_id; a freed allocation's id is never handed
 * out again, so an entry for it can only miss (no stale hit on a reused
 * address) and is evicted lazily.
 *
 * Build against the installed package (its header and its libmemhook.so):
 *   cc -std=c11 $(memhook config --cflags) regcache.c $(memhook config --libs) \
 *      -ldl -lpthread -o regcache
 * or through pkg-config:
 *   export PKG_CONFIG_PATH=$(memhook config --pkgconfigdir)
 *   cc -std=c11 regcache.c $(pkg-config --cflags --libs memhook) -ldl -o regcache
 * Run it on the simulator (as tests/native_cache/test_c_api_config.py does;
 * --libs' rpath finds the core): eval "$(memhook sim env)"; ./regcache
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memhook/cuda_abi.h"
#include "memhook/memhook.h"

/* ---- the cache: open addressing on alloc_id, a few dozen lines ---- */

typedef struct reg_entry {
    uint64_t alloc_id;   /* 0: empty */
    uint64_t base, size; /* the allocation's extent when registered */
    int mem_type;
    int handle;          /* the transport's registration handle */
} reg_entry;

typedef struct regcache {
    reg_entry slot[1024];
    unsigned long hits, misses, registrations, uncached;
} regcache;

static int g_next_handle = 1;

static int register_memory(regcache *rc, const memhook_region *r)
{
    rc->registrations++;  /* (the expensive call a transport makes) */
    (void)r;
    return g_next_handle++;
}

/* The registration covering [ptr, ptr + len), or -1 when memhook cannot
 * say which allocation holds it (then a transport registers per call or
 * takes its host path). */
static int regcache_get(regcache *rc, const void *ptr, size_t len)
{
    memhook_region r = {.struct_size = sizeof r};
    if (memhook_query(ptr, len, &r) != 0 || r.alloc_id == 0 ||
        r.mem_type == MEMHOOK_MEMORY_HOST || r.mem_type == MEMHOOK_MEMORY_UNKNOWN) {
        rc->uncached++;
        return -1;
    }
    size_t mask = sizeof rc->slot / sizeof rc->slot[0] - 1;
    size_t i = (size_t)(r.alloc_id * 0x9e3779b97f4a7c15ull >> 32) & mask;
    for (size_t probe = 0; probe <= mask; probe++, i = (i + 1) & mask) {
        reg_entry *e = &rc->slot[i];
        if (e->alloc_id == r.alloc_id) {
            rc->hits++;
            return e->handle;
        }
        if (e->alloc_id == 0)
            break;
    }
    /* A miss: register, and take the slot (evicting whatever was there:
     * an entry of a freed allocation can never be hit again anyway). */
    rc->misses++;
    reg_entry *e = &rc->slot[(size_t)(r.alloc_id * 0x9e3779b97f4a7c15ull >> 32) & mask];
    *e = (reg_entry){r.alloc_id, r.base, r.size, r.mem_type, register_memory(rc, &r)};
    return e->handle;
}

/* ---- a transport's send loop, on whatever driver is loaded ---- */

#define NEED(lib, name) need_sym(lib, #name)
static void *need_sym(void *lib, const char *name)
{
    void *fn = dlsym(lib, name);
    if (fn == NULL) {
        fprintf(stderr, "regcache: %s not found\n", name);
        exit(2);
    }
    return fn;
}

int main(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (cuda == NULL) {
        fprintf(stderr, "regcache: no libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    char why[256];
    if (memhook_hooks_install(MEMHOOK_MODE_DEFAULT, why, sizeof why) != 0) {
        fprintf(stderr, "regcache: memhook_hooks_install: %s\n", why);
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
        fprintf(stderr, "regcache: no CUDA context\n");
        return 2;
    }
    static regcache rc;
    enum { BUFFERS = 8, ROUNDS = 100, SIZE = 1 << 20 };
    CUdeviceptr buf[BUFFERS];
    int first[BUFFERS];
    for (int b = 0; b < BUFFERS; b++) {
        if (cu_alloc(&buf[b], SIZE)) {
            fprintf(stderr, "regcache: cuMemAlloc failed\n");
            return 2;
        }
        first[b] = regcache_get(&rc, (void *)(uintptr_t)buf[b], SIZE);
    }
    int ok = 1;
    /* Messages from anywhere inside the buffers: one registration each. */
    for (int round = 0; round < ROUNDS; round++)
        for (int b = 0; b < BUFFERS; b++) {
            size_t off = (size_t)(round * 4096) % (SIZE - 4096);
            ok &= regcache_get(&rc, (void *)(uintptr_t)(buf[b] + off), 4096) == first[b];
        }
    /* Free one and allocate again: likely the same address, certainly a
     * new allocation - it must be registered anew, never hit the old one. */
    cu_free(buf[0]);
    CUdeviceptr again;
    cu_alloc(&again, SIZE);
    int fresh = regcache_get(&rc, (void *)(uintptr_t)again, SIZE);
    ok &= fresh != first[0];
    char host[64];
    ok &= regcache_get(&rc, host, sizeof host) == -1;  /* host memory: not cached */
    printf("regcache: reused_address=%d hits=%lu misses=%lu registrations=%lu uncached=%lu "
           "ok=%d\n", again == buf[0], rc.hits, rc.misses, rc.registrations, rc.uncached, ok);
    cu_free(again);
    for (int b = 1; b < BUFFERS; b++)
        cu_free(buf[b]);
    return ok ? 0 : 1;
}
