/*
 * trace_exec.h - keeping the core in every process `memhook trace` started.
 *
 * The trace reaches a new program through its environment: LD_PRELOAD
 * names the core, MEMHOOK_TRACE_SOCKET the collector, and the MEMHOOK_*
 * knobs say how to trace.  A program that hands its child an environment
 * of its own (execve with a sanitised envp, `env -i`, subprocess with
 * env=, a launcher with a preload of its own) would take the child out of
 * the trace without a word.  So the traced process interposes the exec
 * and posix_spawn family (trace_exec.c: the core is first in LD_PRELOAD,
 * so its definitions win) and, when the environment a child is given
 * lacks the trace, puts it back (trace_env.c): the core first in
 * LD_PRELOAD, the child's own entries after it, the socket, each knob
 * the child did not set itself, and under `--sim` the simulator's folder
 * first in LD_LIBRARY_PATH.  An environment naming another trace's
 * socket (a nested `memhook trace`) is left as it is.
 *
 * What no environment can fix - a set-user-ID program (the kernel runs it
 * AT_SECURE and the loader ignores LD_PRELOAD), a static one (no loader),
 * one of another architecture - is found before the exec and told to the
 * collector in an ESCAPE message (trace_escape.c), which names it in the
 * summary and makes the trace's status 70.
 *
 * Everything here may run in the child of vfork() (which shares its
 * parent's memory and stack) or between fork() and exec in a
 * multithreaded process, where another thread may have held the malloc
 * lock at the fork: no malloc, no lock, no stdio, only system calls and
 * the caller's stack; errno is left as the caller had it.  The state read
 * is written once at load and read-only after.
 */
#ifndef MEMHOOK_TRACE_EXEC_H
#define MEMHOOK_TRACE_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "mh_visibility.h"

/* The collector's socket path while this image is traced, else NULL
 * (trace.c). */
MH_HIDDEN const char *mh_trace_socket_path(void);

/* Tell the collector that process `pid` (a pidfd of it, made here) is to
 * say HELLO from an image still to come: a posix_spawn child once the
 * spawn returned, or the calling process itself just before its exec
 * when it is a process no image of which said HELLO yet (a vfork or raw
 * clone child: mh_trace_exec_needs_expect).  trace_proto.h's EXPECT.
 * Best effort: without pidfds (Linux < 5.3) nothing is sent. */
MH_HIDDEN void mh_trace_expect(pid_t pid);
/* The same for a pidfd the caller opened (mh_trace_pidfd_open: -1 when
 * the kernel has no pidfds or `pid` is gone); it is closed here. */
MH_HIDDEN void mh_trace_expect_pidfd(int pidfd);
MH_HIDDEN int mh_trace_pidfd_open(pid_t pid);
/* Whether the calling process is one no traced image of which has said
 * HELLO yet: it shares this image's memory (a vfork child) or copied it
 * without a fork handler (a raw clone), and its pid is not the image's. */
MH_HIDDEN bool mh_trace_exec_needs_expect(void);

/* At load (csrc/cuda/startup_order.c): libc's exec and posix_spawn
 * functions (trace_exec.c) and popen (trace_popen.c), the environment a
 * child's is mended with (trace_env.c), the loader's identity
 * (trace_escape.c). */
MH_HIDDEN void mh_trace_exec_at_load(void);
MH_HIDDEN void mh_trace_popen_at_load(void);
MH_HIDDEN void mh_trace_env_at_load(void);
MH_HIDDEN void mh_trace_escape_at_load(void);

/* ---- trace_env.c: mending a child's environment ---- */

/* What mending an environment takes: the sizes of the two buffers to
 * build it in.  need == false: the environment is used as it is. */
typedef struct mh_env_plan {
    bool need;
    size_t slots;        /* char * entries of the new vector, its NULL included */
    size_t bytes;        /* bytes of the rebuilt lists' entries, together */
    const char *own[2];  /* LD_PRELOAD's, LD_LIBRARY_PATH's value in the child's
                          * environment ("" if none) when that entry is rebuilt
                          * with the trace's first; NULL: kept as it is */
    bool add_socket;     /* MEMHOOK_TRACE_SOCKET is not set: add ours */
    unsigned add_knobs;  /* bit i: knob i is missing and ours is set */
    bool foreign;        /* it names another trace's collector: left alone */
} mh_env_plan;

/* The most stack a mended environment may take: a thread's stack may be
 * small, and a vfork child runs on its parent's.  Beyond it the child is
 * an escape (MH_TRACE_ESCAPE_ENV). */
#define MH_ENV_STACK_MAX (32u * 1024u)

/* Plans the mending of `envp` (NULL: empty).  False when the plan's
 * buffers would pass MH_ENV_STACK_MAX (need is then true). */
MH_HIDDEN bool mh_trace_env_plan(char *const envp[], mh_env_plan *plan);

/* The mended environment, built in `vec` (plan->slots entries) and `str`
 * (plan->bytes): the entries of `envp` in their order, the replaced ones
 * left out, then the trace's. */
MH_HIDDEN char *const *mh_trace_env_build(const mh_env_plan *plan, char *const envp[],
                                          char **vec, char *str);

/* ---- trace_escape.c: programs the core cannot follow into ---- */

/* If the program at (dirfd, path) - path "" with AT_EMPTY_PATH in
 * at_flags: dirfd itself - will run without the core, tell the collector
 * (MH_TRACE_ESCAPE_*, | MH_TRACE_ESCAPE_SPAWNED when a spawned child runs
 * it).  Nothing when it cannot be read or is no program: the exec then
 * fails or runs a script through a shell, which is traced.  Returns
 * whether it escapes. */
MH_HIDDEN bool mh_trace_escape_check(int dirfd, const char *path, int at_flags,
                                     unsigned spawned);

/* Tell the collector that `path` escapes, for `why` (MH_TRACE_ESCAPE_*). */
MH_HIDDEN void mh_trace_escape_report(unsigned why, const char *path);

/* The program execvp() would run for `file`, searched in the caller's
 * PATH as glibc does (no '/' in it), written to buf; false if none is
 * found.  Only to check it: the real execvpe does its own search. */
MH_HIDDEN bool mh_trace_exec_search(const char *file, char *buf, size_t cap);

#endif
