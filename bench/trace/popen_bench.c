/*
 * popen_bench.c - how long popen() takes to return, for
 * bench/trace/popen_bench.py.
 *
 *   popen_bench N popen|alias
 *
 * N rounds of popen("exit 0", "r") then pclose; the time to popen's return
 * only (pclose waits for the shell).  "alias" calls glibc's _IO_popen, the
 * same function under a name the core does not replace: the baseline in
 * the same process.  Prints "median M min L" in microseconds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern FILE *_IO_popen(const char *command, const char *mode);

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int n = argc == 3 ? atoi(argv[1]) : 0;
    if (n < 1 || (strcmp(argv[2], "popen") != 0 && strcmp(argv[2], "alias") != 0)) {
        fprintf(stderr, "usage: popen_bench N popen|alias\n");
        return 2;
    }
    FILE *(*open_fn)(const char *, const char *) = strcmp(argv[2], "alias") == 0 ? _IO_popen
                                                                                 : popen;
    double *took = malloc(sizeof(double) * (size_t)n);
    if (took == NULL)
        return 1;
    for (int i = 0; i < n; i++) {
        double t0 = now_us();
        FILE *f = open_fn("exit 0", "r");
        took[i] = now_us() - t0;
        if (f == NULL || pclose(f) != 0) {
            perror("popen_bench");
            return 1;
        }
    }
    qsort(took, (size_t)n, sizeof *took, by_value);
    printf("median %.1f min %.1f\n", took[n / 2], took[0]);
    free(took);
    return 0;
}
