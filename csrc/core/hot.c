/*
 * hot.c - the start of the hook path's read-mostly variables (MH_HOT,
 * mh_visibility.h).  core/ objects link first, so this anchor is the first
 * thing in the "memhook_hot" output section and its alignment puts the
 * section - under a cache line of switches and pointers - on a line of
 * its own.
 */
#include "mh_visibility.h"

MH_HOT _Alignas(64) char mh_hot_start;
