/*
 * trace_popen.c - popen() in a traced process: the shell it starts is
 * announced to the collector (EXPECT) before popen returns.
 *
 * glibc's popen spawns `/bin/sh -c CMD` through its internal posix_spawn
 * (a CLONE_VFORK child that runs no fork handler and reaches no
 * interposed name), so nothing tells the collector of the shell until its
 * own core has connected; a parent that exits first could end the trace
 * without it (docs/design/trace-children.md).  popen is replaced here:
 * libc's runs, then the child it made is announced with a pidfd.
 *
 * The child's pid is the one glibc's pclose waits for: the field after
 * the FILE in glibc's popen stream (libio/iopopen.c's _IO_proc_file, a
 * layout kept since it had to match libstdc++'s procbuf).  The number is
 * not trusted: a pidfd is opened on it, then the kernel is asked whether
 * that process is a child of this one (waitid with WNOWAIT, which leaves
 * its status to pclose).  A layout that differed would give a number that
 * is not a child here, and nothing is sent: the behaviour before this
 * file, never an EXPECT for a stranger.  Each stream holds its own pid,
 * so threads that popen at once each announce their own child.
 *
 * Not tracing (a plain LD_PRELOAD of the core): libc's popen, nothing
 * else.  system() is not replaced: it waits for the shell, which has
 * connected from its own load before it ran the command.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mh_visibility.h"
#include "trace_exec.h"
#include "trace_proto.h"

extern char **environ;

typedef FILE *(*popen_fn)(const char *, const char *);

/* libc's popen, found at load and read-only after; process-wide, as the
 * function is.  `glibc`: it is glibc's own, whose stream layout is read
 * below - not another preload's, which may return a stream of its own. */
static struct {
    popen_fn popen;
    bool glibc;
} real;

void mh_trace_popen_at_load(void)
{
    real.popen = (popen_fn)(uintptr_t)dlsym(RTLD_NEXT, "popen");
    void *glibc_only = dlsym(RTLD_NEXT, "gnu_get_libc_version");
    Dl_info in_popen, in_glibc;
    real.glibc = real.popen != NULL && glibc_only != NULL &&
                 dladdr((void *)(uintptr_t)real.popen, &in_popen) != 0 &&
                 dladdr(glibc_only, &in_glibc) != 0 &&
                 in_popen.dli_fbase == in_glibc.dli_fbase;
}

/* The shell glibc's popen runs (its _PATH_BSHELL). */
#define POPEN_SHELL "/bin/sh"

#ifndef P_PIDFD
#define P_PIDFD 3 /* (Linux 5.4) */
#endif

/* The start of glibc's popen stream: the FILE, its jump table, the pid. */
struct glibc_popen_stream {
    FILE file;
    const void *jumps;
    pid_t pid;
};

/* A pidfd of the child glibc's popen made for `fp`, or -1 when the
 * stream's pid is not a child of this process (any more). */
static int popen_child(FILE *fp)
{
    pid_t pid;
    memcpy(&pid, (const char *)fp + offsetof(struct glibc_popen_stream, pid), sizeof pid);
    if (pid <= 0)
        return -1;
    int pidfd = mh_trace_pidfd_open(pid);
    if (pidfd < 0)
        return -1;  /* no pidfds, or reaped already: nothing left to wait for */
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc = waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG | WNOWAIT);
    if (rc != 0 && errno == EINVAL)  /* (Linux 5.3: pidfds, but no P_PIDFD) */
        rc = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
    if (rc != 0) {
        close(pidfd);
        return -1;
    }
    return pidfd;
}

/* Whether the shell popen starts will say HELLO here.  It gets this
 * process's own environment, unmended: it connects when that still
 * preloads the core and names this trace's socket (a knob the program
 * dropped only sets the shell's default), not when the program removed
 * them or names another trace's collector.  And the shell itself may run
 * without the core (told to the collector, as a spawn's program is). */
static bool shell_will_say_hello(void)
{
    mh_env_plan plan;
    (void)mh_trace_env_plan(environ, &plan);
    if (plan.foreign || plan.add_socket || plan.own[0] != NULL)  /* own[0]: LD_PRELOAD's */
        return false;
    return !mh_trace_escape_check(AT_FDCWD, POPEN_SHELL, 0, MH_TRACE_ESCAPE_SPAWNED);
}

/* The calls made here around libc's popen (open, read, waitid, connect,
 * sendmsg, close) are cancellation points, and are held off: before the
 * spawn a cancel would unwind past a descriptor of ours still open; after
 * it (where libc's popen has none) it would lose the stream, and the
 * shell with it, to a caller that cannot pclose what it never got. */
MH_INTERPOSE FILE *popen(const char *command, const char *mode)
{
    popen_fn f = real.popen != NULL ? real.popen
                                    : (popen_fn)(uintptr_t)dlsym(RTLD_NEXT, "popen");
    if (f == NULL) {
        errno = ENOSYS;
        return NULL;
    }
    if (mh_trace_socket_path() == NULL || !real.glibc)
        return f(command, mode);
    int saved = errno, cancel;
    (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    bool announce = shell_will_say_hello();
    (void)pthread_setcancelstate(cancel, NULL);
    errno = saved;
    FILE *fp = f(command, mode);
    if (fp == NULL || !announce)
        return fp;
    saved = errno;
    (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
    int pidfd = popen_child(fp);
    if (pidfd >= 0)
        mh_trace_expect_pidfd(pidfd);
    (void)pthread_setcancelstate(cancel, NULL);
    errno = saved;
    return fp;
}
