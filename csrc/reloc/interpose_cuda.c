/*
 * interpose_cuda.c - memhook's cuGetProcAddress and cuGetProcAddress_v2.
 *
 * The real function is called with the caller's symbol, cudaVersion and
 * flags; the pointer it hands back is mapped to the exported variant it is
 * (dladdr: "cuMemAlloc_v2", "cuMemAllocAsync_ptsz", ...), and if that exact
 * name is hooked the caller gets its replacement.  Anything else passes
 * through unchanged.  A request for cuGetProcAddress itself answers
 * memhook's wrapper, so lookups made through it are seen too.
 *
 * The real entry points are learned from the dlsym answers and GOT patches
 * that led here (mh_reloc_note_definition), or, failing that, looked up in
 * the global scope and then in libcuda.so.1 if it is already loaded.
 */
#include <dlfcn.h>
#include <string.h>

#include "reloc.h"

typedef int (*gpa_v1_fn)(const char *, void **, int, uint64_t);
typedef int (*gpa_v2_fn)(const char *, void **, int, uint64_t, int *);

static void *find_real(void **store, const char *name)
{
    void *real = __atomic_load_n(store, __ATOMIC_ACQUIRE);
    if (real != NULL)
        return real;
    mh_reloc_inside++;
    real = mh_real_dlsym ? mh_real_dlsym(RTLD_DEFAULT, name) : NULL;
    if (real == NULL && mh_real_dlopen) {
        void *h = mh_real_dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            real = mh_real_dlsym(h, name);
            mh_real_dlclose(h);
        }
    }
    mh_reloc_inside--;
    if (real != NULL)
        mh_reloc_note_definition(name, real);
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

int mh_cuGetProcAddress_wrapper(const char *symbol, void **pfn, int version, uint64_t flags)
{
    gpa_v1_fn real = (gpa_v1_fn)find_real(&mh_real_cuGetProcAddress, "cuGetProcAddress");
    if (real == NULL)
        return 500;   /* CUDA_ERROR_NOT_FOUND */
    int r = real(symbol, pfn, version, flags);
    if (r == 0)
        map_result(pfn);
    return r;
}

int mh_cuGetProcAddress_v2_wrapper(const char *symbol, void **pfn, int version, uint64_t flags,
                                   int *status)
{
    gpa_v2_fn real = (gpa_v2_fn)find_real(&mh_real_cuGetProcAddress_v2, "cuGetProcAddress_v2");
    if (real == NULL)
        return 500;
    int r = real(symbol, pfn, version, flags, status);
    if (r == 0)
        map_result(pfn);
    return r;
}
