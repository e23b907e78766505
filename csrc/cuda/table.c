/*
 * table.c - the hook table: one row per function of hook_table.def, with
 * its wrapper.  See cuda_hooks.h for what each field means.
 */
#include <string.h>

#include "cuda_signatures.h"

mh_hook mh_hooks[MH_FN_COUNT] = {
#define MH_HOOK(n, api_, kind_, type_, fallback_)                                 \
    [MH_FN_##n] = {                                                               \
        .name = #n,                                                               \
        .fallback = #fallback_,                                                   \
        .wrapper = (void *)mh_w_##n,                                              \
        .api = MEMHOOK_API_##api_,                                                \
        .kind = MEMHOOK_EVENT_##kind_,                                            \
        .mem_type = MEMHOOK_MEM_##type_,                                          \
        .tracked = MEMHOOK_EVENT_##kind_ == MEMHOOK_EVENT_ALLOC,                  \
    },
#include "hook_table.def"
#undef MH_HOOK
};

const char *mh_fallback_name(const mh_hook *h)
{
    return strcmp(h->fallback, "NONE") == 0 ? NULL : h->fallback;
}

void mh_table_init(void)
{
    /* A global lives as long as its module: no FREE ever matches it, so
     * the live table must not keep it. */
    static const mh_fn globals[] = {MH_FN_cuModuleGetGlobal, MH_FN_cuModuleGetGlobal_v2,
                                    MH_FN_cuLibraryGetGlobal, MH_FN_cuLibraryGetManaged,
                                    MH_FN_cudaGetSymbolAddress};
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        mh_hooks[globals[i]].tracked = false;
}

size_t memhook_hook_count(void) { return MH_FN_COUNT; }

int memhook_hook_index(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < MH_FN_COUNT; i++)
        if (strcmp(mh_hooks[i].name, name) == 0)
            return i;
    return -1;
}

void *memhook_hooks_original(const char *name)
{
    int i = memhook_hook_index(name);
    return i < 0 ? NULL : mh_next((mh_fn)i);
}
