/* procfs.c - the /proc/self/maps walk and the resume-pc reader (procfs.h
 * says who needs them and why they must not allocate). */
#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static bool parse_hex(const char **p, uintptr_t *out)
{
    uintptr_t v = 0;
    const char *s = *p;
    for (;; s++) {
        char c = *s;
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            break;
        v = (v << 4) | (uintptr_t)d;
    }
    bool any = s != *p;
    *p = s;
    *out = v;
    return any;
}

/* "start-end perms offset dev inode   name": fills e; false when the line
 * is not one (then it is skipped). */
static bool parse_line(const char *s, mh_map_entry *e)
{
    if (!parse_hex(&s, &e->start) || *s++ != '-' || !parse_hex(&s, &e->end) || *s++ != ' ')
        return false;
    if (strnlen(s, 4) < 4)
        return false;
    e->prot = (s[0] == 'r' ? PROT_READ : 0) | (s[1] == 'w' ? PROT_WRITE : 0) |
              (s[2] == 'x' ? PROT_EXEC : 0);
    s += 4;
    for (int field = 0; field < 3; field++) {  /* offset, dev, inode */
        while (*s == ' ')
            s++;
        while (*s != ' ' && *s != '\0')
            s++;
    }
    while (*s == ' ')
        s++;
    e->name = s;
    return true;
}

int mh_maps_each(mh_maps_fn fn, void *ctx)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    char buf[MH_MAPS_LINE_MAX];
    size_t have = 0;
    bool skipping = false;  /* dropping the tail of a line cut short */
    bool go = true;
    int err = 0;
    mh_map_entry e;
    while (go) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err = errno;
            break;
        }
        if (n == 0) {
            buf[have] = '\0';  /* a last line without its newline */
            if (have != 0 && !skipping && parse_line(buf, &e))
                fn(&e, ctx);
            break;
        }
        have += (size_t)n;
        char *line = buf, *end = buf + have, *nl;
        while (go && (nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
            *nl = '\0';
            if (!skipping && parse_line(line, &e))
                go = fn(&e, ctx);
            skipping = false;
            line = nl + 1;
        }
        have = (size_t)(end - line);
        memmove(buf, line, have);
        if (go && have == sizeof buf - 1) {
            /* A line longer than the buffer: its fields come first, so it
             * is whole but for its name; the rest of it is dropped. */
            buf[have] = '\0';
            if (!skipping && parse_line(buf, &e))
                go = fn(&e, ctx);
            skipping = true;
            have = 0;
        }
    }
    close(fd);
    return err;
}

int mh_task_resume_pc(int tid, uint64_t *pc, uint64_t *sp)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? ESRCH : errno;
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    int err = n < 0 ? errno : 0;
    close(fd);
    if (err)
        return err;
    if (n <= 0)
        return EIO;
    buf[n] = '\0';
    if (strncmp(buf, "running", 7) == 0)
        return EAGAIN;
    /* "nr [6 args] sp pc" (nr -1: blocked outside a system call, then
     * only "sp pc"): the last two fields. */
    char *end = buf + n;
    while (end > buf && (end[-1] == '\n' || end[-1] == ' '))
        *--end = '\0';
    char *last = strrchr(buf, ' ');
    if (!last || strncmp(last + 1, "0x", 2) != 0)
        return EIO;
    *last = '\0';
    char *prev = strrchr(buf, ' ');
    if (!prev || strncmp(prev + 1, "0x", 2) != 0)
        return EIO;
    const char *s = last + 3, *t = prev + 3;
    uintptr_t v, w;
    if (!parse_hex(&s, &v) || *s != '\0' || !parse_hex(&t, &w) || *t != '\0')
        return EIO;
    *pc = (uint64_t)v;
    if (sp)
        *sp = (uint64_t)w;
    return 0;
}

long long mh_task_switches(int tid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n;
    do
        n = read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    long long total = 0;
    int found = 0;
    static const char *const keys[2] = {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"};
    for (int k = 0; k < 2; k++) {
        const char *at = strstr(buf, keys[k]);
        /* "voluntary_..." is also the tail of "nonvoluntary_...": the line's own */
        while (at && at != buf && at[-1] != '\n')
            at = strstr(at + 1, keys[k]);
        if (!at)
            continue;
        at += strlen(keys[k]);
        while (*at == ' ' || *at == '\t')
            at++;
        long long v = 0;
        while (*at >= '0' && *at <= '9')
            v = v * 10 + (*at++ - '0');
        total += v;
        found++;
    }
    return found == 2 ? total : -1;
}
