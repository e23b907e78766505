/*
 * pyframes_abi.c - the per-version layouts of pyframes_abi.h, and finding
 * the interpreter of this process at run time.
 *
 * The offsets were read from each version's headers (Include/cpython/
 * pystate.h, code.h, frameobject.h before 3.11, unicodeobject.h, bytesobject.h;
 * Include/internal/pycore_frame.h from 3.11) for x86-64 release builds;
 * tests/pyframes/test_layouts.py compiles offsetof() of each field against
 * every CPython's headers it finds and compares.  These structures change
 * between minor versions only (CPython keeps a minor's ABI stable across
 * its bugfix releases).
 *
 * Discovery: the core is preloaded into any program, before the
 * interpreter (if any) is initialized.  The interpreter's symbols are
 * global in every process that can run Python extensions (a python
 * executable, libpython as its DT_NEEDED, or an embedder that dlopened
 * libpython RTLD_GLOBAL - extensions resolve against them), so
 * dlsym(RTLD_DEFAULT) finds them; an embedder that loads libpython
 * RTLD_LOCAL gets no frames.  The version comes from Py_Version (3.11+)
 * or Py_GetVersion()'s text.  One check of the object header: the code
 * type's own ob_type, at offset 8, must be the type type - false for a
 * Py_TRACE_REFS or free-threaded build, whose headers differ.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "log.h"
#include "pyframes_abi.h"
#include "trace_proto.h"

/* offsetof()s of the 3.9.18, 3.10.13, 3.11.7, 3.12.1 and 3.13.0 headers. */
static const mh_py_layout k_layouts[] = {
    {.minor = 9, .chain = MH_PY_FRAME_OBJECTS,
     .ts_thread_id = 176, .ts_frame = 24,
     .fr_code = 32, .fr_back = 24, .fr_instr = 104,
     .owner_generator = MH_PY_NO_OWNER, .owner_cstack = MH_PY_NO_OWNER,
     .co_firstlineno = 40, .co_filename = 104, .co_qualname = 112, .co_linetable = 120,
     .str_ascii_data = 48, .str_compact_data = 72, .str_has_ready = 1},
    {.minor = 10, .chain = MH_PY_FRAME_OBJECTS,
     .ts_thread_id = 176, .ts_frame = 24,
     .fr_code = 32, .fr_back = 24, .fr_instr = 96,
     .owner_generator = MH_PY_NO_OWNER, .owner_cstack = MH_PY_NO_OWNER,
     .co_firstlineno = 40, .co_filename = 104, .co_qualname = 112, .co_linetable = 120,
     .str_ascii_data = 48, .str_compact_data = 72, .str_has_ready = 1},
    {.minor = 11, .chain = MH_PY_CFRAME,
     .ts_thread_id = 152, .ts_frame = 56, .cframe_current = 8,
     .fr_code = 32, .fr_back = 48, .fr_instr = 56, .fr_owner = 69,
     .owner_generator = 1, .owner_cstack = MH_PY_NO_OWNER,
     .co_firstlineno = 72, .co_filename = 112, .co_qualname = 128, .co_linetable = 136,
     .co_code_adaptive = 184, .co_firsttraceable = 168,
     .str_ascii_data = 48, .str_compact_data = 72, .str_has_ready = 1},
    {.minor = 12, .chain = MH_PY_CFRAME,
     .ts_thread_id = 136, .ts_frame = 56, .cframe_current = 0,
     .fr_code = 0, .fr_back = 8, .fr_instr = 56, .fr_owner = 70,
     .owner_generator = 1, .owner_cstack = 3,
     .co_firstlineno = 68, .co_filename = 112, .co_qualname = 128, .co_linetable = 136,
     .co_code_adaptive = 192, .co_firsttraceable = 176,
     .str_ascii_data = 40, .str_compact_data = 56},
    {.minor = 13, .chain = MH_PY_CURRENT_FRAME,
     .ts_thread_id = 152, .ts_frame = 72,
     .fr_code = 0, .fr_back = 8, .fr_instr = 56, .fr_owner = 70,
     .owner_generator = 1, .owner_cstack = 3,
     .co_firstlineno = 68, .co_filename = 112, .co_qualname = 128, .co_linetable = 136,
     .co_code_adaptive = 200, .co_firsttraceable = 184,
     .str_ascii_data = 40, .str_compact_data = 56},
};

const mh_py_layout *mh_py_layout_for(unsigned minor)
{
    for (size_t i = 0; i < sizeof k_layouts / sizeof k_layouts[0]; i++)
        if (k_layouts[i].minor == minor)
            return &k_layouts[i];
    return NULL;
}

/* Process-wide by nature: a process has one interpreter.  g_found is
 * written once, before mh_py_rt publishes it (release). */
static mh_py_runtime g_found;
const mh_py_runtime *_Atomic mh_py_rt;
_Atomic uint32_t mh_py_missing = MH_TRACE_PY_NO_PYTHON;
_Atomic uint32_t mh_py_found_version;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_gave_up;  /* under g_lock: an interpreter memhook cannot read */

/* A discovery another thread was in at fork() never ends in the child (its
 * lock is not held across fork: csrc/core/mh_lock_order.h).  Run by
 * csrc/cuda/fork_order.c with every other module's child handler. */
void mh_py_fork_child(void) { pthread_mutex_init(&g_lock, NULL); }

static void *sym(const char *name) { return dlsym(RTLD_DEFAULT, name); }

/* "3.10.13 (main, ...)" -> 0x030a0d00; 0 when it does not start so. */
static uint32_t parse_version(const char *text)
{
    unsigned part[3] = {0, 0, 0};
    const char *p = text;
    for (int i = 0; i < 3; i++) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v > 255)
            return i == 2 ? part[0] << 24 | part[1] << 16 : 0;
        part[i] = (unsigned)v;
        if (*end != '.')
            return i >= 1 ? part[0] << 24 | part[1] << 16 | part[2] << 8 : 0;
        p = end + 1;
    }
    return part[0] << 24 | part[1] << 16 | part[2] << 8;
}

static uint32_t interpreter_version(void)
{
    const unsigned long *hex = sym("Py_Version");
    if (hex != NULL)
        return (uint32_t)*hex;
    const char *(*get)(void) = (const char *(*)(void))sym("Py_GetVersion");
    return get != NULL ? parse_version(get()) : 0;
}

static void give_up(uint32_t version, const char *why)
{
    g_gave_up = true;
    atomic_store(&mh_py_found_version, version);
    atomic_store(&mh_py_missing, MH_TRACE_PY_UNSUPPORTED);
    mh_info("memhook trace --python: Python %u.%u here: %s; its allocations get no Python "
            "frames", version >> 24, (version >> 16) & 0xff, why);
}

void mh_py_discover(void)
{
    if (atomic_load_explicit(&mh_py_rt, memory_order_acquire) != NULL)
        return;
    pthread_mutex_lock(&g_lock);
    if (g_gave_up || atomic_load(&mh_py_rt) != NULL || sym("Py_IsInitialized") == NULL) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    uint32_t version = interpreter_version();
    mh_py_runtime rt = {.version_hex = version};
    rt.L = version >> 24 == 3 ? mh_py_layout_for((version >> 16) & 0xff) : NULL;
    rt.this_thread = (void *(*)(void))sym("PyGILState_GetThisThreadState");
    rt.initialized = (int (*)(void))sym("Py_IsInitialized");
    rt.finalizing = (int (*)(void))sym(rt.L != NULL && rt.L->minor >= 13 ? "Py_IsFinalizing"
                                                                          : "_Py_IsFinalizing");
    if (rt.L != NULL && rt.L->minor >= 12)
        rt.current = (void *(*)(void))sym(rt.L->minor >= 13 ? "PyThreadState_GetUnchecked"
                                                            : "_PyThreadState_UncheckedGet");
    rt.code_type = (uintptr_t)sym("PyCode_Type");
    rt.unicode_type = (uintptr_t)sym("PyUnicode_Type");
    rt.bytes_type = (uintptr_t)sym("PyBytes_Type");
    uintptr_t type_type = (uintptr_t)sym("PyType_Type");
    if (rt.L == NULL)
        give_up(version, "memhook reads CPython 3.9-3.13");
    else if (rt.this_thread == NULL || rt.finalizing == NULL || !rt.code_type ||
             !rt.unicode_type || !rt.bytes_type || !type_type ||
             (rt.L->minor >= 12 && rt.current == NULL))
        give_up(version, "an entry point it needs is not exported");
    else if (mh_py_type(rt.code_type) != type_type)
        give_up(version, "its objects' header is not the release build's (a debug or "
                         "free-threaded build)");
    else {
        g_found = rt;
        atomic_store(&mh_py_found_version, version);
        atomic_store_explicit(&mh_py_rt, &g_found, memory_order_release);
        mh_debug("memhook trace --python: reading Python %u.%u.%u frames", version >> 24,
                 (version >> 16) & 0xff, (version >> 8) & 0xff);
    }
    pthread_mutex_unlock(&g_lock);
}
