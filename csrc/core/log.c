/* log.c - stderr logging controlled by MEMHOOK_LOG_LEVEL. */
#include "log.h"
#include "mh_options.h"
#include "mh_startup.h"
#include "memhook_internal/api.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LOG_LINE_MAX 1024

static const char *const level_names[] = {"error", "warn", "info", "debug"};
#define LEVEL_COUNT ((int)(sizeof(level_names) / sizeof(level_names[0])))

/* Process-wide because the level is a property of the process (one env var,
 * one stderr); atomic because hooks on any thread read it. */
static atomic_int current_level = MEMHOOK_LOG_WARN;

/* Blanks around the name are ignored, as MEMHOOK_CUDA_MODE ignores them
 * ("info " from a shell script is "info"). */
int memhook_log_level_parse(const char *name)
{
    if (name == NULL)
        return -1;
    while (isspace((unsigned char)*name))
        name++;
    size_t len = strlen(name);
    while (len > 0 && isspace((unsigned char)name[len - 1]))
        len--;
    for (int i = 0; i < LEVEL_COUNT; i++)
        if (strlen(level_names[i]) == len && strncasecmp(name, level_names[i], len) == 0)
            return i;
    if (len == 7 && strncasecmp(name, "warning", len) == 0)
        return MEMHOOK_LOG_WARN;
    return -1;
}

const char *memhook_log_level_name(int level)
{
    return (level >= 0 && level < LEVEL_COUNT) ? level_names[level] : NULL;
}

int memhook_log_level_get(void)
{
    return atomic_load_explicit(&current_level, memory_order_relaxed);
}

int memhook_log_level_set(int level)
{
    if (level < 0 || level >= LEVEL_COUNT)
        return -1;
    return atomic_exchange(&current_level, level);
}

int mh_log_enabled(int level)
{
    return level <= atomic_load_explicit(&current_level, memory_order_relaxed);
}

static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

static void vlog(int level, const char *fmt, va_list ap)
{
    char line[LOG_LINE_MAX];
    int saved_errno = errno;
    int n = snprintf(line, sizeof(line), "memhook[%d:%ld] %s: ", (int)getpid(),
                     (long)syscall(SYS_gettid), memhook_log_level_name(level));
    if (n < 0)
        n = 0;
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2; /* truncated: still end the line */
    line[len++] = '\n';
    write_all(line, len);
    errno = saved_errno;
}

void mh_log(int level, const char *fmt, ...)
{
    if (!mh_log_enabled(level))
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void memhook_log_write(int level, const char *message)
{
    if (memhook_log_level_name(level) == NULL || message == NULL)
        return;
    mh_log(level, "%s", message);
}

/* Right after the knobs are read, before any other step of the load logs
 * (csrc/cuda/startup_order.c). */
void mh_log_at_load(void)
{
    const char *value = mh_opts.log_level;
    if (value == NULL || *value == '\0')
        return;
    int level = memhook_log_level_parse(value);
    if (level < 0) {
        mh_log(MEMHOOK_LOG_WARN,
               "MEMHOOK_LOG_LEVEL=%s is not a log level; valid: error, warn, "
               "info, debug (using warn)",
               value);
        return;
    }
    memhook_log_level_set(level);
    mh_debug("log level %s from MEMHOOK_LOG_LEVEL", level_names[level]);
}
