/* control.c - the core's long control calls, as builtins of the extension
 * memhook._native that keep the GIL (memhook/_binding/control.py wraps them).
 *
 * cffi releases the GIL around every call it makes.  A call that runs long
 * (installing or removing the hooks, reading the hook table, walking
 * /proc/self/maps, taking a batch of events) then gives the GIL to another
 * Python thread, and in a process whose threads keep it busy the caller
 * waits its turn when the call returns: that is what these builtins avoid.
 * memhook/_binding/control.py says why holding the GIL across them is safe.
 *
 * Arrays come in as writable buffers (cffi's ffi.buffer of the caller's
 * array), checked against the count asked for, so a wrong size is an
 * error here, never a write past the caller's memory.
 *
 * The limited API as in query.c. */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_DEBUG) && !defined(Py_TRACE_REFS) && \
    !defined(Py_REF_DEBUG)
#define Py_LIMITED_API 0x030b0000
#endif
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "memhook/memhook.h"
#include "memhook_internal/api.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A writable buffer an argument brings: argv[arg], of at least `count`
 * items of `item` bytes; `what` names it in the error. */
typedef struct out_buffer {
    Py_ssize_t arg;
    size_t count, item;
    const char *what;
} out_buffer;

/* `obj`'s writable buffer, of at least `count` items of `item` bytes:
 * 0, or -1 with the exception naming `what`. */
static int writable(PyObject *obj, size_t count, size_t item, const char *what, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE) != 0)
        return -1;
    if (count > (size_t)view->len / item) {
        PyErr_Format(PyExc_ValueError, "%s: a buffer of %zd bytes holds fewer than the %zu "
                     "items of %zu bytes asked for", what, view->len, count, item);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static void release(Py_buffer *views, size_t n)
{
    while (n > 0)
        PyBuffer_Release(&views[--n]);
}

/* views[i], the buffer of want[i], for each of the n: 0, or -1 with the
 * first refusal's exception and none of them held. */
static int writables(PyObject *const *argv, const out_buffer *want, size_t n, Py_buffer *views)
{
    for (size_t i = 0; i < n; i++)
        if (writable(argv[want[i].arg], want[i].count, want[i].item, want[i].what,
                     &views[i]) != 0) {
            release(views, i);
            return -1;
        }
    return 0;
}

static int nargs(const char *name, Py_ssize_t argc, Py_ssize_t want)
{
    if (argc == want)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, argc);
    return -1;
}

/* `name`'s argc is `want`, and argv[1] (the count of the array that
 * argv[0] brings) a size, *count: 0, or -1 with the exception. */
static int args_with_count(const char *name, PyObject *const *argv, Py_ssize_t argc,
                           Py_ssize_t want, size_t *count)
{
    if (nargs(name, argc, want) != 0)
        return -1;
    size_t v = PyLong_AsSize_t(argv[1]);
    if (v == (size_t)-1 && PyErr_Occurred())
        return -1;
    *count = v;
    return 0;
}

/* control_install(mode) -> (rc, reason): memhook_hooks_install. */
static PyObject *control_install(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    char why[512] = "";
    if (nargs("control_install", argc, 1) != 0)
        return NULL;
    unsigned long mode = PyLong_AsUnsignedLong(argv[0]);
    if (mode == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (mode > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "control_install: mode %lu is not a mode word", mode);
        return NULL;
    }
    int rc = memhook_hooks_install((unsigned)mode, why, sizeof why);
    why[sizeof why - 1] = '\0';
    return Py_BuildValue("(iN)", rc, PyUnicode_DecodeUTF8(why, (Py_ssize_t)strlen(why),
                                                          "replace"));
}

/* control_uninstall() -> rc: memhook_hooks_uninstall. */
static PyObject *control_uninstall(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(memhook_hooks_uninstall());
}

/* control_coverage_complete() -> bool: memhook_hooks_coverage_complete
 * (a dlopen and a dlsym per driver function). */
static PyObject *control_coverage_complete(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyBool_FromLong(memhook_hooks_coverage_complete());
}

/* control_queue_stats(buffer): memhook_queue_stats_get into it (it waits
 * for the drain under way in another thread, if any). */
static PyObject *control_queue_stats(PyObject *self, PyObject *buffer)
{
    (void)self;
    Py_buffer view;
    if (writable(buffer, 1, sizeof(memhook_queue_stats), "control_queue_stats", &view) != 0)
        return NULL;
    memhook_queue_stats_get(view.buf);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* control_events_drain_into(events, capacity, mark, filled) -> count:
 * memhook_events_drain_into, into events[filled[0]:capacity]. */
static PyObject *control_events_drain_into(PyObject *self, PyObject *const *argv,
                                           Py_ssize_t argc)
{
    (void)self;
    size_t capacity;
    if (args_with_count("control_events_drain_into", argv, argc, 4, &capacity) != 0)
        return NULL;
    const out_buffer want[] = {{0, capacity, sizeof(memhook_event), "events"},
                               {2, 1, sizeof(uint64_t), "mark"},
                               {3, 1, sizeof(uint64_t), "filled"}};
    Py_buffer v[COUNT(want)];
    if (writables(argv, want, COUNT(want), v) != 0)
        return NULL;
    size_t n = memhook_events_drain_into(v[0].buf, capacity, v[1].buf, v[2].buf);
    release(v, COUNT(v));
    return PyLong_FromSize_t(n);
}

/* control_events_drain(events, capacity, mark) -> count:
 * memhook_events_drain_bounded. */
static PyObject *control_events_drain(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    size_t capacity;
    if (args_with_count("control_events_drain", argv, argc, 3, &capacity) != 0)
        return NULL;
    const out_buffer want[] = {{0, capacity, sizeof(memhook_event), "events"},
                               {2, 1, sizeof(uint64_t), "mark"}};
    Py_buffer v[COUNT(want)];
    if (writables(argv, want, COUNT(want), v) != 0)
        return NULL;
    size_t n = memhook_events_drain_bounded(v[0].buf, capacity, v[1].buf);
    release(v, COUNT(v));
    return PyLong_FromSize_t(n);
}

/* control_hook_rows(table, count) -> filled: memhook_hook_get_range(0,
 * count, table). */
static PyObject *control_hook_rows(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    size_t count;
    Py_buffer table;
    if (args_with_count("control_hook_rows", argv, argc, 2, &count) != 0 ||
        writable(argv[0], count, sizeof(memhook_hook_info), "table", &table) != 0)
        return NULL;
    size_t n = memhook_hook_get_range(0, count, table.buf);
    PyBuffer_Release(&table);
    return PyLong_FromSize_t(n);
}

/* control_cuda_reserved_ranges() -> [(start, end), ...] in address order,
 * or None where the maps cannot be read. */
static PyObject *control_cuda_reserved_ranges(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    size_t cap = 256;
    for (;;) {
        uint64_t *pairs = PyMem_Malloc(2 * cap * sizeof *pairs);
        if (pairs == NULL)
            return PyErr_NoMemory();
        long long n = memhook_cuda_reserved_ranges(pairs, cap);
        if (n >= 0 && (size_t)n > cap) {
            /* (mappings came and went between the core's two walks) */
            PyMem_Free(pairs);
            cap = (size_t)n + 64;
            continue;
        }
        PyObject *out = n < 0 ? Py_None : PyList_New((Py_ssize_t)n);
        if (out == Py_None)
            Py_INCREF(out);
        for (long long i = 0; out != NULL && out != Py_None && i < n; i++) {
            PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)pairs[2 * i],
                                           (unsigned long long)pairs[2 * i + 1]);
            if (pair == NULL || PyList_SetItem(out, (Py_ssize_t)i, pair) != 0)
                Py_CLEAR(out);
        }
        PyMem_Free(pairs);
        return out;
    }
}

static PyMethodDef methods[] = {
    {"control_install", (PyCFunction)(void (*)(void))control_install, METH_FASTCALL,
     "control_install(mode) -> (rc, reason), the GIL held"},
    {"control_uninstall", control_uninstall, METH_NOARGS,
     "control_uninstall() -> rc, the GIL held"},
    {"control_coverage_complete", control_coverage_complete, METH_NOARGS,
     "control_coverage_complete() -> bool, the GIL held"},
    {"control_queue_stats", control_queue_stats, METH_O,
     "control_queue_stats(buffer): memhook_queue_stats_get, the GIL held"},
    {"control_events_drain", (PyCFunction)(void (*)(void))control_events_drain, METH_FASTCALL,
     "control_events_drain(events, capacity, mark) -> count, the GIL held"},
    {"control_events_drain_into", (PyCFunction)(void (*)(void))control_events_drain_into,
     METH_FASTCALL, "control_events_drain_into(events, capacity, mark, filled) -> count"},
    {"control_hook_rows", (PyCFunction)(void (*)(void))control_hook_rows, METH_FASTCALL,
     "control_hook_rows(table, count) -> rows filled, the GIL held"},
    {"control_cuda_reserved_ranges", control_cuda_reserved_ranges, METH_NOARGS,
     "control_cuda_reserved_ranges() -> [(start, end)] or None, the GIL held"},
    {NULL, NULL, 0, NULL},
};

/* Add the builtins above to the extension module `m` (its init calls
 * this): 0, or -1 with an exception. */
int memhook_pyext_control_add(PyObject *m)
{
    return PyModule_AddFunctions(m, methods);
}
