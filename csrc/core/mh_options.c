/* mh_options.c - filling mh_opts from the environment at load
 * (mh_options.h documents each knob). */
#include "mh_options.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mh_startup.h"

mh_options mh_opts;

/* A copy of the knob's text, or NULL when it is not set.  At load, not on a
 * hook path: malloc is fine, and the copies live as long as the process.
 * Out of memory at load: the knob reads as unset. */
static const char *text(const char *name)
{
    const char *v = getenv(name);
    return v != NULL ? strdup(v) : NULL;
}

/* A switch knob whose value is neither of its two words, kept until the
 * log level is known (log.c applies it); its default is used.
 * Process-wide, as the environment: written by mh_options_at_load, read
 * by mh_options_warn_at_load. */
struct junk {
    const char *name, *value, *valid;
};
static struct junk g_junk[3];
static int g_njunk;

/* Whether `v`, blanks around it ignored, is `word`. */
static bool is(const char *v, const char *word)
{
    while (isspace((unsigned char)*v))
        v++;
    size_t n = strlen(word);
    if (strncmp(v, word, n) != 0)
        return false;
    for (v += n; *v; v++)
        if (!isspace((unsigned char)*v))
            return false;
    return true;
}

/* A knob that is one of `words` (unset or blank: words[0], the default);
 * the index of the word. */
static int word_knob(const char *name, const char *const *words, int n, const char *valid)
{
    const char *v = getenv(name);
    if (v == NULL || is(v, ""))
        return 0;
    for (int i = 0; i < n; i++)
        if (is(v, words[i]))
            return i;
    if (g_njunk < (int)(sizeof g_junk / sizeof g_junk[0]))
        g_junk[g_njunk++] = (struct junk){name, strdup(v), valid};
    return 0;
}

/* A knob that is `on` or `off` (unset or blank: off). */
static bool switch_knob(const char *name, const char *on, const char *off, const char *valid)
{
    const char *const words[] = {off, on};
    return word_knob(name, words, 2, valid) == 1;
}

/* The first step of the load (csrc/cuda/startup_order.c): every other
 * step reads mh_opts. */
void mh_options_at_load(void)
{
    mh_opts.log_level = text("MEMHOOK_LOG_LEVEL");
    mh_opts.cuda_mode = text("MEMHOOK_CUDA_MODE");
    mh_opts.trace_socket = text("MEMHOOK_TRACE_SOCKET");
    mh_opts.trace_poll_ms = text("MEMHOOK_TRACE_POLL_MS");
    mh_opts.trace_buffer_mb = text("MEMHOOK_TRACE_BUFFER_MB");
    mh_opts.testing_trace_fork_delay_ms = text("MEMHOOK_TESTING_TRACE_FORK_DELAY_MS");
    mh_opts.testing_trace_load_delay_ms = text("MEMHOOK_TESTING_TRACE_LOAD_DELAY_MS");
    mh_opts.trace_stacks = text("MEMHOOK_TRACE_STACKS");
    mh_opts.trace_python = text("MEMHOOK_TRACE_PYTHON");
    mh_opts.trace_library_path = text("MEMHOOK_TRACE_LIBRARY_PATH");
    static const char *const clocks[] = {[MH_CLOCK_AUTO] = "auto",
                                         [MH_CLOCK_MONOTONIC] = "monotonic",
                                         [MH_CLOCK_TSC] = "tsc",
                                         [MH_CLOCK_COARSE] = "coarse"};
    mh_opts.clock = (mh_clock_choice)word_knob(
        "MEMHOOK_CLOCK", clocks, 4,
        "auto (the default: the cheaper of the TSC and the coarse clock where nobody asked for "
        "precise time), monotonic (CLOCK_MONOTONIC for precise stamps, never the TSC), tsc "
        "(the TSC for every stamp) or coarse (the coarse clock where nobody asked for precise "
        "time)");
    mh_opts.bistro_far_jump = switch_knob("MEMHOOK_BISTRO_FAR_JUMP", "1", "0",
                                          "1 (always the 12-byte jump) or 0 (the default)");
    mh_opts.install_at_load =
        switch_knob("MEMHOOK_INSTALL_AT_LOAD", "1", "0",
                    "1 (install the hooks in MEMHOOK_CUDA_MODE at load, as `memhook run` "
                    "does) or 0 (the default: a load installs nothing)");
    mh_opts.pointer_attributes =
        switch_knob("MEMHOOK_POINTER_ATTRIBUTES", "1", "0",
                    "1 (answer cuPointerGetAttribute(s) and cudaPointerGetAttributes from "
                    "the cache) or 0 (the default: the driver answers them)");
}

/* Once the log level is known (startup_order.c), so MEMHOOK_LOG_LEVEL=error
 * silences these as it does every warning. */
void mh_options_warn_at_load(void)
{
    for (int i = 0; i < g_njunk; i++)
        mh_warn("%s=%s is not a valid value; valid: %s (using the default)", g_junk[i].name,
                g_junk[i].value != NULL ? g_junk[i].value : "?", g_junk[i].valid);
}
