/*
 * attrib_lib.c - one of two shared libraries of the caller-attribution
 * tests, built twice: -DLIB=a (libattrib_a.so) and -DLIB=b
 * (libattrib_b.so).  Each allocates through the simulated driver and the
 * simulated runtime from functions named after it, so an event's caller
 * must name this library and that function.  Frame pointers on, no
 * inlining: the --stacks test reads the three-deep chain
 * LIB_chain_outer -> LIB_chain_middle -> LIB_chain_inner.
 */
#include <stddef.h>

#include "cudart_sim.h"

typedef unsigned long long CUdeviceptr;
int cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
int cuMemFree_v2(CUdeviceptr dptr);

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define NAME(x) CAT(LIB, x)
#define API __attribute__((visibility("default"), noinline))

API unsigned long long NAME(driver_alloc)(size_t n)
{
    CUdeviceptr p = 0;
    return cuMemAlloc_v2(&p, n) == 0 ? p : 0;
}

API int NAME(driver_free)(unsigned long long p) { return cuMemFree_v2(p); }

API void *NAME(runtime_alloc)(size_t n)
{
    void *p = NULL;
    return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
}

API int NAME(runtime_free)(void *p) { return (int)cudaFree(p); }

API void *NAME(chain_inner)(size_t n)
{
    void *p = NULL;
    int r = (int)cudaMalloc(&p, n);
    __asm__ volatile("" ::: "memory");  /* not a tail call */
    return r == 0 ? p : NULL;
}

API void *NAME(chain_middle)(size_t n)
{
    void *p = NAME(chain_inner)(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

API void *NAME(chain_outer)(size_t n)
{
    void *p = NAME(chain_middle)(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
