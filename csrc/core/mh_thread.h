/* mh_thread.h - the core's own helper threads (the trace's streamer, memhook
 * run's keeper): started detached, small, and deaf to the program's signals. */
#ifndef MEMHOOK_CORE_THREAD_H
#define MEMHOOK_CORE_THREAD_H

#include "mh_visibility.h"

/* Start fn(NULL) on a detached thread named `name`, with every signal
 * blocked (a program's handler must never run on memhook's thread, nor its
 * SIGINT land there) and a 256 KiB stack.  Takes only glibc's own locks, so
 * it may be called from inside a hook.  Returns 0 or pthread_create's errno. */
MH_HIDDEN int mh_thread_start_quiet(void *(*fn)(void *), const char *name);

#endif
