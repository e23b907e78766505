/*
 * mh_visibility.h - the linkage attributes of memhook's internal names.
 *
 * The core is built with -fvisibility=hidden, so an unmarked definition is
 * already hidden; the mark on a declaration matters too: it tells the
 * compiler the symbol binds inside libmemhook.so, so a call or a load of a
 * global needs no PLT/GOT hop (the hook path counts every one of those).
 * Only the public API (MEMHOOK_API, csrc/include/memhook/memhook.h) and
 * the libc functions the trace interposes (MH_INTERPOSE) are exported.  One header, so the spelling cannot drift between layers.
 */
#ifndef MEMHOOK_CORE_VISIBILITY_H
#define MEMHOOK_CORE_VISIBILITY_H

/* Internal to libmemhook.so: every cross-file name below the public API. */
#define MH_HIDDEN __attribute__((visibility("hidden")))

/* Internal, and printf-checked (arguments fmt_at, first vararg va_at). */
#define MH_HIDDEN_PRINTF(fmt_at, va_at) \
    __attribute__((visibility("hidden"), format(printf, fmt_at, va_at)))

/* A libc function the core replaces in every object of a process it is
 * preloaded into (csrc/trace/trace_exec.c): exported, as interposition
 * needs, but no part of the C API. */
#define MH_INTERPOSE __attribute__((visibility("default")))

/* A read-mostly variable that every hooked call reads (the switches and
 * cached pointers of the hook path).  Spread over the layers' .data and
 * .bss they sat on nine cache lines, each a miss after the real driver's
 * call has pushed memhook's lines out of L1; in one section of their own
 * (merged by the linker into one output section, started on a line by
 * core/hot.c's anchor, which links first) they share one.  Like Linux's
 * __read_mostly; never for a variable written on the hook path. */
#define MH_HOT __attribute__((section("memhook_hot")))

#endif
