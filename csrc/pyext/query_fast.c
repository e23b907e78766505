/* query_fast.c - memhook.memory_type's fast path, in C: one call, no GIL
 * release, for a single pointer (a Python int) of the process-wide cache.
 *
 * The Python fast path paid for a Python call to the drain's check, a load
 * of the core's pending flag through cffi, a bisect over a list of Python
 * ints (a cache miss per step, ~300 ns over 10,000 regions) and, on a HOST
 * answer, a cffi call for the coverage token (cffi releases and retakes the
 * GIL around it).  Here the same checks, in the same order, read memory:
 *
 *   1. the core's pending flag, then the drain's `_quiet` (its module
 *      dict): both clear of work means every event published before this
 *      query is in the cache (memhook/_drain.py, query_drain);
 *   2. the cache's `_flat` is still the tuple the snapshot was made from:
 *      every cache write replaces `_flat` (memhook/cache.py), so an
 *      unchanged one proves the snapshot holds every write so far;
 *   3. a binary search over the snapshot's bounds (a flat uint64 array);
 *   4. a HOST answer only while the coverage memo of memhook/_coverage.py
 *      (which it hands over here as it stores it) is (the core's token
 *      now, the install epoch now, True).
 *
 * Any check that fails answers None: the caller takes the Python path,
 * which drains, asks the driver, or waits, as before.  So this path never
 * answers what the Python path would not.
 *
 * memhook.lookup's fast path (fast_region) makes the same checks and
 * answers with the cache's own Region object for the interval found (a
 * tuple of them, in address order, comes with the snapshot), None for
 * host memory the coverage memo vouches for, False where it declines.
 *
 * Built into the cffi extension (memhook._native), but called as a
 * CPython builtin: cffi would release the GIL around each call, which both
 * costs and lets another thread in between the checks.  Only the stable
 * ABI is used where the extension is abi3.  This code never releases the
 * GIL and calls no Python code (dict reads of str keys, int conversions);
 * its whole argument for consistency is the GIL, so a free-threaded
 * CPython gets no fast path (memhook_query_fast_functions returns 0).
 * What it may wait for with the GIL held: on a HOST answer the token's
 * dl_iterate_phdr takes the loader's list lock, which a dlopen or dlclose
 * holds only while it links or unlinks an object (not across the
 * constructors and destructors it runs), and which no code holding it
 * waits on the GIL for; the token takes no lock of memhook's own. */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_DEBUG) && !defined(Py_TRACE_REFS) && \
    !defined(Py_REF_DEBUG)
#define Py_LIMITED_API 0x03090000 /* (as cffi builds the rest of the extension) */
#endif
#include <Python.h>

#include <limits.h>
#include <stdint.h>

#include "memhook/memhook.h"

#if ULONG_MAX != UINT64_MAX
#error "query_fast.c reads a pointer as an unsigned long: 64 bits"
#endif

#define HOST_CODE 0
#define UNKNOWN_CODE 4
#define TYPE_CODES 5
/* Bounds per block of the two-level search: 16 uint64s are two cache
 * lines, and the top level (one bound in 16: 10 KB for 10,000 regions)
 * stays in the L1 cache, so a cold query misses about twice instead of
 * once per step of a plain binary search over the whole array. */
#define TOP_STEP 16

/* Global because there is one process-wide cache and one query path per
 * process.  Read and written with the GIL held only (configure, publish
 * and fast_type all run under it and never release it), so a query sees
 * one whole state. */
static struct {
    const volatile uint32_t *pending; /* the core's pending flag; NULL: no drain check */
    PyObject *idle_ns;                /* the drain's module dict (NULL: no drain check) */
    int cov_armed;                    /* the coverage answer is memhook._coverage's: see below */
    /* memhook._coverage's memo, as it stores it (coverage_memo) and its
     * install epoch (coverage_epoch): a HOST answer only while the memo
     * says True for the core's token now and the epoch now. */
    unsigned long long memo_token, memo_epoch, epoch;
    int memo_answer;
    PyObject *query_ns;               /* memhook._query's dict (its _process_cache); NULL: disarmed */
    PyObject *types;                  /* MemoryType members by code */
    PyObject *flat;                   /* the cache's _flat the snapshot was made from */
    PyObject *snap;                   /* bytes: n uint64 bounds, then n + 1 type codes */
    PyObject *regions;                /* the n / 2 Regions between those bounds, in order */
    const uint64_t *bounds;
    const uint8_t *codes;
    Py_ssize_t n;
    uint64_t *top;  /* every TOP_STEP-th bound (PyMem_Malloc'd): see find() */
    Py_ssize_t ntop;
} q;

static PyObject *s_flat, *s_quiet, *s_cache;

/* The index of the first of bounds[0..n) greater than v (n when none):
 * without a branch on the comparison, because the comparisons of a random
 * pointer mispredict half the time - that, more than the memory, was the
 * cost of a branching search.  A step adds (bound <= v) * half to an index:
 * compilers keep that arithmetic branchless, where a choice between two
 * pointers became a branch at gcc -O2 and -O3 (csrc/pyext/batch_search.c
 * has the figures). */
static Py_ssize_t upper_bound(const uint64_t *bounds, Py_ssize_t n, uint64_t v)
{
    if (n == 0)
        return 0;
    Py_ssize_t pos = 0;
    while (n > 1) {
        Py_ssize_t half = n >> 1;
        pos += (Py_ssize_t)(bounds[pos + half] <= v) * half;
        n -= half;
    }
    return pos + (bounds[pos] <= v);
}

/* bisect_right(bounds, v): the index of the first bound greater than v. */
static Py_ssize_t find(uint64_t v)
{
    Py_ssize_t k = upper_bound(q.top, q.ntop, v); /* top[k - 1] <= v < top[k] */
    if (k == 0)
        return 0; /* (v < bounds[0]) */
    Py_ssize_t first = (k - 1) * TOP_STEP + 1; /* bounds[first - 1] <= v */
    Py_ssize_t stop = k * TOP_STEP < q.n ? k * TOP_STEP : q.n; /* bounds[stop] > v, or the end */
    return first + upper_bound(q.bounds + first, stop - first, v);
}

/* The coverage memo says the hooks vouch for every allocation now. */
static int vouched(void)
{
    return q.cov_armed && q.memo_answer && q.memo_epoch == q.epoch &&
           q.memo_token == memhook_coverage_token();
}

/* An address of the process cache's state now, which the snapshot is of:
 * the checks of the header's steps 1 and 2, and ptr a plain int in
 * [0, 2**64).  0 (and *v unset) when any fails. */
static int current_address(PyObject *ptr, uint64_t *v)
{
    if (Py_TYPE(ptr) != &PyLong_Type || q.flat == NULL || q.query_ns == NULL)
        return 0;
    if (q.idle_ns != NULL) {
        if (*q.pending != 0)
            return 0;
        if (PyDict_GetItem(q.idle_ns, s_quiet) != Py_True)
            return 0;
    }
    /* (read from the module each time: a test may swap the process cache) */
    PyObject *cache = PyDict_GetItem(q.query_ns, s_cache);
    if (cache == NULL)
        return 0;
    PyObject *flat = PyObject_GetAttr(cache, s_flat);
    if (flat == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(flat); /* (the cache holds it; only its identity matters) */
    if (flat != q.flat)
        return 0;
    /* (unsigned long is 64 bits here, and cheaper to convert to than
     * unsigned long long, which goes through a byte array) */
    unsigned long a = PyLong_AsUnsignedLong(ptr);
    if (a == (unsigned long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative, or past 2**64: the Python path says why */
        return 0;
    }
    *v = a;
    return 1;
}

static PyObject *fast_type(PyObject *self, PyObject *ptr)
{
    (void)self;
    uint64_t v;
    if (!current_address(ptr, &v))
        Py_RETURN_NONE;
    unsigned code = q.codes[find(v)];
    if (code >= TYPE_CODES || code == UNKNOWN_CODE || (code == HOST_CODE && !vouched()))
        Py_RETURN_NONE;
    PyObject *t = PyTuple_GetItem(q.types, (Py_ssize_t)code);
    Py_XINCREF(t);
    return t;
}

/* fast_region(ptr, size): lookup(ptr, size)'s answer - the Region holding
 * [ptr, ptr + size), None for host memory - or False where the Python path
 * must answer: a range not inside one interval of the snapshot (it
 * straddles regions, or a region and a gap), an UNKNOWN region (the driver
 * is asked), host memory not vouched for, or any check of fast_type's. */
static PyObject *fast_region(PyObject *self, PyObject *args)
{
    (void)self;
    uint64_t v;
    if (PyTuple_Size(args) != 2 || q.regions == NULL ||
        !current_address(PyTuple_GetItem(args, 0), &v))
        Py_RETURN_FALSE;
    PyObject *size = PyTuple_GetItem(args, 1);
    if (Py_TYPE(size) != &PyLong_Type)
        Py_RETURN_FALSE;
    unsigned long n = PyLong_AsUnsignedLong(size);
    if (n == 0 || (n == (unsigned long)-1 && PyErr_Occurred()) || n - 1 > UINT64_MAX - v) {
        PyErr_Clear(); /* (no byte, or past 2**64: the Python path says why) */
        Py_RETURN_FALSE;
    }
    Py_ssize_t k = find(v);
    if (n > 1 && find(v + (n - 1)) != k)
        Py_RETURN_FALSE;
    unsigned code = q.codes[k];
    if ((k & 1) == 0) { /* a gap between regions: host memory, if vouched */
        if (code == HOST_CODE && vouched())
            Py_RETURN_NONE;
        Py_RETURN_FALSE;
    }
    if (code >= TYPE_CODES || code == UNKNOWN_CODE)
        Py_RETURN_FALSE;
    PyObject *r = PyTuple_GetItem(q.regions, k >> 1);
    if (r == NULL) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    Py_INCREF(r);
    return r;
}

static void set(PyObject **slot, PyObject *value)
{
    PyObject *old = *slot;
    if (value == Py_None)
        value = NULL;
    Py_XINCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

/* configure(pending_address, drain_dict, coverage_armed, query_dict, types):
 * what fast_type reads (drain_dict None: no drain check; coverage_armed
 * false: HOST answers go to Python; query_dict None: disarmed).  Drops the
 * snapshot. */
static PyObject *configure(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long pending;
    PyObject *idle_ns, *query_ns, *types;
    int cov_armed;
    if (!PyArg_ParseTuple(args, "KOpOO", &pending, &idle_ns, &cov_armed, &query_ns, &types))
        return NULL;
    if ((idle_ns != Py_None && (!PyDict_Check(idle_ns) || pending == 0)) ||
        (query_ns != Py_None && !PyDict_Check(query_ns)) || !PyTuple_Check(types) ||
        PyTuple_Size(types) != TYPE_CODES) {
        PyErr_SetString(PyExc_TypeError, "configure(pending_address, drain dict or None, "
                                         "coverage armed, query dict or None, 5 types)");
        return NULL;
    }
    set(&q.flat, Py_None);
    set(&q.snap, Py_None);
    set(&q.regions, Py_None);
    q.pending = (const volatile uint32_t *)(uintptr_t)pending;
    set(&q.idle_ns, idle_ns);
    q.cov_armed = cov_armed;
    set(&q.types, types);
    set(&q.query_ns, query_ns);
    Py_RETURN_NONE;
}

/* publish(flat, snapshot, n, regions): answer from `snapshot` (bytes: n
 * native uint64 bounds in order, then n + 1 type codes) and `regions` (a
 * tuple of the n / 2 Regions the bounds are the starts and ends of) while
 * the cache's _flat is `flat`; publish(None, None, 0, None) drops it. */
static PyObject *publish(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *flat, *snap, *regions;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OOnO", &flat, &snap, &n, &regions))
        return NULL;
    if (flat == Py_None || q.query_ns == NULL) {
        set(&q.flat, Py_None);
        set(&q.snap, Py_None);
        set(&q.regions, Py_None);
        Py_RETURN_NONE;
    }
    if (!PyBytes_Check(snap) || n < 0 || (n & 1) != 0 || PyBytes_Size(snap) != n * 9 + 1 ||
        !PyTuple_Check(regions) || PyTuple_Size(regions) != n / 2) {
        PyErr_SetString(PyExc_ValueError, "publish: the snapshot must be n * 8 bytes of "
                                          "bounds and n + 1 type codes, n even, and a tuple "
                                          "of the n / 2 regions");
        return NULL;
    }
    Py_ssize_t ntop = (n + TOP_STEP - 1) / TOP_STEP;
    uint64_t *top = PyMem_Malloc((size_t)(ntop ? ntop : 1) * sizeof *top);
    if (top == NULL)
        return PyErr_NoMemory();
    set(&q.flat, Py_None); /* (no answer while the state is half-set) */
    set(&q.snap, snap);
    set(&q.regions, regions);
    const char *data = PyBytes_AsString(snap);
    q.bounds = (const uint64_t *)(const void *)data; /* (bytes data is aligned to 8) */
    q.codes = (const uint8_t *)data + n * 8;
    q.n = n;
    for (Py_ssize_t i = 0; i < ntop; i++)
        top[i] = q.bounds[i * TOP_STEP];
    PyMem_Free(q.top);
    q.top = top;
    q.ntop = ntop;
    set(&q.flat, flat);
    Py_RETURN_NONE;
}

/* coverage_memo(token, epoch, answer): memhook._coverage stored this memo. */
static PyObject *coverage_memo(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long token, epoch;
    int answer;
    if (!PyArg_ParseTuple(args, "KKp", &token, &epoch, &answer))
        return NULL;
    q.memo_token = token;
    q.memo_epoch = epoch;
    q.memo_answer = answer;
    Py_RETURN_NONE;
}

/* coverage_epoch(epoch): memhook._coverage's install epoch moved. */
static PyObject *coverage_epoch(PyObject *self, PyObject *epoch)
{
    (void)self;
    unsigned long long e = PyLong_AsUnsignedLongLong(epoch);
    if (e == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    q.epoch = e;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"fast_type", fast_type, METH_O, "memory_type(ptr)'s fast path, or None"},
    {"fast_region", fast_region, METH_VARARGS, "lookup(ptr, size)'s fast path, or False"},
    {"configure", configure, METH_VARARGS, "what fast_type reads"},
    {"publish", publish, METH_VARARGS, "the snapshot fast_type answers from"},
    {"coverage_memo", coverage_memo, METH_VARARGS, "memhook._coverage's memo"},
    {"coverage_epoch", coverage_epoch, METH_O, "memhook._coverage's install epoch"},
};
#define FUNCTIONS ((Py_ssize_t)(sizeof methods / sizeof methods[0]))

/* The functions of methods[], in its order, as a tuple (a new reference, for the caller to take
 * with ctypes.py_object), or 0 on failure.  Called through cffi, which has
 * released the GIL: it takes it back for the while. */
uintptr_t memhook_query_fast_functions(void)
{
#ifdef Py_GIL_DISABLED
    return 0;
#endif
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *out = NULL;
    if (s_flat == NULL) {
        s_flat = PyUnicode_InternFromString("_flat");
        s_quiet = PyUnicode_InternFromString("_quiet");
        s_cache = PyUnicode_InternFromString("_process_cache");
    }
    if (s_flat != NULL && s_quiet != NULL && s_cache != NULL) {
        out = PyTuple_New(FUNCTIONS);
        for (Py_ssize_t i = 0; out != NULL && i < FUNCTIONS; i++) {
            PyObject *fn = PyCFunction_NewEx(&methods[i], NULL, NULL);
            if (fn == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyTuple_SetItem(out, i, fn);
        }
    }
    if (out == NULL)
        PyErr_Clear();
    PyGILState_Release(gil);
    return (uintptr_t)out;
}
