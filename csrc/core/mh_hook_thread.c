/*
 * mh_hook_thread.c - the hook path's thread-locals (mh_hook_thread.h).
 */
#include "mh_hook_thread.h"

/* Aligned so that the block is one line wherever the loader puts the
 * core's TLS (the TLS segment takes the largest alignment of its parts). */
__thread _Alignas(64) mh_hook_thread mh_hook_tl __attribute__((tls_model("initial-exec")));
