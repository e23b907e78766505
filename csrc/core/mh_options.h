/*
 * mh_options.h - the MEMHOOK_* environment knobs of the C core, read once.
 *
 * Every knob the core reads is a field here, filled from the environment
 * by the first step of the load (mh_options_at_load, called first by
 * csrc/cuda/startup_order.c, so every later step reads the struct, never
 * getenv).  The Python side
 * reads its own (memhook/); MEMHOOK_CUDA_MODE is read by both, with one
 * grammar (csrc/cuda/mode.c and memhook/_values/modes.py, held together by a test).
 *
 * Values are kept as text where their reader parses them with its own
 * message naming what is valid (the log level, the mode, the trace's
 * numbers), and as bools where the knob is a plain switch.  Text fields
 * are copies taken at load (NULL: not set), so a later setenv() or
 * unsetenv() neither changes nor invalidates them: a knob takes effect at
 * load, as each one's documentation says.
 */
#ifndef MEMHOOK_CORE_OPTIONS_H
#define MEMHOOK_CORE_OPTIONS_H

#include <stdbool.h>

#include "mh_visibility.h"

typedef enum mh_clock_choice {
    MH_CLOCK_AUTO,
    MH_CLOCK_MONOTONIC,
    MH_CLOCK_TSC,
    MH_CLOCK_COARSE,
} mh_clock_choice;

typedef struct mh_options {
    /* MEMHOOK_LOG_LEVEL: error, warn (default), info or debug, blanks
     * around it ignored.  Parsed by csrc/core/log.c. */
    const char *log_level;
    /* MEMHOOK_CUDA_MODE: none, bistro, reloc, a comma list of those, or
     * 0-3.  Installed at load under `memhook trace` (csrc/trace/) and
     * with MEMHOOK_INSTALL_AT_LOAD=1 (`memhook run`); with a plain
     * LD_PRELOAD the core says at info level why it installs nothing
     * (csrc/core/loader.c).  Parsed by memhook_mode_parse. */
    const char *cuda_mode;
    /* MEMHOOK_TRACE_SOCKET: the collector's AF_UNIX socket; set by
     * `memhook trace`, which turns the trace streamer on (csrc/trace/). */
    const char *trace_socket;
    /* MEMHOOK_TRACE_POLL_MS: the streamer's pause between looks at the
     * queue, 1-1000 (default 10). */
    const char *trace_poll_ms;
    /* MEMHOOK_TRACE_BUFFER_MB: the size of the trace area, 4-4096. */
    const char *trace_buffer_mb;
    /* MEMHOOK_TESTING_TRACE_FORK_DELAY_MS: tests only - every traced fork
     * child waits this long, 0-10000 ms, in its atfork handler before it
     * hands its area over (a child the scheduler runs late). */
    const char *testing_trace_fork_delay_ms;
    /* MEMHOOK_TESTING_TRACE_LOAD_DELAY_MS: tests only - every traced
     * process image waits this long, 0-10000 ms, at load before it
     * connects to the collector (a spawned child the loader runs late). */
    const char *testing_trace_load_delay_ms;
    /* MEMHOOK_TRACE_STACKS: native frames recorded per ALLOC, 0-128
     * (default 0: none); set by `memhook trace --stacks[=DEPTH]`. */
    const char *trace_stacks;
    /* MEMHOOK_TRACE_PYTHON: Python frames recorded per ALLOC, 0-128
     * (default 0: none); set by `memhook trace --python[=DEPTH]`. */
    const char *trace_python;
    /* MEMHOOK_TRACE_LIBRARY_PATH: a folder `memhook trace --sim` puts
     * first in LD_LIBRARY_PATH (the simulator's); put back first into a
     * child's LD_LIBRARY_PATH that lacks it (csrc/trace/trace_env.c). */
    const char *trace_library_path;
    /* MEMHOOK_CLOCK: what stamps events (csrc/queue/clock.c).  auto, blank
     * or unset: the default choice; monotonic: CLOCK_MONOTONIC for precise
     * stamps, never the TSC; tsc: the TSC for every stamp, precise or not,
     * where it is invariant; coarse: CLOCK_MONOTONIC_COARSE for every
     * stamp nobody asked to be precise.  Any other value: a warning naming
     * the valid ones, and the default. */
    mh_clock_choice clock;
    /* MEMHOOK_BISTRO_FAR_JUMP=1: bistro always writes its 12-byte jump,
     * never the 5-byte one (tests and the GPU tools use it to exercise the
     * far form); 0, blank or unset: off.  Any other value: a warning, and
     * off.  (Blanks around a switch's value are ignored, as for the text
     * knobs.) */
    bool bistro_far_jump;
    /* MEMHOOK_INSTALL_AT_LOAD=1: install the hooks in MEMHOOK_CUDA_MODE
     * when the core loads, with no trace, and keep the process's own queue
     * short while nothing else drains it (csrc/cuda/run_at_load.c); set by
     * `memhook run`.  0, blank or unset: off (a plain LD_PRELOAD installs
     * nothing).  Any other value: a warning, and off. */
    bool install_at_load;
    /* MEMHOOK_POINTER_ATTRIBUTES=1: answer the driver's pointer-attribute
     * calls from the cache (csrc/cuda/pointer_attributes.c); set by
     * `memhook run --pointer-attributes`.  0, blank or unset: off.  Any
     * other value: a warning, and off. */
    bool pointer_attributes;
} mh_options;

/* Process-wide, as the environment it is read from; written once at load
 * before any other code of the core runs, read-only after. */
MH_HIDDEN extern mh_options mh_opts;

#endif
