/*
 * attrib_app.c - the traced program of tests/attrib.  libattrib_a.so is
 * linked; libattrib_b.so (argv[1]) is dlopened, used, and dlclosed before
 * the program ends (its events must still be named after it); argv[2]:
 * milliseconds to wait before the dlclose.
 *
 *   A: 1 MiB + 2 MiB (driver + runtime), 3 MiB leaked; B: 4 MiB + 8 MiB
 *   (driver + runtime), 12 MiB leaked; then a_chain_outer (16 MiB, freed),
 *   then nofp_alloc with each garbage %rbp (64 KiB each, freed).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cudart_sim.h"

#define MiB (1024u * 1024u)

unsigned long long a_driver_alloc(size_t n);
void *a_runtime_alloc(size_t n);
void *a_chain_outer(size_t n);
int a_runtime_free(void *p);
int nofp_alloc(void **p, size_t n, uintptr_t garbage);

static void *sym(void *h, const char *name)
{
    void *f = dlsym(h, name);
    if (f == NULL) {
        fprintf(stderr, "attrib_app: %s\n", dlerror());
        exit(91);
    }
    return f;
}

int main(int argc, char **argv)
{
    if (a_runtime_alloc(2 * MiB) == NULL || a_driver_alloc(1 * MiB) == 0)
        return 90;
    void *h = dlopen(argc > 1 ? argv[1] : "libattrib_b.so", RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "attrib_app: %s\n", dlerror());
        return 91;
    }
    unsigned long long (*b_driver)(size_t) = (unsigned long long (*)(size_t))sym(h, "b_driver_alloc");
    void *(*b_runtime)(size_t) = (void *(*)(size_t))sym(h, "b_runtime_alloc");
    if (b_runtime(8 * MiB) == NULL || b_driver(4 * MiB) == 0)
        return 92;
    if (argc > 2) {
        /* memhook trace in bistro mode alone learns of objects on its
         * streamer's poll (README, "Who allocated it"): wait for it. */
        struct timespec pause = {.tv_sec = 0, .tv_nsec = atol(argv[2]) * 1000000L};
        nanosleep(&pause, NULL);
    }
    dlclose(h);
    void *c = a_chain_outer(16 * MiB);
    if (c == NULL || a_runtime_free(c) != 0)
        return 93;
    int local = 0;
    uintptr_t garbage[] = {0, 1, 0xdeadbeefdeadbeefull, (uintptr_t)&local - 4096,
                           (uintptr_t)&local + 8};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        void *p = NULL;
        if (nofp_alloc(&p, 64 * 1024, garbage[i]) != 0 || p == NULL || cudaFree(p) != 0)
            return 94;
    }
    return 0;
}
