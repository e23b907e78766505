/*
 * caller.c - the frame-pointer walks behind an event's caller and
 * `memhook trace --stacks`, and the snapshot of CUDA's text ranges
 * (caller.h says what they are for).
 *
 * A walk reads only words inside the calling thread's stack, between its
 * current frame and the stack's top, each frame strictly above the one
 * before: every read is of mapped memory whatever the chain holds, and the
 * walk ends.  The bounds come from pthread_getattr_np once per thread, at
 * its first walk (it may allocate; every later walk is loads and compares).
 */
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "caller.h"
#include "cuda_hooks.h"
#include "trace_lane.h"

__thread mh_caller_site mh_caller_tl __attribute__((tls_model("initial-exec")));

/* Process-wide by nature: which text is CUDA's is a property of the
 * process's mappings.  Written under g_refresh_lock only. */
mh_text_range mh_cuda_text[2][MH_CUDA_RANGES + 1];
_Atomic uint32_t mh_cuda_text_state;
static pthread_mutex_t g_refresh_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

/* The calling thread's stack: [lo, hi); state 0 unknown, 1 known, 2 none. */
static __thread struct {
    uintptr_t lo, hi;
    int state;
} t_stack __attribute__((tls_model("initial-exec")));

static bool stack_bounds(uintptr_t *lo, uintptr_t *hi)
{
    if (__builtin_expect(t_stack.state == 0, 0)) {
        pthread_attr_t attr;
        void *addr = NULL;
        size_t size = 0;
        t_stack.state = 2;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &size) == 0 && size != 0) {
                t_stack.lo = (uintptr_t)addr;
                t_stack.hi = (uintptr_t)addr + size;
                t_stack.state = 1;
            }
            pthread_attr_destroy(&attr);
        }
    }
    *lo = t_stack.lo;
    *hi = t_stack.hi;
    return t_stack.state == 1;
}

/* The frame above `fp`, or 0 where the chain leaves the stack or does not
 * climb: fp must be a word-aligned frame strictly below the next. */
static uintptr_t next_frame(uintptr_t fp, uintptr_t hi)
{
    uintptr_t up = ((const uintptr_t *)fp)[0];
    if (up <= fp || (up & 7) != 0 || up > hi - 2 * sizeof(uintptr_t))
        return 0;
    return up;
}

static bool frame_ok(uintptr_t fp, uintptr_t lo, uintptr_t hi)
{
    return fp >= lo && (fp & 7) == 0 && fp <= hi - 2 * sizeof(uintptr_t);
}

uint64_t mh_caller_walk(const mh_caller_site *site)
{
    uintptr_t lo, hi;
    uintptr_t ra = site->ra, fp = site->fp;
    if (!stack_bounds(&lo, &hi) || !frame_ok(fp, lo, hi))
        return ra;
    /* The wrapper's frame is below every frame the walk reads. */
    for (int i = 0; i < 64 && mh_in_cuda_text(ra); i++) {
        fp = next_frame(fp, hi);
        if (fp == 0)
            break;
        uintptr_t up_ra = ((const uintptr_t *)fp)[1];
        if (up_ra == 0)
            break;
        ra = up_ra;
    }
    return ra;
}

unsigned mh_stack_walk(const mh_caller_site *site, uint64_t *out, unsigned depth)
{
    uintptr_t lo, hi;
    uintptr_t fp = site->fp;
    unsigned n = 0;
    if (depth == 0)
        return 0;
    out[n++] = site->ra;
    if (!stack_bounds(&lo, &hi) || !frame_ok(fp, lo, hi))
        return n;
    while (n < depth) {
        fp = next_frame(fp, hi);
        if (fp == 0)
            break;
        uintptr_t ra = ((const uintptr_t *)fp)[1];
        if (ra == 0)
            break;
        out[n++] = ra;
    }
    return n;
}

/* ---- the snapshot of CUDA's text ---- */

static bool is_cuda_own(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    return strncmp(base, "libcuda.so", 10) == 0 || strncmp(base, "libcudart.so", 12) == 0;
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

static void refresh_child(void) { pthread_mutex_init(&g_refresh_lock, NULL); }
static void register_atfork(void) { pthread_atfork(NULL, NULL, refresh_child); }

void mh_objects_changed(void)
{
    pthread_once(&g_atfork_once, register_atfork);
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
    mh_trace_modules_sync();
}

void mh_objects_changed_by_dl(void)
{
    if (atomic_load_explicit(&mh_trace_on, memory_order_relaxed))
        mh_objects_changed();
}
