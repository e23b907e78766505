/* maps_walk.c - prints what csrc/core/procfs.c's walk of /proc/self/maps
 * sees, beside the file's raw text read just before (tests/core/
 * test_procfs.py compares them).  Nothing between the two reads allocates,
 * so the process's mappings are the same for both.
 *
 *   maps_walk STOP_AFTER   (0: the whole walk)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "procfs.h"

#define MAX_LINES 4096

static char raw[1 << 20];
static struct { unsigned long start, end; int prot; char name[4096]; } seen[MAX_LINES];
static int count, stop_after;

static bool keep(const mh_map_entry *e, void *ctx)
{
    (void)ctx;
    if (count < MAX_LINES) {
        seen[count].start = e->start;
        seen[count].end = e->end;
        seen[count].prot = e->prot;
        snprintf(seen[count].name, sizeof seen[count].name, "%s", e->name);
    }
    count++;
    return stop_after == 0 || count < stop_after;
}

int main(int argc, char **argv)
{
    stop_after = argc > 1 ? atoi(argv[1]) : 0;
    int fd = open("/proc/self/maps", O_RDONLY);
    size_t have = 0;
    ssize_t n;
    while (fd >= 0 && (n = read(fd, raw + have, sizeof raw - 1 - have)) > 0)
        have += (size_t)n;
    close(fd);
    int err = mh_maps_each(keep, NULL);
    printf("rc %d\n", err);
    for (int i = 0; i < count && i < MAX_LINES; i++)
        printf("entry %lx %lx %c%c%c |%s|\n", seen[i].start, seen[i].end,
               seen[i].prot & PROT_READ ? 'r' : '-', seen[i].prot & PROT_WRITE ? 'w' : '-',
               seen[i].prot & PROT_EXEC ? 'x' : '-', seen[i].name);
    fputs("raw\n", stdout);
    fwrite(raw, 1, have, stdout);
    return 0;
}
