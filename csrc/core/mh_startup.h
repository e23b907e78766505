/*
 * mh_startup.h - the core helpers' steps at load.  Each runs once, called
 * by csrc/cuda/startup_order.c, which holds the order of every layer's
 * steps and the reason for each position; none runs on its own.
 */
#ifndef MEMHOOK_CORE_STARTUP_H
#define MEMHOOK_CORE_STARTUP_H

#include "mh_visibility.h"

/* mh_options.c: mh_opts from the environment; the invalid values of the
 * switches are kept for mh_options_warn_at_load. */
MH_HIDDEN void mh_options_at_load(void);
/* log.c: the level from MEMHOOK_LOG_LEVEL (or a warning naming the valid
 * ones). */
MH_HIDDEN void mh_log_at_load(void);
/* mh_options.c: a warning for each invalid switch value read. */
MH_HIDDEN void mh_options_warn_at_load(void);
/* loader.c: at info level, that a plain load with MEMHOOK_CUDA_MODE set
 * installs nothing. */
MH_HIDDEN void mh_loader_at_load(void);
/* version.c: at info level, the version and path of the core loaded. */
MH_HIDDEN void mh_version_at_load(void);

#endif
