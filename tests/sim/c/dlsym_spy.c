/*
 * dlsym_spy.c - an LD_PRELOAD library for tests/sim/test_cudart.py: logs
 * every dlsym name, with the object that asked, to the file named by
 * MEMHOOK_DLSYM_LOG ("<name>\t<caller object>\n"), then forwards the call.
 *
 * It shows which driver entry points the simulated runtime looks up by name
 * (it must be cuGetProcAddress_v2 alone; everything else goes through
 * cuGetProcAddress).  Not usable with RTLD_NEXT callers (the lookup would be
 * relative to this library), which the test programs do not have.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real_dlsym(void)
{
    static dlsym_fn fn;
    if (fn == NULL) {
        fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (fn == NULL)
            fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    return fn;
}

static void log_lookup(const char *name, const void *caller)
{
    const char *path = getenv("MEMHOOK_DLSYM_LOG");
    if (path == NULL || name == NULL)
        return;
    Dl_info info;
    const char *who = "?";
    if (dladdr(caller, &info) != 0 && info.dli_fname != NULL)
        who = info.dli_fname;
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s\t%s\n", name, who);
    if (n <= 0)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    (void)w;
    close(fd);
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    log_lookup(name, __builtin_return_address(0));
    return real_dlsym()(handle, name);
}
