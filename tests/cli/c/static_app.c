/*
 * static_app.c - a program linked with the simulated runtime statically
 * (libcudart_static.a), traced by tests/cli in every hook mode.
 *
 * It makes one allocation of each common kind and frees it, makes one
 * request the device cannot meet (a failed call), leaks 8 MiB on purpose
 * (never freed), and exits with the status given as argv[1] (default 0).
 * The runtime reaches the driver through dlopen + cuGetProcAddress, so the
 * trace sees the driver-level calls under it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "cudart_sim.h"

#define MiB (1024u * 1024u)

static void check(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "static_app: %s failed: %d\n", what, (int)err);
        exit(90);
    }
}

int main(int argc, char **argv)
{
    void *dev[3], *host, *managed, *leak, *huge = NULL;
    const size_t sizes[3] = {64, 1 * MiB, 256 * MiB};
    for (int i = 0; i < 3; i++)
        check(cudaMalloc(&dev[i], sizes[i]), "cudaMalloc");
    for (int i = 2; i >= 0; i--)
        check(cudaFree(dev[i]), "cudaFree");
    check(cudaMallocHost(&host, 4 * MiB), "cudaMallocHost");
    check(cudaFreeHost(host), "cudaFreeHost");
    check(cudaMallocManaged(&managed, 2 * MiB, cudaMemAttachGlobal), "cudaMallocManaged");
    check(cudaFree(managed), "cudaFree(managed)");
    if (cudaMalloc(&huge, (size_t)1 << 50) != cudaErrorMemoryAllocation) {
        fprintf(stderr, "static_app: a 1 PiB cudaMalloc did not fail as expected\n");
        return 91;
    }
    check(cudaMalloc(&leak, 8 * MiB), "cudaMalloc(leak)");
    printf("static_app: done\n");
    return argc > 1 ? atoi(argv[1]) : 0;
}
