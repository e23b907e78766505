/* version.c - identity of the loaded core: version and file path, so that
 * the Python package, the trace CLI and tests can check which build runs. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mh_startup.h"
#include "memhook/memhook.h"

const char *memhook_version(void)
{
    return MEMHOOK_VERSION_STRING;
}

int memhook_version_number(void)
{
    return MEMHOOK_VERSION_MAJOR * 10000 + MEMHOOK_VERSION_MINOR * 100 +
           MEMHOOK_VERSION_PATCH;
}

/* Resolved once: the object's path cannot change while it is mapped. */
static char library_path[PATH_MAX];
static pthread_once_t library_path_once = PTHREAD_ONCE_INIT;

static void resolve_library_path(void)
{
    Dl_info info;
    if (dladdr((void *)&memhook_version, &info) == 0 || info.dli_fname == NULL)
        return;
    if (realpath(info.dli_fname, library_path) == NULL) {
        strncpy(library_path, info.dli_fname, sizeof(library_path) - 1);
        library_path[sizeof(library_path) - 1] = '\0';
    }
}

const char *memhook_library_path(void)
{
    pthread_once(&library_path_once, resolve_library_path);
    return library_path[0] ? library_path : NULL;
}

void mh_version_at_load(void)
{
    mh_info("libmemhook %s loaded from %s", MEMHOOK_VERSION_STRING,
            memhook_library_path() ? memhook_library_path() : "?");
}
