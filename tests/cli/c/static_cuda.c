/*
 * static_cuda.c - linked -static: no loader runs for it, so LD_PRELOAD
 * cannot bring memhook in.  Built twice for tests/cli: with -DNAMES_CUDA
 * it names the CUDA driver (and tries to load it, as a static program
 * with CUDA would), without it names none.  Prints "static_cuda: ok".
 */
#include <stdio.h>
#ifdef NAMES_CUDA
#include <dlfcn.h>
#endif

int main(void)
{
#ifdef NAMES_CUDA
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h != NULL)
        dlclose(h);
#endif
    printf("static_cuda: ok\n");
    return 0;
}
