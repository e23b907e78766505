/* log.h - memhook's internal logging: one line per message to stderr. */
#ifndef MEMHOOK_CORE_LOG_H
#define MEMHOOK_CORE_LOG_H

#include "memhook/memhook.h"
#include "mh_visibility.h"

/* printf-style; formats into a stack buffer and issues one write(2), so it
 * allocates nothing, takes no lock, and lines from threads never interleave.
 * Safe to call from inside a hook. */
MH_HIDDEN_PRINTF(2, 3) void mh_log(int level, const char *fmt, ...);

MH_HIDDEN int mh_log_enabled(int level);

#define mh_error(...) mh_log(MEMHOOK_LOG_ERROR, __VA_ARGS__)
#define mh_warn(...) mh_log(MEMHOOK_LOG_WARN, __VA_ARGS__)
#define mh_info(...) mh_log(MEMHOOK_LOG_INFO, __VA_ARGS__)
#define mh_debug(...)                                                         \
    do {                                                                      \
        if (mh_log_enabled(MEMHOOK_LOG_DEBUG))                                \
            mh_log(MEMHOOK_LOG_DEBUG, __VA_ARGS__);                           \
    } while (0)

#endif
