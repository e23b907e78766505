/* procfs.h - reading a /proc file whole (its size is unknown until read). */
#ifndef MEMHOOK_CORE_PROCFS_H
#define MEMHOOK_CORE_PROCFS_H

#include <stddef.h>

#include "mh_visibility.h"

/* Read `path` into a malloc'd, NUL-terminated buffer; *len_out (if not
 * NULL) gets its length.  NULL with errno set on failure.  Not for hooks:
 * it allocates. */
MH_HIDDEN char *mh_read_whole_file(const char *path, size_t *len_out);

#endif
