/*
 * island.c - executable memory mapped within +-2 GiB of a patch target, for
 * trampolines and far-jump slots.
 *
 * A page holds many trampolines, so a page that is already executing code
 * must receive new code without ever being writable+executable and without
 * ever losing PROT_EXEC (another thread may be running a trampoline on it).
 * Hence two ways to back a page:
 *
 *   memfd (preferred): the page is a MAP_SHARED R+X view of a memfd.  New
 *     bytes are written through a transient RW mapping of the same file
 *     offset, unmapped right after the copy: at rest the only mapping is R+X,
 *     and no single mapping is ever W+X.  The new bytes are only reached
 *     after the patch that publishes them has synced every core.
 *   anonymous (fallback when memfd cannot be created or mapped executable):
 *     the page is mapped RW, filled once, then mprotect'ed R+X and sealed:
 *     it never receives code again.  One page per commit.
 *
 * Placement: the nearest free gap of /proc/self/maps to the target, mapped
 * with MAP_FIXED_NOREPLACE (a result elsewhere is treated as a miss on
 * kernels that take the flag as a hint).  Pages are reused for any later
 * target within MH_ISLAND_NEAR.  Island memory is never unmapped: a thread
 * may be inside a trampoline of a patch that has already been removed.
 *
 * All functions run with the bistro mutex held.
 */
#include "bistro.h"
#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 1U
#endif

typedef struct mh_island_page {
    struct mh_island_page *next;
    uint64_t addr;   /* the R+X (or, before sealing, RW anonymous) view */
    size_t used;
    off_t off;       /* offset in the memfd, or -1 for an anonymous page */
    bool sealed;     /* takes no more code */
} mh_island_page;

/* Process-wide: code pages serve every patch in the process (one address
 * space), and the memfd behind them is shared by all pages.  Guarded by
 * patch.c's install mutex (callers hold it). */
static mh_island_page *g_pages;
static int g_memfd = -1;
static off_t g_memfd_size;
static bool g_memfd_broken;
static size_t g_page;

#define USER_TOP 0x7ffffffff000ULL
#define USER_BOTTOM 0x10000ULL

static size_t page_size(void)
{
    if (g_page == 0) {
        long ps = sysconf(_SC_PAGESIZE);
        g_page = ps > 0 ? (size_t)ps : 4096;
    }
    return g_page;
}

static uint64_t dist(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

#define MAX_CANDIDATES 16

/* The walk over /proc/self/maps: the free gap before each mapping in turn. */
typedef struct gap_walk {
    uint64_t near, ps;
    uint64_t *cand;
    uint64_t dists[MAX_CANDIDATES];
    int n;
    uint64_t prev_end;
    bool prev_heap;
    bool stopped;  /* a mapping at or past USER_TOP ended the walk */
} gap_walk;

/* The gap [w->prev_end, start): its page nearest to w->near, kept when it is
 * within reach and among the MAX_CANDIDATES nearest so far. */
static void gap_consider(gap_walk *w, uint64_t start)
{
    uint64_t ps = w->ps, near = w->near;
    uint64_t gap_lo = w->prev_end, gap_hi = start;
    if (w->prev_heap)
        gap_lo += (uint64_t)64 << 20; /* leave room for brk to grow */
    if (gap_hi > USER_TOP)
        gap_hi = USER_TOP;
    if (gap_lo < gap_hi && gap_hi - gap_lo >= ps) {
        uint64_t c;
        if (near <= gap_lo)
            c = gap_lo;
        else if (near >= gap_hi)
            c = gap_hi - ps;
        else
            c = near & ~(ps - 1);
        uint64_t d = dist(c, near);
        if (d < MH_ISLAND_NEAR) {
            /* insertion into the sorted candidate list */
            int i = -1;
            if (w->n < MAX_CANDIDATES)
                i = w->n++;
            else if (d < w->dists[MAX_CANDIDATES - 1])
                i = MAX_CANDIDATES - 1;
            if (i >= 0) {
                while (i > 0 && w->dists[i - 1] > d) {
                    w->dists[i] = w->dists[i - 1];
                    w->cand[i] = w->cand[i - 1];
                    i--;
                }
                w->dists[i] = d;
                w->cand[i] = c;
            }
        }
    }
}

static bool gap_line(const mh_map_entry *e, void *ctx)
{
    gap_walk *w = ctx;
    gap_consider(w, e->start);
    if (e->start >= USER_TOP) {
        w->stopped = true;
        return false;
    }
    if (e->end > w->prev_end)
        w->prev_end = e->end;
    w->prev_heap = strstr(e->name, "[heap]") != NULL;
    return true;
}

/* Up to MAX_CANDIDATES page addresses in free gaps, nearest to `near` first. */
static int near_candidates(uint64_t near, uint64_t cand[MAX_CANDIDATES])
{
    gap_walk w = {.near = near, .ps = page_size(), .cand = cand, .prev_end = USER_BOTTOM};
    if (mh_maps_each(gap_line, &w) != 0)
        return 0;
    if (!w.stopped)
        gap_consider(&w, USER_TOP); /* the gap above the last mapping */
    return w.n;
}

/* Map one page at exactly `at` (or anywhere when at == 0).  Returns the
 * address or MAP_FAILED with *err set. */
static void *map_page_at(uint64_t at, bool use_memfd, off_t off, int *err)
{
    size_t ps = page_size();
    int flags = at ? MAP_FIXED_NOREPLACE : 0;
    void *p;
    if (use_memfd)
        p = mmap((void *)(uintptr_t)at, ps, PROT_READ | PROT_EXEC, MAP_SHARED | flags, g_memfd, off);
    else
        p = mmap((void *)(uintptr_t)at, ps, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    if (p == MAP_FAILED) {
        *err = errno;
        return MAP_FAILED;
    }
    if (at && (uint64_t)(uintptr_t)p != at) { /* flag taken as a hint */
        munmap(p, ps);
        *err = EEXIST;
        return MAP_FAILED;
    }
    return p;
}

static bool memfd_ready(void)
{
    if (g_memfd_broken)
        return false;
    if (g_memfd < 0) {
#ifdef SYS_memfd_create
        g_memfd = (int)syscall(SYS_memfd_create, "memhook-bistro", MFD_CLOEXEC);
#else
        g_memfd = memfd_create("memhook-bistro", MFD_CLOEXEC);
#endif
        if (g_memfd < 0) {
            g_memfd_broken = true;
            return false;
        }
        g_memfd_size = 0;
    }
    return true;
}

static mh_island_page *new_page(uint64_t near, int *err)
{
    uint64_t cand[MAX_CANDIDATES];
    int n = near ? near_candidates(near, cand) : 0;
    size_t ps = page_size();
    bool use_memfd = memfd_ready();
    off_t off = -1;
    if (use_memfd) {
        off = g_memfd_size;
        if (ftruncate(g_memfd, off + (off_t)ps) != 0) {
            use_memfd = false;
            off = -1;
        }
    }
    *err = ENOMEM;
    for (int attempt = 0; attempt < 2; attempt++) {
        void *p = MAP_FAILED;
        for (int i = 0; i < n && p == MAP_FAILED; i++) {
            p = map_page_at(cand[i], use_memfd, off, err);
            if (p == MAP_FAILED && *err != EEXIST && *err != ENOMEM)
                break; /* a permission problem: the same everywhere */
        }
        if (p == MAP_FAILED && near == 0)
            p = map_page_at(0, use_memfd, off, err);
        if (p != MAP_FAILED) {
            mh_island_page *pg = calloc(1, sizeof *pg);
            if (!pg) {
                munmap(p, ps);
                *err = ENOMEM;
                return NULL;
            }
            pg->addr = (uint64_t)(uintptr_t)p;
            pg->off = off;
            if (use_memfd)
                g_memfd_size = off + (off_t)ps;
            pg->next = g_pages;
            g_pages = pg;
            return pg;
        }
        if (!use_memfd || *err == EEXIST || *err == ENOMEM)
            break;
        /* The memfd cannot be mapped executable here: anonymous fallback. */
        g_memfd_broken = true;
        use_memfd = false;
        off = -1;
    }
    return NULL;
}

int mh_island_reserve(uint64_t near, size_t size, mh_island_chunk *out)
{
    size_t ps = page_size();
    size = (size + 15) & ~(size_t)15;
    if (size > ps)
        return EINVAL;
    mh_island_page *pg = NULL;
    for (mh_island_page *p = g_pages; p; p = p->next) {
        if (p->sealed || ps - p->used < size)
            continue;
        if (near && dist(p->addr, near) >= MH_ISLAND_NEAR)
            continue;
        if (!pg || (near && dist(p->addr, near) < dist(pg->addr, near)))
            pg = p;
    }
    if (!pg) {
        int err;
        pg = new_page(near, &err);
        if (!pg)
            return err;
    }
    out->addr = pg->addr + pg->used;
    out->size = size;
    out->page = pg;
    pg->used += size;
    return 0;
}

void mh_island_shrink(mh_island_chunk *chunk, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    mh_island_page *pg = chunk->page;
    if (size < chunk->size && chunk->addr + chunk->size == pg->addr + pg->used) {
        pg->used -= chunk->size - size;
        chunk->size = size;
    }
}

void mh_island_release(mh_island_chunk *chunk)
{
    mh_island_page *pg = chunk->page;
    if (pg && chunk->addr + chunk->size == pg->addr + pg->used)
        pg->used -= chunk->size;
    chunk->size = 0;
}

int mh_island_commit(mh_island_chunk *chunk, const void *bytes, size_t len)
{
    mh_island_page *pg = chunk->page;
    size_t ps = page_size();
    if (len > chunk->size || pg->sealed)
        return EINVAL;
    size_t in_page = (size_t)(chunk->addr - pg->addr);
    if (pg->off >= 0) {
        void *alias = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_SHARED, g_memfd, pg->off);
        if (alias == MAP_FAILED)
            return errno;
        memcpy((uint8_t *)alias + in_page, bytes, len);
        munmap(alias, ps);
        return 0;
    }
    memcpy((void *)(uintptr_t)chunk->addr, bytes, len);
    if (mprotect((void *)(uintptr_t)pg->addr, ps, PROT_READ | PROT_EXEC) != 0) {
        int err = errno;
        memset((void *)(uintptr_t)chunk->addr, MH_ARCH_TRAP_BYTE, len);
        return err;
    }
    pg->sealed = true;
    return 0;
}

void mh_island_atfork_child(void)
{
    /* The memfd (and so every memfd page) is shared with the parent: a child
     * appending to it would overwrite code the parent hands out later.  The
     * child keeps using the existing code and maps its own pages. */
    for (mh_island_page *p = g_pages; p; p = p->next)
        p->sealed = true;
    if (g_memfd >= 0)
        close(g_memfd);
    g_memfd = -1;
    g_memfd_size = 0;
}
