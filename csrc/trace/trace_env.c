/*
 * trace_env.c - mending the environment a traced process gives a child,
 * so that the child runs with the core and reports to the same collector
 * (trace_exec.h says when and why).
 *
 * The trace's own entries are made once, at load, from the environment
 * this image was started with (mh_opts): "LD_PRELOAD=<core>" is built per
 * child (the child's own preload follows the core), the socket and the
 * knobs are fixed "NAME=value" strings.  Planning and building run in a
 * vfork child too: they read those strings and the child's envp, and
 * write only into the caller's buffers.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "memhook/memhook.h"
#include "mh_options.h"
#include "trace_exec.h"

#define PRELOAD_KEY "LD_PRELOAD="
#define SOCKET_KEY "MEMHOOK_TRACE_SOCKET="

/* The knobs a traced child needs to be traced as its parent is; one the
 * child sets itself is its own choice and kept. */
enum { KNOB_MODE, KNOB_POLL, KNOB_BUFFER, KNOB_STACKS, KNOB_PYTHON, KNOBS };
static const char *const knob_key[KNOBS] = {
    "MEMHOOK_CUDA_MODE=", "MEMHOOK_TRACE_POLL_MS=", "MEMHOOK_TRACE_BUFFER_MB=",
    "MEMHOOK_TRACE_STACKS=", "MEMHOOK_TRACE_PYTHON=",
};

/* Made once at load, read-only after (see the top); process-wide because
 * the environment they come from is. */
static struct {
    bool ready;
    const char *core;      /* the core's path, as LD_PRELOAD gives it */
    size_t core_len;
    dev_t core_dev;
    ino_t core_ino;
    char *socket_kv;       /* "MEMHOOK_TRACE_SOCKET=<path>" */
    char *knob_kv[KNOBS];  /* "NAME=value", NULL where this image had none */
} g;

static bool has_key(const char *entry, const char *key, size_t key_len)
{
    return strncmp(entry, key, key_len) == 0;
}

/* Whether one LD_PRELOAD entry (len bytes, not NUL-ended) is this core:
 * its path, or a path to the same file. */
static bool is_core(const char *entry, size_t len)
{
    if (len == g.core_len && memcmp(entry, g.core, len) == 0)
        return true;
    char path[4096];
    if (len == 0 || len >= sizeof path || memchr(entry, '/', len) == NULL)
        return false;
    memcpy(path, entry, len);
    path[len] = '\0';
    struct stat st;
    return stat(path, &st) == 0 && st.st_dev == g.core_dev && st.st_ino == g.core_ino;
}

/* The loader splits LD_PRELOAD at spaces and colons. */
static bool preload_has_core(const char *value)
{
    while (*value != '\0') {
        size_t len = strcspn(value, " :");
        if (is_core(value, len))
            return true;
        value += len;
        value += strspn(value, " :");
    }
    return false;
}

bool mh_trace_env_plan(char *const envp[], mh_env_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    const char *ours = mh_trace_socket_path();
    if (ours == NULL || !g.ready)
        return true;
    const size_t pk = strlen(PRELOAD_KEY), sk = strlen(SOCKET_KEY);
    size_t n = 0;
    const char *preload = NULL, *sock = NULL;
    unsigned have = 0;
    for (char *const *e = envp; e != NULL && *e != NULL; e++, n++) {
        if (has_key(*e, PRELOAD_KEY, pk))
            preload = *e + pk;  /* the last one: the loader's */
        else if (has_key(*e, SOCKET_KEY, sk))
            sock = sock != NULL ? sock : *e + sk;  /* the first one: getenv's */
        else
            for (int i = 0; i < KNOBS; i++)
                if (has_key(*e, knob_key[i], strlen(knob_key[i])))
                    have |= 1u << i;
    }
    if (sock != NULL && *sock != '\0' && strcmp(sock, ours) != 0)
        return true;  /* another trace's child (a nested memhook trace): its own */
    bool core_in = preload != NULL && preload_has_core(preload);
    plan->add_socket = sock == NULL || *sock == '\0';
    for (int i = 0; i < KNOBS; i++)
        if (g.knob_kv[i] != NULL && !(have & (1u << i)))
            plan->add_knobs |= 1u << i;
    if (core_in && !plan->add_socket && plan->add_knobs == 0)
        return true;
    plan->need = true;
    if (!core_in) {
        plan->preload = preload != NULL ? preload : "";
        plan->bytes = pk + g.core_len + 1 + strlen(plan->preload) + 1;
    }
    plan->slots = n + 2 + KNOBS + 1;
    return plan->slots <= MH_ENV_STACK_MAX / sizeof(char *) &&
           plan->slots * sizeof(char *) + plan->bytes <= MH_ENV_STACK_MAX;
}

char *const *mh_trace_env_build(const mh_env_plan *plan, char *const envp[], char **vec,
                                char *str)
{
    const size_t pk = strlen(PRELOAD_KEY), sk = strlen(SOCKET_KEY);
    size_t k = 0;
    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        if (plan->preload != NULL && has_key(*e, PRELOAD_KEY, pk))
            continue;
        if (plan->add_socket && has_key(*e, SOCKET_KEY, sk))
            continue;  /* (an empty one) */
        vec[k++] = *e;
    }
    if (plan->preload != NULL) {
        char *p = str;
        memcpy(p, PRELOAD_KEY, pk);
        p += pk;
        memcpy(p, g.core, g.core_len);
        p += g.core_len;
        size_t own = strlen(plan->preload);
        if (own != 0) {
            *p++ = ':';
            memcpy(p, plan->preload, own);
            p += own;
        }
        *p = '\0';
        vec[k++] = str;
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

/* At load (malloc is fine here), after mh_opts (101).  Out of memory:
 * nothing is mended, as without a trace. */
__attribute__((constructor)) static void trace_env_init(void)
{
    const char *core = memhook_library_path();
    struct stat st;
    if (mh_opts.trace_socket == NULL || core == NULL || stat(core, &st) != 0)
        return;
    const char *knob[KNOBS] = {mh_opts.cuda_mode, mh_opts.trace_poll_ms,
                               mh_opts.trace_buffer_mb, mh_opts.trace_stacks,
                               mh_opts.trace_python};
    g.core = core;
    g.core_len = strlen(core);
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
