/*
 * trace_escape.c - programs a traced process starts that the core cannot
 * follow into, found before the exec and told to the collector.
 *
 * The kernel decides at exec whether the loader may honour LD_PRELOAD:
 *   - AT_SECURE: the new image gains privileges (a set-user-ID or
 *     set-group-ID file whose ids differ from the caller's real ones, or
 *     file capabilities for a caller that is not root), and the loader
 *     then ignores preloads given as paths - the trace's;
 *   - no loader at all: an ELF without PT_INTERP (static, static-pie);
 *   - a loader for another ABI: an ELF of another class or machine.
 * The last two are escapes only for a program that names a CUDA library
 * (names_cuda): one that cannot load the driver makes no call to miss,
 * and what it starts gets the environment it passes on, trace included.
 * A set-ID program always is: it and everything it starts (sudo's
 * command) run without the trace.
 * A "#!" script runs its interpreter, which is checked in its place (as
 * the kernel does, a few levels deep).  The set-ID bits do nothing on a
 * nosuid mount or under no_new_privs, and are not counted there.
 *
 * What cannot be read (an execute-only file) or is no program (the exec
 * fails, or execvp hands it to /bin/sh, which is traced) is not reported:
 * a report names a program that is about to run untraced.  The check must
 * come before the exec (after it, this code is gone), so an exec that
 * fails after it (E2BIG, a file replaced in between) leaves a report of a
 * program that did not start: a false alarm, never a silent loss.
 *
 * The report is one SOCK_SEQPACKET message on a connection of its own, as
 * HELLO is.  It is the one place the traced side waits on the collector:
 * up to ESCAPE_WAIT_MS while its listen queue is full; then it gives up,
 * and that escape goes unsaid.
 * Everything is a plain system call on the caller's stack: it runs in a
 * vfork child too (trace_exec.h).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "trace_exec.h"
#include "trace_proto.h"

#define ESCAPE_WAIT_MS 1000
#define SHEBANG_DEPTH 4   /* the kernel's own limit of interpreter levels */
#define PHDR_MAX 64       /* program headers read (PT_INTERP comes early) */

/* Whether exec'ing the file (open as fd) raises privileges: AT_SECURE. */
static bool secure_exec(int fd, const struct stat *st)
{
    bool setuid = (st->st_mode & S_ISUID) != 0;
    /* set-group-ID without group execute is mandatory locking, not an id */
    bool setgid = (st->st_mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP);
    struct statfs fs;
    if ((setuid || setgid) &&
        ((fstatfs(fd, &fs) == 0 && (fs.f_flags & ST_NOSUID)) ||
         prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1))
        setuid = setgid = false;
    uid_t euid = setuid ? st->st_uid : geteuid();
    gid_t egid = setgid ? st->st_gid : getegid();
    if (euid != getuid() || egid != getgid())
        return true;
    /* File capabilities raise a non-root caller's; root has them all. */
    return getuid() != 0 && fgetxattr(fd, "security.capability", NULL, 0) > 0;
}

/* The x86-64 ABI's path of the loader, which has no PT_INTERP of its own
 * but honours LD_PRELOAD when run as a program (`ld.so ./prog`).  Its
 * identity is taken at load, read-only after. */
#define LOADER_PATH "/lib64/ld-linux-x86-64.so.2"
static dev_t loader_dev;
static ino_t loader_ino;

void mh_trace_escape_at_load(void)
{
    struct stat st;
    if (stat(LOADER_PATH, &st) == 0) {
        loader_dev = st.st_dev;
        loader_ino = st.st_ino;
    }
}

/* Whether the file names a CUDA library ("libcuda": the driver, and the
 * runtime that loads it): a program that cannot load the core but never
 * loads CUDA has nothing for the trace to miss.  Without it, every static
 * helper would count (ctypes.util.find_library runs the static ldconfig
 * in every Python program that looks for libcuda).  Read in chunks on the
 * stack, each overlapping the last by the name's length. */
#define CUDA_NAME "libcuda"
#define SCAN_CHUNK 8192

static bool names_cuda(int fd)
{
    char buf[SCAN_CHUNK];
    const size_t keep = sizeof CUDA_NAME - 2;
    off_t at = 0;
    for (;;) {
        ssize_t got = pread(fd, buf, sizeof buf, at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return false;
        if (memmem(buf, (size_t)got, CUDA_NAME, sizeof CUDA_NAME - 1) != NULL)
            return true;
        if ((size_t)got <= keep)
            return false;
        at += got - (ssize_t)keep;
    }
}

/* Why the ELF in fd would run without the core, or 0. */
static unsigned elf_escape(int fd, const struct stat *st, const Elf64_Ehdr *eh)
{
    if (st->st_ino == loader_ino && st->st_dev == loader_dev)
        return 0;
    if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_machine != EM_X86_64)
        return names_cuda(fd) ? MH_TRACE_ESCAPE_FOREIGN : 0;
    if (eh->e_type != ET_EXEC && eh->e_type != ET_DYN)
        return 0;  /* not a program: the exec fails */
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum == 0)
        return 0;
    Elf64_Phdr ph[PHDR_MAX];
    size_t n = eh->e_phnum < PHDR_MAX ? eh->e_phnum : PHDR_MAX;
    ssize_t got = pread(fd, ph, n * sizeof ph[0], (off_t)eh->e_phoff);
    if (got < 0)
        return 0;
    n = (size_t)got / sizeof ph[0];
    for (size_t i = 0; i < n; i++)
        if (ph[i].p_type == PT_INTERP)
            return 0;
    bool whole = n == (eh->e_phnum < PHDR_MAX ? eh->e_phnum : PHDR_MAX);
    return whole && names_cuda(fd) ? MH_TRACE_ESCAPE_STATIC : 0;
}

/* Why the program at (dirfd, path) would run without the core, or 0; a
 * script's interpreter is checked in its place (its path into `who`). */
static unsigned program_escape(int dirfd, const char *path, int at_flags, char *who,
                               size_t cap)
{
    char interp[256];
    for (int depth = 0; depth <= SHEBANG_DEPTH; depth++) {
        int fd = (at_flags & AT_EMPTY_PATH) && path[0] == '\0'
                     ? dup(dirfd)
                     : openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK |  /* a FIFO */
                                  ((at_flags & AT_SYMLINK_NOFOLLOW) ? O_NOFOLLOW : 0));
        if (fd < 0)
            return 0;
        struct stat st;
        union {
            Elf64_Ehdr eh;
            char text[256];
        } head;
        ssize_t got = -1;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            got = pread(fd, &head, sizeof head, 0);
        bool script = got >= 2 && head.text[0] == '#' && head.text[1] == '!';
        unsigned why = 0;
        /* A script's own set-ID bits are ignored; its interpreter's are not. */
        if (got >= 0 && !script && secure_exec(fd, &st))
            why = MH_TRACE_ESCAPE_SECURE;
        else if (got >= (ssize_t)sizeof head.eh &&
                 memcmp(head.eh.e_ident, ELFMAG, SELFMAG) == 0)
            why = elf_escape(fd, &st, &head.eh);
        close(fd);
        if (!script)
            return why;
        /* "#!" [blanks] interpreter [blanks arg] newline */
        size_t i = 2, end = (size_t)got;
        while (i < end && (head.text[i] == ' ' || head.text[i] == '\t'))
            i++;
        size_t len = 0;
        while (i + len < end && head.text[i + len] != ' ' && head.text[i + len] != '\t' &&
               head.text[i + len] != '\n' && head.text[i + len] != '\0')
            len++;
        if (len == 0 || len >= sizeof interp || i + len == end)
            return 0;  /* no interpreter, or a line longer than we read */
        memcpy(interp, head.text + i, len);
        interp[len] = '\0';
        if (len < cap)
            memcpy(who, interp, len + 1);
        path = interp;
        dirfd = AT_FDCWD;
        at_flags = 0;
    }
    return 0;
}

void mh_trace_escape_report(unsigned why, const char *path)
{
    const char *sock = mh_trace_socket_path();
    if (sock == NULL || strlen(sock) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, sock, strlen(sock) + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    /* A Unix connect waits for room in the listen queue up to SO_SNDTIMEO. */
    struct timeval wait = {.tv_sec = ESCAPE_WAIT_MS / 1000,
                           .tv_usec = (ESCAPE_WAIT_MS % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait);
    int rc;
    do
        rc = connect(fd, (const struct sockaddr *)&addr, sizeof addr);
    while (rc != 0 && errno == EINTR);
    if (rc == 0) {
        mh_trace_header h = {.magic = MH_TRACE_MAGIC, .version = MH_TRACE_VERSION,
                             .type = MH_TRACE_ESCAPE, .count = why};
        size_t len = strnlen(path, 4096);
        struct iovec iov[2] = {{.iov_base = &h, .iov_len = sizeof h},
                               {.iov_base = (void *)path, .iov_len = len}};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
        while (sendmsg(fd, &m, MSG_NOSIGNAL) < 0 && errno == EINTR) {
        }
    }
    close(fd);
}

bool mh_trace_escape_check(int dirfd, const char *path, int at_flags, unsigned spawned)
{
    if (mh_trace_socket_path() == NULL || path == NULL)
        return false;
    int saved = errno;
    char who[256] = "";
    unsigned why = program_escape(dirfd, path, at_flags, who, sizeof who);
    if (why != 0) {
        char fdpath[64], target[4096];
        const char *name = path;
        if (path[0] == '\0') {
            /* fexecve / execveat(AT_EMPTY_PATH): the file the descriptor holds */
            char num[16], *p = num + sizeof num;
            *--p = '\0';
            unsigned v = (unsigned)dirfd;
            do
                *--p = (char)('0' + v % 10);
            while ((v /= 10) != 0);
            strcpy(fdpath, "/proc/self/fd/");
            strcat(fdpath, p);
            ssize_t n = readlink(fdpath, target, sizeof target - 1);
            if (n > 0) {
                target[n] = '\0';
                name = target;
            }
        }
        if (who[0] != '\0')
            name = who;  /* a script: the program that escapes is its interpreter */
        mh_trace_escape_report(why | spawned, name);
    }
    errno = saved;
    return why != 0;
}

bool mh_trace_exec_search(const char *file, char *buf, size_t cap)
{
    if (file == NULL || *file == '\0' || strchr(file, '/') != NULL)
        return false;
    extern char **environ;
    const char *path = NULL;
    for (char **e = environ; e != NULL && *e != NULL; e++)
        if (strncmp(*e, "PATH=", 5) == 0) {
            path = *e + 5;
            break;
        }
    if (path == NULL)
        path = "/bin:/usr/bin";  /* glibc's execvp default (confstr _CS_PATH) */
    size_t flen = strlen(file);
    for (const char *p = path;; p++) {
        const char *end = strchrnul(p, ':');
        size_t dlen = (size_t)(end - p);
        if (dlen + 1 + flen < cap) {
            if (dlen == 0) {
                memcpy(buf, file, flen + 1);  /* an empty entry: the current folder */
            } else {
                memcpy(buf, p, dlen);
                buf[dlen] = '/';
                memcpy(buf + dlen + 1, file, flen + 1);
            }
            struct stat st;
            if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
                return true;
        }
        if (*end == '\0')
            return false;
        p = end;
    }
}
