/* A thread with no Python at all allocating: a C library that makes a
 * pthread, sets the given context current on it and calls cuMemAlloc_v2
 * (linked against the driver, as a C++ worker or NCCL's threads are). */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "memhook/cuda_abi.h"

CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size);

typedef struct {
    CUcontext ctx;
    size_t size;
    CUdeviceptr ptr;
    int rc;
} job;

static void *run(void *arg)
{
    job *j = arg;
    j->rc = (int)cuCtxSetCurrent(j->ctx);
    if (j->rc == 0)
        j->rc = (int)cuMemAlloc_v2(&j->ptr, j->size);
    return NULL;
}

int alloc_in_c_thread(void *ctx, size_t size)
{
    job j = {.ctx = (CUcontext)ctx, .size = size, .rc = -1};
    pthread_t t;
    if (pthread_create(&t, NULL, run, &j) != 0)
        return -2;
    pthread_join(t, NULL);
    return j.rc;
}
