/*
 * state.c - process-wide state of the simulated driver: configuration from
 * the environment, the global lock, cuInit, and fork poisoning.
 *
 * Fork: like the real driver, a child forked after the parent initialised
 * CUDA cannot use it.  Every stateful entry point of the child returns
 * CUDA_ERROR_NOT_INITIALIZED, cuInit included.  A child forked from a parent
 * that never called cuInit may initialise normally.  The lock is taken in the
 * prepare handler and released in both the parent and child handlers, so the
 * child never inherits it held by a thread that no longer exists (the child
 * re-initialises it: see atfork_child).
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_api.h"
#include "sim_control.h"

/* The driver-wide lock and configuration: process-wide by definition. */
static pthread_mutex_t g_lock;
static pthread_once_t g_lock_once = PTHREAD_ONCE_INIT;
static pthread_once_t g_cfg_once = PTHREAD_ONCE_INIT;
static sim_config g_cfg;
static atomic_bool g_initialised;   /* cuInit succeeded in this process */
static atomic_bool g_poisoned;      /* forked after the parent initialised */

#define DEFAULT_DEVICES 1
#define DEFAULT_MEMORY (16ull << 30)

static int parse_devices(const char *s, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 1 || v > SIM_MAX_DEVICES)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_memory(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: return -1;
    }
    if (*end != '\0' || v == 0)
        return -1;
    if (shift && v > (ULLONG_MAX >> shift))
        return -1;
    v <<= shift;
    /* at least one page, and no more than 1 TiB per simulated device */
    if (v < SIM_PAGE_SIZE || v > (1ull << 40))
        return -1;
    *out = v;
    return 0;
}

static void init_lock(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

/* Read on first use (not at load time), so a process that never touches
 * CUDA never sees a warning about the variables. */
static void init_config(void)
{

    g_cfg.device_count = DEFAULT_DEVICES;
    g_cfg.device_memory = DEFAULT_MEMORY;
    /* unset or empty: the default */
    const char *s = getenv("MEMHOOK_SIM_DEVICES");
    if (s != NULL && *s != '\0' && parse_devices(s, &g_cfg.device_count) != 0) {
        fprintf(stderr, "memhook sim: MEMHOOK_SIM_DEVICES=\"%s\" is invalid: "
                "expected an integer from 1 to %d; using %d\n",
                s, SIM_MAX_DEVICES, DEFAULT_DEVICES);
        g_cfg.device_count = DEFAULT_DEVICES;
    }
    s = getenv("MEMHOOK_SIM_DEVICE_MEMORY");
    if (s != NULL && *s != '\0' && parse_memory(s, &g_cfg.device_memory) != 0) {
        fprintf(stderr, "memhook sim: MEMHOOK_SIM_DEVICE_MEMORY=\"%s\" is invalid: "
                "expected bytes per device as a positive integer with an optional "
                "K, M or G suffix, from 4096 to 1T; using 16G\n", s);
        g_cfg.device_memory = DEFAULT_MEMORY;
    }
}

SIM_HIDDEN const sim_config *sim_cfg(void)
{
    pthread_once(&g_cfg_once, init_config);
    return &g_cfg;
}

SIM_HIDDEN void sim_lock(void)
{
    pthread_once(&g_lock_once, init_lock);
    pthread_mutex_lock(&g_lock);
}

SIM_HIDDEN void sim_unlock(void) { pthread_mutex_unlock(&g_lock); }

SIM_HIDDEN CUresult sim_check_init(void)
{
    if (atomic_load_explicit(&g_poisoned, memory_order_acquire))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!atomic_load_explicit(&g_initialised, memory_order_acquire))
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

static void atfork_prepare(void) { sim_lock(); }
static void atfork_parent(void) { sim_unlock(); }
/* The child's only thread has a new thread id, so it cannot unlock the
 * recursive mutex the parent's thread locked in prepare (glibc checks the
 * owner): it gets a fresh, unlocked one instead.  No other thread exists in
 * the child, and every table is consistent because prepare held the lock. */
static void atfork_child(void)
{
    if (atomic_load_explicit(&g_initialised, memory_order_relaxed))
        atomic_store_explicit(&g_poisoned, true, memory_order_release);
    init_lock();
}

__attribute__((constructor)) static void sim_state_ctor(void)
{
    pthread_once(&g_lock_once, init_lock);
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

SIM_API CUresult cuInit(unsigned int Flags)
{
    if (atomic_load_explicit(&g_poisoned, memory_order_acquire))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (atomic_load_explicit(&g_initialised, memory_order_acquire))
        return CUDA_SUCCESS;
    (void)sim_cfg();
    sim_lock();
    CUresult rc = CUDA_SUCCESS;
    if (!atomic_load_explicit(&g_initialised, memory_order_relaxed)) {
        rc = sim_vaspace_init();
        if (rc == CUDA_SUCCESS)
            atomic_store_explicit(&g_initialised, true, memory_order_release);
    }
    sim_unlock();
    return rc;
}
