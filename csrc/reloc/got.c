/*
 * got.c - write one GOT (or data) slot of a loaded object.
 *
 * The protection of the slot's page comes from a snapshot of
 * /proc/self/maps taken for the batch (one read per walk, not per slot), so
 * it is whatever the loader left there: PROT_READ for a RELRO page once
 * relocation is done, PROT_READ|PROT_WRITE for .got.plt under partial RELRO
 * or .data.  A writable page is stored to directly.  A read-only page is
 * made writable for that one page only, stored to, and given back exactly
 * the protection it had, so RELRO stays read-only.  /proc/self/maps is not read atomically: while
 * other threads map and unmap, a line can be missed; the protection then
 * comes from the object's program headers (PT_GNU_RELRO -> PROT_READ, else
 * its PT_LOAD's flags).  The store is one atomic
 * 8-byte release store: other threads may be calling through the slot and
 * see either the old or the new pointer, never a torn one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "procfs.h"
#include "reloc_int.h"

/* A snapshot being built from the core's reader (not a hook path: it may
 * allocate). */
typedef struct maps_build {
    mh_maps *maps;
    size_t cap;
    int err;
} maps_build;

static bool maps_add(const mh_map_entry *e, void *ctx)
{
    maps_build *b = ctx;
    mh_maps *maps = b->maps;
    if (maps->count == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        struct mh_map_range *grown = realloc(maps->ranges, cap * sizeof(*grown));
        if (grown == NULL) {
            b->err = ENOMEM;
            return false;
        }
        maps->ranges = grown;
        b->cap = cap;
    }
    maps->ranges[maps->count++] = (struct mh_map_range){e->start, e->end, e->prot};
    return true;
}

int mh_maps_read(mh_maps *maps)
{
    maps->ranges = NULL;
    maps->count = 0;
    maps_build b = {maps, 0, 0};
    int err = mh_maps_each(maps_add, &b);
    if (err == 0)
        err = b.err;
    if (err != 0)
        mh_maps_free(maps);
    return err;
}

void mh_maps_free(mh_maps *maps)
{
    free(maps->ranges);
    maps->ranges = NULL;
    maps->count = 0;
}

int mh_maps_prot(const mh_maps *maps, uintptr_t addr)
{
    size_t lo = 0, hi = maps->count;   /* the kernel lists ranges in order */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < maps->ranges[mid].start)
            hi = mid;
        else if (addr >= maps->ranges[mid].end)
            lo = mid + 1;
        else
            return maps->ranges[mid].prot;
    }
    return -1;
}

int mh_got_write(const mh_maps *maps, void **slot, void *value, int elf_prot)
{
    if (((uintptr_t)slot & (sizeof(void *) - 1)) != 0)
        return EINVAL;
    int prot = mh_maps_prot(maps, (uintptr_t)slot);
    if (prot < 0)
        prot = elf_prot;   /* a line the non-atomic read of maps missed */
    if (prot < 0)
        return EFAULT;
    if (*slot == value)
        return 0;
    if (prot & PROT_WRITE) {
        __atomic_store_n(slot, value, __ATOMIC_RELEASE);
        return 0;
    }
    uintptr_t page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *page = (void *)((uintptr_t)slot & ~(page_size - 1));
    if (mprotect(page, page_size, prot | PROT_READ | PROT_WRITE) != 0) {
        int err = errno;
        mh_warn("reloc: mprotect(%p, RW) for slot %p failed: %s", page, (void *)slot,
                strerror(err));
        return err;
    }
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    if (mprotect(page, page_size, prot) != 0) {
        int err = errno;
        mh_error("reloc: could not restore protection of %p: %s", page, strerror(err));
        return err;
    }
    return 0;
}
