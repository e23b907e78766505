/*
 * trace_exec.c - the exec and posix_spawn family, interposed in a traced
 * process so that every program it starts stays in the trace
 * (trace_exec.h says why and what the rules are).
 *
 * glibc's own members call each other through internal names (execvp
 * reaches __execve, never execve), so each public one is replaced here:
 * execve, execv, execvp, execvpe, execl, execlp, execle, fexecve,
 * execveat, posix_spawn and posix_spawnp.  Each checks the program it will
 * run (an escape is told to the collector), mends the environment on its
 * own stack when the trace is missing from it, and calls libc's function
 * (found once, at load) with the same arguments otherwise - the PATH
 * search, the script fallback and every error stay libc's.  Not tracing
 * (a plain LD_PRELOAD of the core): straight through.
 *
 * An exec may run in a vfork child or after fork in a multithreaded
 * process: no malloc, no lock, only the stack (trace_exec.h).  The
 * l-forms copy their arguments into an array on the stack, as glibc's do.
 * system() and popen() spawn through glibc's internal posix_spawn with
 * the process's own environment, which holds the trace unless the
 * program removed it from itself; their environment is not mended, and
 * popen's child is announced by trace_popen.c.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mh_visibility.h"
#include "trace_exec.h"
#include "trace_proto.h"

extern char **environ;

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[], int);
typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]);

/* libc's functions, found at load (dlsym may allocate: never in a vfork
 * child) and read-only after; process-wide, as the functions are.  A call
 * before then (another preload's constructor that execs) looks its
 * function up itself and keeps nothing. */
static struct {
    execve_fn execve, execvpe;
    fexecve_fn fexecve;
    execveat_fn execveat;
    spawn_fn spawn, spawnp;
} real;

static void *next(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

void mh_trace_exec_at_load(void)
{
    real.execve = (execve_fn)(uintptr_t)next("execve");
    real.execvpe = (execve_fn)(uintptr_t)next("execvpe");
    real.fexecve = (fexecve_fn)(uintptr_t)next("fexecve");
    real.execveat = (execveat_fn)(uintptr_t)next("execveat");
    real.spawn = (spawn_fn)(uintptr_t)next("posix_spawn");
    real.spawnp = (spawn_fn)(uintptr_t)next("posix_spawnp");
}

enum how { EXECVE, EXECVPE, FEXECVE, EXECVEAT, SPAWN, SPAWNP };

/* One call of the family, whatever its form. */
struct call {
    enum how how;
    int fd;            /* FEXECVE, EXECVEAT */
    const char *path;  /* the path or file argument */
    char *const *argv;
    int flags;         /* EXECVEAT */
    pid_t *pid;        /* SPAWN, SPAWNP */
    const posix_spawn_file_actions_t *actions;
    const posix_spawnattr_t *attr;
};

static int missing(void)
{
    errno = ENOSYS;
    return -1;
}

/* libc's function for the call, with envp. */
static int run(const struct call *c, char *const envp[])
{
    switch (c->how) {
    case EXECVE: {
        execve_fn f = real.execve ? real.execve : (execve_fn)(uintptr_t)next("execve");
        return f ? f(c->path, c->argv, envp) : (int)syscall(SYS_execve, c->path, c->argv, envp);
    }
    case EXECVPE: {
        execve_fn f = real.execvpe ? real.execvpe : (execve_fn)(uintptr_t)next("execvpe");
        return f ? f(c->path, c->argv, envp) : missing();
    }
    case FEXECVE: {
        fexecve_fn f = real.fexecve ? real.fexecve : (fexecve_fn)(uintptr_t)next("fexecve");
        return f ? f(c->fd, c->argv, envp) : missing();
    }
    case EXECVEAT: {
        execveat_fn f = real.execveat ? real.execveat
                                      : (execveat_fn)(uintptr_t)next("execveat");
        return f ? f(c->fd, c->path, c->argv, envp, c->flags)
                 : (int)syscall(SYS_execveat, c->fd, c->path, c->argv, envp, c->flags);
    }
    case SPAWN: {
        spawn_fn f = real.spawn ? real.spawn : (spawn_fn)(uintptr_t)next("posix_spawn");
        return f ? f(c->pid, c->path, c->actions, c->attr, c->argv, envp) : ENOSYS;
    }
    case SPAWNP: {
        spawn_fn f = real.spawnp ? real.spawnp : (spawn_fn)(uintptr_t)next("posix_spawnp");
        return f ? f(c->pid, c->path, c->actions, c->attr, c->argv, envp) : ENOSYS;
    }
    }
    return missing();
}

/* The program the call will run, checked for an escape: whether it runs
 * without the core. */
static bool check(const struct call *c)
{
    if (c->path == NULL)
        return false;  /* the real call says EFAULT, or crashes as it would untraced */
    unsigned spawned = c->how == SPAWN || c->how == SPAWNP ? MH_TRACE_ESCAPE_SPAWNED : 0;
    switch (c->how) {
    case EXECVE:
    case SPAWN:
        return mh_trace_escape_check(AT_FDCWD, c->path, 0, spawned);
    case EXECVPE:
    case SPAWNP: {
        char found[PATH_MAX];
        if (strchr(c->path, '/') != NULL)
            return mh_trace_escape_check(AT_FDCWD, c->path, 0, spawned);
        if (mh_trace_exec_search(c->path, found, sizeof found))
            return mh_trace_escape_check(AT_FDCWD, found, 0, spawned);
        return false;
    }
    case FEXECVE:
        return mh_trace_escape_check(c->fd, "", AT_EMPTY_PATH, 0);
    case EXECVEAT:
        return mh_trace_escape_check(c->fd, c->path, c->flags, 0);
    }
    return false;
}

/* libc's function for the call, the new process announced to the
 * collector where its first traced image is still to come (EXPECT): a
 * posix_spawn child once the spawn has returned - glibc's runs no atfork
 * handler, and its parent may exit as soon as the child exec'd - and a
 * vfork or raw clone child before its exec, which its parent waits for
 * and no more.  A fork child said HELLO from its handler already; a
 * program that escapes the trace, or is given another trace's collector,
 * never says HELLO here and is not waited for (`elsewhere`). */
static int run_announced(const struct call *c, char *const envp[], bool elsewhere)
{
    if (elsewhere)
        return run(c, envp);
    if (c->how != SPAWN && c->how != SPAWNP) {
        if (mh_trace_exec_needs_expect())
            mh_trace_expect(getpid());
        return run(c, envp);
    }
    pid_t own = 0;
    struct call s = *c;
    if (s.pid == NULL)
        s.pid = &own;  /* (posix_spawn's pid may be NULL; ours is needed) */
    int rc = run(&s, envp);
    if (rc == 0) {
        /* (the spawning thread, never a vfork child: EXPECT's calls are
         * cancellation points, and the caller must get the pid it spawned) */
        int cancel;
        (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
        mh_trace_expect(*s.pid);
        (void)pthread_setcancelstate(cancel, NULL);
    }
    return rc;
}

/* The call, with the trace kept in envp. */
static int traced(const struct call *c, char *const envp[])
{
    if (mh_trace_socket_path() == NULL)
        return run(c, envp);
    int saved = errno;
    bool escapes = check(c);
    mh_env_plan plan;
    bool fits = mh_trace_env_plan(envp, &plan);
    errno = saved;
    if (!plan.need)
        return run_announced(c, envp, escapes || plan.foreign);
    if (!fits) {
        unsigned spawned = c->how == SPAWN || c->how == SPAWNP ? MH_TRACE_ESCAPE_SPAWNED : 0;
        mh_trace_escape_report(MH_TRACE_ESCAPE_ENV | spawned,
                               c->path != NULL && c->path[0] != '\0' ? c->path : "?");
        errno = saved;
        return run(c, envp);
    }
    char *vec[plan.slots];
    char str[plan.bytes != 0 ? plan.bytes : 1];
    return run_announced(c, mh_trace_env_build(&plan, envp, vec, str), escapes);
}

MH_INTERPOSE int execve(const char *path, char *const argv[], char *const envp[])
{
    struct call c = {.how = EXECVE, .path = path, .argv = argv};
    return traced(&c, envp);
}

MH_INTERPOSE int execv(const char *path, char *const argv[])
{
    struct call c = {.how = EXECVE, .path = path, .argv = argv};
    return traced(&c, environ);
}

MH_INTERPOSE int execvpe(const char *file, char *const argv[], char *const envp[])
{
    struct call c = {.how = EXECVPE, .path = file, .argv = argv};
    return traced(&c, envp);
}

MH_INTERPOSE int execvp(const char *file, char *const argv[])
{
    struct call c = {.how = EXECVPE, .path = file, .argv = argv};
    return traced(&c, environ);
}

MH_INTERPOSE int fexecve(int fd, char *const argv[], char *const envp[])
{
    struct call c = {.how = FEXECVE, .fd = fd, .path = "", .argv = argv};
    return traced(&c, envp);
}

MH_INTERPOSE int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
                          int flags)
{
    struct call c = {.how = EXECVEAT, .fd = dirfd, .path = path, .argv = argv, .flags = flags};
    return traced(&c, envp);
}

MH_INTERPOSE int posix_spawn(pid_t *restrict pid, const char *restrict path,
                             const posix_spawn_file_actions_t *actions,
                             const posix_spawnattr_t *restrict attr, char *const argv[restrict],
                             char *const envp[restrict])
{
    struct call c = {.how = SPAWN, .path = path, .argv = argv, .pid = pid, .actions = actions,
                     .attr = attr};
    return traced(&c, envp);
}

MH_INTERPOSE int posix_spawnp(pid_t *pid, const char *file,
                              const posix_spawn_file_actions_t *actions,
                              const posix_spawnattr_t *attr, char *const argv[],
                              char *const envp[])
{
    struct call c = {.how = SPAWNP, .path = file, .argv = argv, .pid = pid, .actions = actions,
                     .attr = attr};
    return traced(&c, envp);
}

/* The l-forms: count the arguments, copy them into an array on the stack
 * (as glibc does; too many for any exec is E2BIG), run the v-form.  With
 * `with_env`, the array of pointers after the terminating NULL is the
 * environment (execle). */
#define ARGS_MAX (INT_MAX / (int)sizeof(char *))

static int l_form(enum how how, const char *path, const char *arg, va_list ap, bool with_env)
{
    va_list count;
    va_copy(count, ap);
    int n = 1;  /* the array's length, its NULL included */
    for (const char *a = arg; a != NULL && n < ARGS_MAX; n++)
        a = va_arg(count, const char *);
    va_end(count);
    if (n >= ARGS_MAX) {
        errno = E2BIG;
        return -1;
    }
    char *argv[n];
    argv[0] = (char *)arg;
    for (int i = 1; i < n; i++)
        argv[i] = va_arg(ap, char *);
    char *const *envp = with_env ? va_arg(ap, char *const *) : environ;
    struct call c = {.how = how, .path = path, .argv = argv};
    return traced(&c, envp);
}

MH_INTERPOSE int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = l_form(EXECVE, path, arg, ap, false);
    va_end(ap);
    return rc;
}

MH_INTERPOSE int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = l_form(EXECVPE, file, arg, ap, false);
    va_end(ap);
    return rc;
}

MH_INTERPOSE int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    int rc = l_form(EXECVE, path, arg, ap, true);
    va_end(ap);
    return rc;
}
