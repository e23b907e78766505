/* reloc_install: install time over ~200 loaded objects vs a bare
 * dl_iterate_phdr walk, and dlopen+dlclose with vs without memhook.
 * argv: <dir with libbench_N.so> <count> <extra lib>; run by reloc_bench.py. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "memhook/memhook.h"
#include "memhook_internal/api.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int count_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(size_t *)data += info->dlpi_phnum;
    return 0;
}

int bench_target(int x);
static int (*real_target)(int);
static int repl(int x) { return real_target(x) + 1; }

static double dlopen_loop(const char *lib, int n)
{
    double t0 = now_us();
    for (int i = 0; i < n; i++) {
        void *h = dlopen(lib, RTLD_NOW);
        if (!h) { fprintf(stderr, "%s\n", dlerror()); exit(1); }
        dlclose(h);
    }
    return (now_us() - t0) / n;
}

int main(int argc, char **argv)
{
    if (argc < 4) return 2;
    const char *dir = argv[1];
    int count = atoi(argv[2]);
    const char *extra = argv[3];
    char path[4096];
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/libbench_%d.so", dir, i);
        if (!dlopen(path, RTLD_NOW | RTLD_GLOBAL)) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    }
    size_t objs = 0;
    dl_iterate_phdr(count_cb, &objs);
    int loaded = 0;
    { void *h = dlopen(NULL, RTLD_NOW); struct link_map *lm = h; for (; lm; lm = lm->l_next) loaded++; }
    const int reps = 50;
    double t0 = now_us();
    for (int i = 0; i < reps; i++) { size_t n = 0; dl_iterate_phdr(count_cb, &n); }
    double walk = (now_us() - t0) / reps;
    memhook_reloc_symbol s[] = {{"bench_target", (void *)repl, (void **)&real_target}};
    char why[256];
    double inst = 0, uninst = 0;
    size_t slots = 0;
    for (int i = 0; i < reps; i++) {
        double a = now_us();
        if (memhook_reloc_install(s, 1, why, sizeof why)) { fprintf(stderr, "%s\n", why); return 1; }
        double b = now_us();
        slots = memhook_reloc_patched_slots();
        memhook_reloc_uninstall();
        double c = now_us();
        inst += b - a;
        uninst += c - b;
    }
    printf("objects loaded: %d, slots rewritten per install: %zu\n", loaded, slots);
    printf("bare dl_iterate_phdr walk:   %10.1f us\n", walk);
    printf("memhook_reloc_install:       %10.1f us  (%.0fx the bare walk)\n", inst / reps, inst / reps / walk);
    printf("memhook_reloc_uninstall:     %10.1f us\n", uninst / reps);
    const int n = 2000;
    dlopen_loop(extra, 100);
    double base = dlopen_loop(extra, n);
    memhook_reloc_install(s, 1, why, sizeof why);
    dlopen_loop(extra, 100);
    double hooked = dlopen_loop(extra, n);
    void *keep = dlopen(extra, RTLD_NOW);   /* already loaded: the NOLOAD fast path */
    double loaded_base_t0 = now_us();
    for (int i = 0; i < n; i++) { void *h = dlopen(extra, RTLD_NOW); dlclose(h); }
    double again = (now_us() - loaded_base_t0) / n;
    memhook_reloc_uninstall();
    double again_base_t0 = now_us();
    for (int i = 0; i < n; i++) { void *h = dlopen(extra, RTLD_NOW); dlclose(h); }
    double again_base = (now_us() - again_base_t0) / n;
    dlclose(keep);
    printf("dlopen+dlclose (load+unload) without memhook: %8.2f us\n", base);
    printf("dlopen+dlclose (load+unload) with memhook:    %8.2f us  (+%.2f us, %.2fx)\n", hooked, hooked - base, hooked / base);
    printf("dlopen+dlclose (already loaded) without:      %8.2f us\n", again_base);
    printf("dlopen+dlclose (already loaded) with:         %8.2f us  (+%.2f us)\n", again, again - again_base);
    return 0;
}
