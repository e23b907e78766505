// memhook's GPU suite: a module built with `nvcc -cubin`, loaded by the test
// with cuLibraryLoadData / cuModuleLoadData, its globals asked for with
// cuLibraryGetGlobal, cuLibraryGetManaged and cuModuleGetGlobal.
extern "C" {
__device__ float memhook_global[1000];   // 4000 B
__managed__ int memhook_managed[256];    // 1024 B
__global__ void memhook_touch() { memhook_global[threadIdx.x] += memhook_managed[0]; }
}
