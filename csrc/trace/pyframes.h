/*
 * pyframes.h - --python: each ALLOC's Python frames, read in the hook on
 * the allocating thread (pyframes.c says how, and why it is safe), as raw
 * (code, instruction) pairs into the ALLOC's Python record; each code
 * object's identity goes into a code record once (pycode.c), and the
 * collector turns both into file, line and function
 * (memhook/tracing/pyframes.py).  Layouts: trace_proto.h.
 */
#ifndef MEMHOOK_PYFRAMES_H
#define MEMHOOK_PYFRAMES_H

#include <stdint.h>

#include "mh_visibility.h"
#include "pyframes_abi.h"
#include "trace_proto.h"

/* From trace.c at load when MEMHOOK_TRACE_PYTHON asks for frames:
 * look for the interpreter now and whenever the loaded objects change
 * until it is found. */
MH_HIDDEN void mh_pyframes_watch(void);

/* A new area (at load, in a fork child): tell it the interpreter's
 * version, and stop naming code records of an older area.  Before any
 * hook writes into it. */
MH_HIDDEN void mh_pyframes_area_ready(mh_trace_area *a);

/* The hook's part: the calling thread's frames into a Python record of
 * the ALLOC's own; 1 + its word offset, or 0 when the records are used
 * up (counted in py_lost). */
MH_HIDDEN uint64_t mh_pyframes_record(mh_trace_area *a);

/* pycode.c, for the walk: the code record of the (checked) code object
 * `code` - found in the cache, or written now - as 1 + its offset / 8;
 * 0 when it cannot be recorded. */
MH_HIDDEN uint32_t mh_pycode_ref(mh_trace_area *a, const mh_py_runtime *rt, uintptr_t code);
/* pycode.c: forget the cache (its entries name an older area's records). */
MH_HIDDEN void mh_pycode_area_ready(void);

#endif
