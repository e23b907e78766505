/*
 * memhook.h - the C API of libmemhook.so, the one native core that holds all
 * of memhook's hook state.  The Python extension links to this library and
 * `memhook trace` LD_PRELOADs it, so a process always has exactly one copy.
 *
 * Only symbols declared here are exported; everything else is hidden.
 */
#ifndef MEMHOOK_H
#define MEMHOOK_H

#ifdef __cplusplus
extern "C" {
#endif

#define MEMHOOK_API __attribute__((visibility("default")))

/* Kept equal to memhook/_version.py (a test checks). */
#define MEMHOOK_VERSION_MAJOR 0
#define MEMHOOK_VERSION_MINOR 1
#define MEMHOOK_VERSION_PATCH 0
#define MEMHOOK_VERSION_STRING "0.1.0"

/* "MAJOR.MINOR.PATCH" of the loaded library (may differ from the header's). */
MEMHOOK_API const char *memhook_version(void);
/* MAJOR * 10000 + MINOR * 100 + PATCH */
MEMHOOK_API int memhook_version_number(void);
/* Absolute path of the libmemhook.so this process has loaded: the file to
 * LD_PRELOAD so that children share the same core. */
MEMHOOK_API const char *memhook_library_path(void);

/* Log levels, most severe first.  The level starts from the environment
 * variable MEMHOOK_LOG_LEVEL (error|warn|info|debug, default warn). */
typedef enum memhook_log_level {
    MEMHOOK_LOG_ERROR = 0,
    MEMHOOK_LOG_WARN = 1,
    MEMHOOK_LOG_INFO = 2,
    MEMHOOK_LOG_DEBUG = 3,
} memhook_log_level;

MEMHOOK_API int memhook_log_level_get(void);
/* Returns the previous level, or -1 (and changes nothing) if out of range. */
MEMHOOK_API int memhook_log_level_set(int level);
/* "error"/"warn"/"info"/"debug" (case-insensitive) -> level; -1 if invalid. */
MEMHOOK_API int memhook_log_level_parse(const char *name);
/* The lowercase name of a level, or NULL if out of range. */
MEMHOOK_API const char *memhook_log_level_name(int level);
/* Write one line to stderr at the given level (if enabled).  For the Python
 * layer's own diagnostics that must interleave with the native ones. */
MEMHOOK_API void memhook_log_write(int level, const char *message);

#ifdef __cplusplus
}
#endif

#endif /* MEMHOOK_H */
