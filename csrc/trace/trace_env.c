/*
 * trace_env.c - mending the environment a traced process gives a child,
 * so that the child runs with the core and reports to the same collector
 * (trace_exec.h says when and why).
 *
 * The trace's own entries are made once, at load, from the environment
 * this image was started with (mh_opts).  Two are lists the child may have
 * its own entries in, kept after the trace's: LD_PRELOAD (the core first)
 * and, under `memhook trace --sim`, LD_LIBRARY_PATH (the simulator's
 * folder first, so the child's dlopen("libcuda.so.1") finds it).  The
 * socket and the knobs are fixed "NAME=value" strings; a knob the child
 * set itself is its own choice and kept.  Planning and building run in a
 * vfork child too: they read those strings and the child's envp, and write
 * only into the caller's buffers.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "memhook/memhook.h"
#include "mh_options.h"
#include "trace_exec.h"

#define SOCKET_KEY "MEMHOOK_TRACE_SOCKET="

enum { KNOB_MODE, KNOB_POLL, KNOB_BUFFER, KNOB_STACKS, KNOB_PYTHON, KNOB_LIBPATH, KNOBS };
static const char *const knob_key[KNOBS] = {
    "MEMHOOK_CUDA_MODE=", "MEMHOOK_TRACE_POLL_MS=", "MEMHOOK_TRACE_BUFFER_MB=",
    "MEMHOOK_TRACE_STACKS=", "MEMHOOK_TRACE_PYTHON=", "MEMHOOK_TRACE_LIBRARY_PATH=",
};

/* The two lists, in mh_env_plan.own's order: the variable, the characters
 * its reader splits it at (the loader's), and the trace's first entry. */
enum { LIST_PRELOAD, LIST_LIBPATH, LISTS };
static const char *const list_key[LISTS] = {"LD_PRELOAD=", "LD_LIBRARY_PATH="};
static const char *const list_sep[LISTS] = {" :", ":;"};

/* Made once at load, read-only after (see the top); process-wide because
 * the environment they come from is. */
static struct {
    bool ready;
    const char *first[LISTS];  /* the trace's entry of each list, NULL: none */
    size_t first_len[LISTS];
    dev_t core_dev;            /* the core's file, however LD_PRELOAD names it */
    ino_t core_ino;
    char *socket_kv;           /* "MEMHOOK_TRACE_SOCKET=<path>" */
    char *knob_kv[KNOBS];      /* "NAME=value", NULL where this image had none */
} g;

static bool has_key(const char *entry, const char *key)
{
    return strncmp(entry, key, strlen(key)) == 0;
}

/* Whether one entry (len bytes, not NUL-ended) of list i is the trace's:
 * its text, or for LD_PRELOAD a path to the core's file. */
static bool is_first(int i, const char *entry, size_t len)
{
    if (len == g.first_len[i] && memcmp(entry, g.first[i], len) == 0)
        return true;
    char path[4096];
    if (i != LIST_PRELOAD || len == 0 || len >= sizeof path || memchr(entry, '/', len) == NULL)
        return false;
    memcpy(path, entry, len);
    path[len] = '\0';
    struct stat st;
    return stat(path, &st) == 0 && st.st_dev == g.core_dev && st.st_ino == g.core_ino;
}

static bool list_has_first(int i, const char *value)
{
    value += strspn(value, list_sep[i]);
    while (*value != '\0') {
        size_t len = strcspn(value, list_sep[i]);
        if (is_first(i, value, len))
            return true;
        value += len;
        value += strspn(value, list_sep[i]);
    }
    return false;
}

bool mh_trace_env_plan(char *const envp[], mh_env_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    const char *ours = mh_trace_socket_path();
    if (ours == NULL || !g.ready)
        return true;
    size_t n = 0;
    const char *list[LISTS] = {NULL, NULL}, *sock = NULL;
    unsigned have = 0;
    for (char *const *e = envp; e != NULL && *e != NULL; e++, n++) {
        for (int i = 0; i < LISTS; i++)
            if (has_key(*e, list_key[i]))
                list[i] = *e + strlen(list_key[i]);  /* the last one: the loader's */
        if (has_key(*e, SOCKET_KEY) && sock == NULL)
            sock = *e + strlen(SOCKET_KEY);  /* the first one: getenv's */
        for (int i = 0; i < KNOBS; i++)
            if (has_key(*e, knob_key[i]))
                have |= 1u << i;
    }
    if (sock != NULL && *sock != '\0' && strcmp(sock, ours) != 0) {
        plan->foreign = true;  /* another trace's child (a nested memhook trace): its own */
        return true;
    }
    plan->add_socket = sock == NULL || *sock == '\0';
    for (int i = 0; i < KNOBS; i++)
        if (g.knob_kv[i] != NULL && !(have & (1u << i)))
            plan->add_knobs |= 1u << i;
    for (int i = 0; i < LISTS; i++) {
        if (g.first[i] == NULL || (list[i] != NULL && list_has_first(i, list[i])))
            continue;
        plan->own[i] = list[i] != NULL ? list[i] : "";
        plan->bytes += strlen(list_key[i]) + g.first_len[i] + 1 + strlen(plan->own[i]) + 1;
    }
    if (plan->own[LIST_PRELOAD] == NULL && plan->own[LIST_LIBPATH] == NULL &&
        !plan->add_socket && plan->add_knobs == 0)
        return true;
    plan->need = true;
    plan->slots = n + LISTS + 1 + KNOBS + 1;
    return plan->slots <= MH_ENV_STACK_MAX / sizeof(char *) &&
           plan->slots * sizeof(char *) + plan->bytes <= MH_ENV_STACK_MAX;
}

/* "KEY=<first>[:<own>]" at p; returns the end of it, past its NUL. */
static char *list_entry(int i, const char *own, char *p)
{
    size_t k = strlen(list_key[i]), o = strlen(own);
    memcpy(p, list_key[i], k);
    p += k;
    memcpy(p, g.first[i], g.first_len[i]);
    p += g.first_len[i];
    if (o != 0) {
        *p++ = ':';
        memcpy(p, own, o);
        p += o;
    }
    *p++ = '\0';
    return p;
}

char *const *mh_trace_env_build(const mh_env_plan *plan, char *const envp[], char **vec,
                                char *str)
{
    size_t k = 0;
    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        bool rebuilt = false;
        for (int i = 0; i < LISTS; i++)
            rebuilt = rebuilt || (plan->own[i] != NULL && has_key(*e, list_key[i]));
        if (rebuilt || (plan->add_socket && has_key(*e, SOCKET_KEY)))
            continue;  /* (a socket entry here is an empty one) */
        vec[k++] = *e;
    }
    for (int i = 0; i < LISTS; i++)
        if (plan->own[i] != NULL) {
            vec[k++] = str;
            str = list_entry(i, plan->own[i], str);
        }
    if (plan->add_socket)
        vec[k++] = g.socket_kv;
    for (int i = 0; i < KNOBS; i++)
        if (plan->add_knobs & (1u << i))
            vec[k++] = g.knob_kv[i];
    vec[k] = NULL;
    return vec;
}

static char *joined(const char *key, const char *value)
{
    size_t a = strlen(key), b = strlen(value);
    char *s = malloc(a + b + 1);
    if (s != NULL) {
        memcpy(s, key, a);
        memcpy(s + a, value, b + 1);
    }
    return s;
}

/* At load (malloc is fine here; csrc/cuda/startup_order.c).  Out of
 * memory: nothing is mended, as without a trace. */
void mh_trace_env_at_load(void)
{
    const char *core = memhook_library_path();
    struct stat st;
    if (mh_opts.trace_socket == NULL || core == NULL || stat(core, &st) != 0)
        return;
    const char *knob[KNOBS] = {mh_opts.cuda_mode,       mh_opts.trace_poll_ms,
                               mh_opts.trace_buffer_mb, mh_opts.trace_stacks,
                               mh_opts.trace_python,    mh_opts.trace_library_path};
    g.first[LIST_PRELOAD] = core;
    const char *libpath = mh_opts.trace_library_path;
    g.first[LIST_LIBPATH] = libpath != NULL && *libpath != '\0' ? libpath : NULL;
    for (int i = 0; i < LISTS; i++)
        g.first_len[i] = g.first[i] != NULL ? strlen(g.first[i]) : 0;
    g.core_dev = st.st_dev;
    g.core_ino = st.st_ino;
    g.socket_kv = joined(SOCKET_KEY, mh_opts.trace_socket);
    if (g.socket_kv == NULL)
        return;
    for (int i = 0; i < KNOBS; i++)
        if (knob[i] != NULL && (g.knob_kv[i] = joined(knob_key[i], knob[i])) == NULL)
            return;
    g.ready = true;
}
