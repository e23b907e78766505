/* mh_options.c - filling mh_opts from the environment at load
 * (mh_options.h documents each knob). */
#include "mh_options.h"

#include <stdlib.h>
#include <string.h>

mh_options mh_opts;

/* A copy of the knob's text, or NULL when it is not set.  At load, not on a
 * hook path: malloc is fine, and the copies live as long as the process.
 * Out of memory at load: the knob reads as unset. */
static const char *text(const char *name)
{
    const char *v = getenv(name);
    return v != NULL ? strdup(v) : NULL;
}

/* Priority 101 (the first one the toolchain leaves to programs): before the
 * log level is applied (log.c, 102) and every unprioritised constructor. */
__attribute__((constructor(101))) static void options_from_env(void)
{
    mh_opts.log_level = text("MEMHOOK_LOG_LEVEL");
    mh_opts.cuda_mode = text("MEMHOOK_CUDA_MODE");
    mh_opts.trace_socket = text("MEMHOOK_TRACE_SOCKET");
    mh_opts.trace_poll_ms = text("MEMHOOK_TRACE_POLL_MS");
    mh_opts.trace_buffer_mb = text("MEMHOOK_TRACE_BUFFER_MB");
    mh_opts.trace_stacks = text("MEMHOOK_TRACE_STACKS");
    mh_opts.trace_python = text("MEMHOOK_TRACE_PYTHON");
    const char *clock = getenv("MEMHOOK_CLOCK");
    mh_opts.clock_monotonic = clock != NULL && strcmp(clock, "monotonic") == 0;
    const char *far = getenv("MEMHOOK_BISTRO_FAR_JUMP");
    mh_opts.bistro_far_jump = far != NULL && far[0] == '1' && far[1] == '\0';
}
