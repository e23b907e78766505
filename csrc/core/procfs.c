/* procfs.c - read a /proc file whole.  bistro (free gaps near a target) and
 * reloc (page protections) both parse /proc/self/maps, whose size stat()
 * does not tell. */
#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

char *mh_read_whole_file(const char *path, size_t *len_out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 64 * 1024, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (cap - len < 4096) {
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL) {
                free(buf);
                buf = NULL;
                errno = ENOMEM;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved = errno;
            free(buf);
            buf = NULL;
            errno = saved;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    if (buf != NULL) {
        buf[len] = '\0';
        if (len_out != NULL)
            *len_out = len;
    }
    return buf;
}
