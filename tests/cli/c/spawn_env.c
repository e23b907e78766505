/*
 * spawn_env.c - starts a program with an environment of its own, through
 * every member of the exec and posix_spawn family, for tests/cli.
 *
 *   spawn_env HOW ENV PROG [ARGS...]
 *
 * ENV: drop     the environment without LD_PRELOAD and MEMHOOK_TRACE_SOCKET
 *      replace  the same with LD_PRELOAD=libm.so.6 (a preload of its own)
 *      empty    no environment at all (env -i)
 * HOW: execve execv execvp execvpe execl execle execlp fexecve execveat
 *      (replace this process), posix_spawn posix_spawnp vfork (a child,
 *      waited for), threads (20 fork+execve children, one at a time,
 *      while 4 threads malloc and free: the exec path after fork in a
 *      multithreaded process).  The forms without an envp argument get
 *      ENV through environ (unsetenv, setenv, clearenv).
 * Exit status: the (last) child's, or 127 when an exec failed.
 */
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static char *envs[4096];
static _Atomic int stop;

static void make_env(const char *how)
{
    size_t n = 0;
    if (strcmp(how, "empty") != 0)
        for (char **e = environ; *e != NULL && n + 2 < sizeof envs / sizeof envs[0]; e++)
            if (strncmp(*e, "LD_PRELOAD=", 11) != 0 &&
                strncmp(*e, "MEMHOOK_TRACE_SOCKET=", 21) != 0)
                envs[n++] = *e;
    if (strcmp(how, "replace") == 0)
        envs[n++] = "LD_PRELOAD=libm.so.6";
    envs[n] = NULL;
}

static void set_environ(const char *how)
{
    if (strcmp(how, "empty") == 0) {
        clearenv();
        return;
    }
    unsetenv("MEMHOOK_TRACE_SOCKET");
    if (strcmp(how, "replace") == 0)
        setenv("LD_PRELOAD", "libm.so.6", 1);
    else
        unsetenv("LD_PRELOAD");
}

static int wait_for(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void *churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        void *p = malloc(64 + (size_t)(rand() % 4096));
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: spawn_env HOW ENV PROG [ARGS...]\n");
        return 2;
    }
    const char *how = argv[1];
    char *prog = argv[3];
    char **args = argv + 3;
    make_env(argv[2]);
    pid_t pid;
    int rc;
    if (strcmp(how, "execve") == 0) {
        execve(prog, args, envs);
    } else if (strcmp(how, "execvpe") == 0) {
        execvpe(prog, args, envs);
    } else if (strcmp(how, "fexecve") == 0) {
        int fd = open(prog, O_RDONLY | O_CLOEXEC);
        fexecve(fd, args, envs);
    } else if (strcmp(how, "execveat") == 0) {
        execveat(AT_FDCWD, prog, args, envs, 0);
    } else if (strcmp(how, "execle") == 0) {
        execle(prog, args[0], argc > 4 ? args[1] : NULL, NULL, envs);
    } else if (strcmp(how, "posix_spawn") == 0 || strcmp(how, "posix_spawnp") == 0) {
        rc = how[11] == 'p' ? posix_spawnp(&pid, prog, NULL, NULL, args, envs)
                            : posix_spawn(&pid, prog, NULL, NULL, args, envs);
        if (rc != 0) {
            fprintf(stderr, "spawn_env: %s: %s\n", how, strerror(rc));
            return 127;
        }
        return wait_for(pid);
    } else if (strcmp(how, "vfork") == 0) {
        pid = vfork();
        if (pid == 0) {
            execve(prog, args, envs);
            _exit(127);
        }
        return wait_for(pid);
    } else if (strcmp(how, "threads") == 0) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            pthread_create(&t[i], NULL, churn, NULL);
        rc = 0;
        for (int i = 0; i < 20 && rc == 0; i++) {
            pid = fork();
            if (pid == 0) {
                execve(prog, args, envs);
                _exit(127);
            }
            rc = wait_for(pid);
        }
        atomic_store(&stop, 1);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
        return rc;
    } else {
        set_environ(argv[2]);
        if (strcmp(how, "execv") == 0)
            execv(prog, args);
        else if (strcmp(how, "execvp") == 0)
            execvp(prog, args);
        else if (strcmp(how, "execl") == 0)
            execl(prog, args[0], argc > 4 ? args[1] : NULL, NULL);
        else if (strcmp(how, "execlp") == 0)
            execlp(prog, args[0], argc > 4 ? args[1] : NULL, NULL);
        else {
            fprintf(stderr, "spawn_env: unknown HOW %s\n", how);
            return 2;
        }
    }
    perror("spawn_env: exec");
    return 127;
}
