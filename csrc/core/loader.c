/* loader.c - how many objects the dynamic loader has ever added, so Python
 * can tell cheaply whether anything (a CUDA driver, say) was loaded since it
 * last looked.  In C because a ctypes callback for dl_iterate_phdr would
 * need a writable+executable libffi closure page, which memhook never
 * leaves in a process. */
#include <link.h>

#include "memhook/memhook.h"

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
