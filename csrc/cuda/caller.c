/*
 * caller.c - an event's caller: the snapshot of CUDA's text ranges, kept
 * current as objects come and go (mh_objects.h), and the walk past them
 * (the walk itself is csrc/core/mh_frames.c's; caller.h says why).
 */
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "caller.h"
#include "mh_objects.h"
#include "mh_sonames.h"

/* Process-wide by nature: which text is CUDA's is a property of the
 * process's mappings.  Written under g_refresh_lock only. */
mh_text_range mh_cuda_text[2][MH_CUDA_RANGES + 1];
MH_HOT _Atomic uint32_t mh_cuda_text_state;
static pthread_mutex_t g_refresh_lock = PTHREAD_MUTEX_INITIALIZER;

static bool in_cuda_text(uintptr_t ra) { return mh_in_cuda_text(ra); }

uint64_t mh_caller_walk(const mh_caller_site *site)
{
    return mh_frames_first_outside(site, in_cuda_text);
}
/* ---- the snapshot of CUDA's text ---- */

static bool is_cuda_own(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    return strncmp(base, MH_LIBCUDA_PREFIX, sizeof MH_LIBCUDA_PREFIX - 1) == 0 ||
           strncmp(base, MH_LIBCUDART_PREFIX, sizeof MH_LIBCUDART_PREFIX - 1) == 0;
}

typedef struct {
    mh_text_range *out;
    uint32_t n;
} collect_state;

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    collect_state *c = arg;
    if (info->dlpi_name == NULL || !is_cuda_own(info->dlpi_name))
        return 0;
    for (int i = 0; i < info->dlpi_phnum && c->n < MH_CUDA_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        c->out[c->n].lo = info->dlpi_addr + ph->p_vaddr;
        c->out[c->n].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        c->n++;
    }
    return 0;
}

/* Not held across fork(): a refresh interrupted by fork left whole
 * double-buffered state behind (registered by fork_order.c). */
void mh_caller_fork_child(void) { pthread_mutex_init(&g_refresh_lock, NULL); }

static void refresh_cuda_text(void)
{
    pthread_mutex_lock(&g_refresh_lock);
    uint32_t next = (__atomic_load_n(&mh_cuda_text_state, __ATOMIC_RELAXED) >> 8) ^ 1;
    collect_state c = {.out = mh_cuda_text[next] + 1, .n = 0};
    dl_iterate_phdr(collect, &c);
    mh_text_range box = {.lo = UINTPTR_MAX, .hi = 0};
    for (uint32_t i = 0; i < c.n; i++) {
        if (c.out[i].lo < box.lo)
            box.lo = c.out[i].lo;
        if (c.out[i].hi > box.hi)
            box.hi = c.out[i].hi;
    }
    mh_cuda_text[next][0] = c.n ? box : (mh_text_range){0, 0};
    __atomic_store_n(&mh_cuda_text_state, next << 8 | c.n, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_refresh_lock);
}

void mh_caller_at_load(void)
{
    mh_objects_observe(refresh_cuda_text);
}
