// memhook's GPU suite: a CUDA program built with nvcc (-cudart static, and
// -cudart shared).  It prints what it allocates and frees, and the address
// of its own __device__ variable (cudaGetSymbolAddress), so the test can
// match every line against the events memhook reported.
#include <cstdio>
#include <cuda_runtime.h>

__device__ double memhook_devvar[4096];  // 32 KiB

__global__ void touch() { memhook_devvar[threadIdx.x] = 1.0; }

#define CHECK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_)); return 3; } } while (0)

int main() {
    CHECK(cudaFree(0));
    const size_t sizes[3] = {64, 1 << 20, 256u << 20};
    void *p[3];
    for (int i = 0; i < 3; i++) {
        CHECK(cudaMalloc(&p[i], sizes[i]));
        printf("ALLOC cudaMalloc 0x%llx %zu\n", (unsigned long long)p[i], sizes[i]);
    }
    void *h;
    CHECK(cudaMallocHost(&h, 1 << 20));
    printf("ALLOC cudaMallocHost 0x%llx %zu\n", (unsigned long long)h, (size_t)(1 << 20));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void *a;
    CHECK(cudaMallocAsync(&a, 1 << 20, s));
    printf("ALLOC cudaMallocAsync 0x%llx %zu\n", (unsigned long long)a, (size_t)(1 << 20));
    void *sym;
    CHECK(cudaGetSymbolAddress(&sym, memhook_devvar));
    printf("SYMBOL cudaGetSymbolAddress 0x%llx %zu\n", (unsigned long long)sym,
           sizeof(memhook_devvar));
    touch<<<1, 32>>>();
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 3; i++) {
        printf("FREE cudaFree 0x%llx\n", (unsigned long long)p[i]);
        fflush(stdout);
        CHECK(cudaFree(p[i]));
    }
    printf("FREE cudaFreeHost 0x%llx\n", (unsigned long long)h);
    CHECK(cudaFreeHost(h));
    printf("FREE cudaFreeAsync 0x%llx\n", (unsigned long long)a);
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    printf("DONE\n");
    return 0;
}
