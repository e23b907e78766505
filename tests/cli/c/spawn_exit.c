/*
 * spawn_exit.c - starts a program as a child and exits at once, without
 * waiting for it, for tests/cli/test_trace_spawn_race.py.
 *
 *   spawn_exit HOW PROG [ARGS...]
 *
 * HOW: posix_spawn (glibc's: a CLONE_VFORK child that runs no atfork
 * handler), vfork (vfork, then execv in the child).  Exit status 0 once
 * the child is started; 127 when it could not be.
 */
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: spawn_exit posix_spawn|vfork PROG [ARGS...]\n");
        return 2;
    }
    if (strcmp(argv[1], "posix_spawn") == 0) {
        pid_t pid;
        return posix_spawn(&pid, argv[2], NULL, NULL, argv + 2, environ) == 0 ? 0 : 127;
    }
    if (strcmp(argv[1], "vfork") == 0) {
        pid_t pid = vfork();
        if (pid == 0) {
            execv(argv[2], argv + 2);
            _exit(127);
        }
        return pid > 0 ? 0 : 127;
    }
    fprintf(stderr, "spawn_exit: unknown HOW %s\n", argv[1]);
    return 2;
}
