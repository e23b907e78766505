/*
 * proc_address.c - memhook's cuGetProcAddress and cuGetProcAddress_v2, and
 * the driver-unload watch: what the CUDA layer asks of the GOT engine.
 *
 * Both entry points are interposed through reloc like dlsym is
 * (mh_reloc_interpose, at load): while reloc is installed, every GOT slot
 * and dlsym answer for them is the wrapper here.  The real function is
 * called with the caller's symbol, cudaVersion and flags; the pointer it
 * hands back is mapped to the exported variant it is (dladdr:
 * "cuMemAlloc_v2", "cuMemAllocAsync_ptsz", ...), and if reloc has a
 * replacement for that exact name the caller gets it.  Anything else
 * passes through unchanged.  A request for cuGetProcAddress itself answers
 * memhook's wrapper (reloc's replacement for that name), so lookups made
 * through it are seen too.
 *
 * The real entry points are learned from the dlsym answers and GOT patches
 * that led here (reloc fills them in), or, failing that, looked up in the
 * global scope and then in libcuda.so.1 if it is already loaded.
 */
#include <dlfcn.h>
#include <string.h>

#include "cuda_hooks.h"
#include "log.h"
#include "mh_sonames.h"
#include "reloc.h"

typedef int (*gpa_v1_fn)(const char *, void **, int, uint64_t);
typedef int (*gpa_v2_fn)(const char *, void **, int, uint64_t, int *);

/* The real entry points: process-wide because the driver is (one per
 * process); reloc stores the first definition it learns, find_real the
 * one it looks up; then only read. */
static void *g_real_v1;
static void *g_real_v2;

static void *find_real(void **store, const char *name)
{
    void *real = __atomic_load_n(store, __ATOMIC_ACQUIRE);
    if (real != NULL)
        return real;
    mh_reloc_inside++;
    real = mh_real_dlsym ? mh_real_dlsym(RTLD_DEFAULT, name) : NULL;
    if (real == NULL && mh_real_dlopen) {
        void *h = mh_real_dlopen(MH_LIBCUDA_SONAME, RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            real = mh_real_dlsym(h, name);
            mh_real_dlclose(h);
        }
    }
    mh_reloc_inside--;
    (void)dlerror();  /* the lookups' misses are not the caller's to see */
    if (real != NULL) {
        /* Worth keeping even while reloc is not installed. */
        void *expected = NULL;
        __atomic_compare_exchange_n(store, &expected, real, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
        mh_reloc_note_definition(name, real);
    }
    return real;
}

static void map_result(void **pfn)
{
    if (pfn == NULL || *pfn == NULL || mh_reloc_inside || !mh_reloc_active())
        return;
    Dl_info info;
    if (dladdr(*pfn, &info) == 0 || info.dli_sname == NULL || info.dli_saddr != *pfn)
        return;
    mh_reloc_note_definition(info.dli_sname, *pfn);
    void *repl = mh_reloc_replacement_for(info.dli_sname, *pfn);
    if (repl == NULL)
        return;
    *pfn = repl;
}

static int gpa_v1_wrapper(const char *symbol, void **pfn, int version, uint64_t flags)
{
    gpa_v1_fn real = (gpa_v1_fn)find_real(&g_real_v1, "cuGetProcAddress");
    if (real == NULL)
        return 500;   /* CUDA_ERROR_NOT_FOUND */
    int r = real(symbol, pfn, version, flags);
    if (r == 0)
        map_result(pfn);
    return r;
}

static int gpa_v2_wrapper(const char *symbol, void **pfn, int version, uint64_t flags,
                          int *status)
{
    gpa_v2_fn real = (gpa_v2_fn)find_real(&g_real_v2, "cuGetProcAddress_v2");
    if (real == NULL)
        return 500;
    int r = real(symbol, pfn, version, flags, status);
    if (r == 0)
        map_result(pfn);
    return r;
}

/* At load, before any install can run: reloc takes interposers only then
 * (csrc/cuda/startup_order.c). */
void mh_proc_address_at_load(void)
{
    if (mh_reloc_interpose("cuGetProcAddress", (void *)gpa_v1_wrapper, &g_real_v1) != 0 ||
        mh_reloc_interpose("cuGetProcAddress_v2", (void *)gpa_v2_wrapper, &g_real_v2) != 0 ||
        mh_reloc_watch_unload(MH_LIBCUDA_SONAME, mh_driver_unloaded) != 0)
        mh_warn("reloc: cannot register the CUDA layer's cuGetProcAddress interposition");
}
