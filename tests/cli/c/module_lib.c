/*
 * module_lib.c - the library module_caller.c loads: lib_record(n) records
 * n ALLOC/FREE pairs through memhook_events_record, so their caller is
 * here.  Built twice by tests/cli: small, and with -DBIG - lib_record at
 * the same place, then a megabyte of data and a thousand functions, so
 * the big file's symbol table lies far past the end of the small one: a
 * view of the big file cached by path, used to name the small one's
 * lib_record after it was copied over the big one, reads past its end.
 */
#include <dlfcn.h>
#include <stdint.h>

typedef int (*record_fn)(int, int, uint64_t, uint64_t, int, int, int);
typedef int (*index_fn)(const char *);

__attribute__((noinline)) void lib_record(long n)
{
    record_fn record = (record_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_events_record");
    index_fn index = (index_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "memhook_hook_index");
    if (!record || !index)
        return;
    int fa = index("cuMemAlloc_v2"), ff = index("cuMemFree_v2");
    for (long i = 0; i < n; i++) {
        record(1, fa, 0x7e0000000000ull + (uint64_t)i * 4096, 4096, 1, 0, 0);
        record(2, ff, 0x7e0000000000ull + (uint64_t)i * 4096, 4096, 1, 0, 0);
    }
}

#ifdef BIG
#define DEF(n) __attribute__((used)) static int padding_function_with_a_long_name_##n(int x) \
    { return x * n + 1; }
#define D10(p) DEF(p##0) DEF(p##1) DEF(p##2) DEF(p##3) DEF(p##4) DEF(p##5) DEF(p##6) \
               DEF(p##7) DEF(p##8) DEF(p##9)
#define D100(p) D10(p##0) D10(p##1) D10(p##2) D10(p##3) D10(p##4) D10(p##5) D10(p##6) \
                D10(p##7) D10(p##8) D10(p##9)
D100(1) D100(2) D100(3) D100(4) D100(5) D100(6) D100(7) D100(8) D100(9)
const char module_lib_padding[1 << 20] = {1};
#endif
