/*
 * module_caller.c - events whose caller is in a file the collector must
 * read to name it, for the tests of what that file may have become.
 *
 *   module_caller dlopen LIB N            dlopen LIB, call its lib_record(N)
 *   module_caller rebuild LIB N NEW       the same, then (after 1 s: the
 *                                         collector has named the first
 *                                         ones) dlclose, copy NEW over LIB
 *                                         in place (truncate, write: a
 *                                         library rebuilt where it lies),
 *                                         dlopen LIB again, lib_record(N)
 *   module_caller fifo N                  rename this program's file,
 *                                         leave a FIFO at its old path (a
 *                                         build step replacing a binary),
 *                                         then record N pairs from main
 *
 * Prints "module_caller: done" and exits 0.  Needs memhook preloaded.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef void (*lib_record_fn)(long);

static void *load(const char *lib, long n)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "module_caller: %s\n", dlerror());
        exit(90);
    }
    lib_record_fn fn = (lib_record_fn)(uintptr_t)dlsym(h, "lib_record");
    if (fn == NULL) {
        fprintf(stderr, "module_caller: no lib_record in %s\n", lib);
        exit(91);
    }
    fn(n);
    return h;
}

static void copy_over(const char *from, const char *to)
{
    int in = open(from, O_RDONLY);
    int out = open(to, O_WRONLY | O_TRUNC);
    if (in < 0 || out < 0) {
        perror("module_caller: copy");
        exit(92);
    }
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            exit(93);
    close(in);
    close(out);
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "dlopen") == 0) {
        load(argv[2], atol(argv[3]));
    } else if (argc >= 5 && strcmp(argv[1], "rebuild") == 0) {
        void *h = load(argv[2], atol(argv[3]));
        sleep(1);
        dlclose(h);
        copy_over(argv[4], argv[2]);
        load(argv[2], atol(argv[3]));
    } else if (argc >= 3 && strcmp(argv[1], "fifo") == 0) {
        typedef int (*record_fn)(int, int, uint64_t, uint64_t, int, int, int);
        typedef int (*index_fn)(const char *);
        record_fn record = (record_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_events_record");
        index_fn index = (index_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_hook_index");
        char self[4096], moved[4200];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (!record || !index || len <= 0)
            return 94;
        self[len] = '\0';
        snprintf(moved, sizeof moved, "%s.moved", self);
        if (rename(self, moved) != 0 || mkfifo(self, 0600) != 0) {
            perror("module_caller: rename/mkfifo");
            return 95;
        }
        long n = atol(argv[2]);
        int fa = index("cuMemAlloc_v2"), ff = index("cuMemFree_v2");
        for (long i = 0; i < n; i++) {
            record(1, fa, 0x7f0000000000ull + (uint64_t)i * 4096, 4096, 1, 0, 0);
            record(2, ff, 0x7f0000000000ull + (uint64_t)i * 4096, 4096, 1, 0, 0);
        }
    } else {
        fprintf(stderr, "usage: module_caller dlopen LIB N | rebuild LIB N NEW | fifo N\n");
        return 2;
    }
    printf("module_caller: done\n");
    return 0;
}
