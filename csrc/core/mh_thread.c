/* mh_thread.c - see mh_thread.h. */
#include "mh_thread.h"

#include <pthread.h>
#include <signal.h>

int mh_thread_start_quiet(void *(*fn)(void *), const char *name)
{
    /* The mask is inherited: set it around the create, then put ours back. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t thread;
    int rc = pthread_create(&thread, &attr, fn, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        pthread_setname_np(thread, name);
    return rc;
}
