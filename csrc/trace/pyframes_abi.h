/*
 * pyframes_abi.h - what --python reads of a CPython interpreter it was
 * preloaded into, whatever its version: the struct offsets of each
 * supported version (pyframes_abi.c; tests/pyframes/test_layouts.py checks
 * every one against the headers of each CPython it finds), and the
 * interpreter found at run time (mh_py_rt).
 *
 * Offsets are of the release builds of CPython 3.9-3.13 on x86-64 Linux.
 * A build whose object header differs (Py_TRACE_REFS, the free-threaded
 * 3.13t) fails the check of pyframes_abi.c's discovery and gets no frames.
 */
#ifndef MEMHOOK_PYFRAMES_ABI_H
#define MEMHOOK_PYFRAMES_ABI_H

#include <stdbool.h>
#include <stdint.h>

#include "mh_visibility.h"

/* How a thread's frames are chained. */
enum {
    MH_PY_FRAME_OBJECTS = 1,  /* 3.9, 3.10: tstate->frame; PyFrameObject.f_back,
                                 f_lasti an int */
    MH_PY_CFRAME = 2,         /* 3.11, 3.12: tstate->cframe->current_frame;
                                 _PyInterpreterFrame.previous, prev_instr */
    MH_PY_CURRENT_FRAME = 3,  /* 3.13: tstate->current_frame; instr_ptr */
};

#define MH_PY_NO_OWNER 0xff

typedef struct mh_py_layout {
    uint8_t minor;             /* 3.minor */
    uint8_t chain;             /* MH_PY_* above */
    /* PyThreadState */
    uint16_t ts_thread_id;     /* PyThread_get_thread_ident() of its thread */
    uint16_t ts_frame;         /* frame / cframe / current_frame */
    uint16_t cframe_current;   /* _PyCFrame.current_frame (MH_PY_CFRAME) */
    /* a frame (PyFrameObject, _PyInterpreterFrame) */
    uint16_t fr_code;          /* f_code / f_executable */
    uint16_t fr_back;          /* f_back / previous */
    uint16_t fr_instr;         /* f_lasti (int) / prev_instr / instr_ptr */
    uint16_t fr_owner;         /* owner (a char); 3.11+ */
    uint8_t owner_generator;   /* FRAME_OWNED_BY_GENERATOR, or MH_PY_NO_OWNER */
    uint8_t owner_cstack;      /* FRAME_OWNED_BY_CSTACK (3.12+ shim frames) */
    /* PyCodeObject */
    uint16_t co_firstlineno;   /* int */
    uint16_t co_filename;      /* str */
    uint16_t co_qualname;      /* str: co_qualname, co_name before 3.11 */
    uint16_t co_linetable;     /* bytes: co_linetable, co_lnotab in 3.9 */
    uint16_t co_code_adaptive; /* 3.11+: where the instructions start */
    uint16_t co_firsttraceable;/* 3.11+: int, instructions before it are setup */
    /* str (PyASCIIObject: length at 16, state at 32 in every version) */
    uint16_t str_ascii_data;   /* sizeof(PyASCIIObject): an ASCII string's text */
    uint16_t str_compact_data; /* sizeof(PyCompactUnicodeObject): others' */
    uint8_t str_has_ready;     /* state.ready exists (bit 7; before 3.12) */
} mh_py_layout;

/* The layout of 3.minor, or NULL when it is not one memhook reads. */
MH_HIDDEN const mh_py_layout *mh_py_layout_for(unsigned minor);

/* The interpreter this process runs (found by pyframes_abi.c's
 * discovery): its layout, the C entry points the walk calls - accessors
 * that read a variable and take no lock (pyframes.c says why each is
 * safe) - and the type objects a pointer is checked against. */
typedef struct mh_py_runtime {
    const mh_py_layout *L;
    uint32_t version_hex;      /* PY_VERSION_HEX (major, minor, micro) */
    void *(*this_thread)(void);   /* PyGILState_GetThisThreadState */
    void *(*current)(void);       /* the thread-local current tstate (3.12+); NULL before */
    int (*initialized)(void);     /* Py_IsInitialized */
    int (*finalizing)(void);      /* _Py_IsFinalizing / Py_IsFinalizing */
    uintptr_t code_type, unicode_type, bytes_type;
} mh_py_runtime;

/* What discovery found: the runtime once published (acquire), else NULL;
 * and the state for records when it is NULL (MH_TRACE_PY_NO_PYTHON or
 * _UNSUPPORTED), with the version of an unsupported one. */
MH_HIDDEN extern const mh_py_runtime *_Atomic mh_py_rt;
MH_HIDDEN extern _Atomic uint32_t mh_py_missing;
MH_HIDDEN extern _Atomic uint32_t mh_py_found_version;

/* Look for the interpreter (dlsym), once it is not found yet: at load and
 * whenever the loaded objects change.  Never from a hook (dlsym takes the
 * loader's lock). */
MH_HIDDEN void mh_py_discover(void);
/* fork() child: the discovery lock made afresh (csrc/cuda/fork_order.c). */
MH_HIDDEN void mh_py_fork_child(void);

/* Reading the interpreter's memory.  A pointer the walk follows must be
 * non-null, 8-aligned and a user-space address; where it names an object
 * the object's type is checked too (pyframes.c). */
static inline bool mh_py_ptr_ok(uintptr_t p)
{
    return p >= 4096 && (p & 7) == 0 && p < ((uintptr_t)1 << 47);
}

static inline uintptr_t mh_py_word(uintptr_t p, unsigned off)
{
    return *(const uintptr_t *)(p + off);
}

static inline uintptr_t mh_py_type(uintptr_t obj) { return mh_py_word(obj, 8); }

#endif
