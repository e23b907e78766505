/* loader.c - how many objects the dynamic loader has ever added, so Python
 * can tell cheaply whether anything (a CUDA driver, say) was loaded since it
 * last looked.  In C because a ctypes callback for dl_iterate_phdr would
 * need a writable+executable libffi closure page, which memhook never
 * leaves in a process.  Also: what a load with MEMHOOK_CUDA_MODE set
 * does. */
#include <link.h>
#include <stdlib.h>

#include "log.h"
#include "mh_options.h"
#include "mh_startup.h"

#include "memhook/memhook.h"
#include "memhook_internal/api.h"

static int first_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    /* dlpi_adds is process-wide: the first object is enough. */
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

unsigned long long memhook_loader_generation(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(first_object, &adds);
    return adds;
}

/* MEMHOOK_CUDA_MODE set for a plain LD_PRELOAD of the core: loading the
 * library installs no hooks by itself (hooks nobody drains would only fill
 * the event queue).  The mode is read by memhook.install() in Python, and
 * at load under `memhook trace` (MEMHOOK_TRACE_SOCKET set, csrc/trace/).
 * Say so, at info level, to whoever set it expecting hooks.  (Runs after
 * MEMHOOK_LOG_LEVEL is applied: csrc/cuda/startup_order.c.) */
void mh_loader_at_load(void)
{
    const char *mode = mh_opts.cuda_mode;
    const char *socket = mh_opts.trace_socket;
    if (mode == NULL || (socket != NULL && *socket != '\0') || mh_opts.install_at_load)
        return;
    mh_info("MEMHOOK_CUDA_MODE=\"%s\" is set, but loading libmemhook.so installs no hooks by "
            "itself: memhook.install() reads it (Python), and so do `memhook trace -- CMD` and "
            "`memhook run -- CMD` (or MEMHOOK_INSTALL_AT_LOAD=1); without one of those no "
            "hooks are installed",
            mode);
}
