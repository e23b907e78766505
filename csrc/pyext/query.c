/* query.c - memhook.memory_type / lookup in C: the argument normalised,
 * then one call into the core's cache (memhook_query).
 *
 * Builtins of the cffi extension memhook._native, not cffi functions: a
 * cffi call converts each argument and releases the GIL, most of a query's
 * cost, and cannot take an object (docs/design/python-queries.md).
 *
 * Read here, without calling Python code: an exact int, bytes, bytearray,
 * and objects of the types memhook/_queries/query.py has taught (`kinds`, checked
 * on a first object against memhook._queries.inputs.byte_range): the buffer
 * protocol, a ctypes integer's own bytes, __index__, __int__ (a pointer
 * handle), __cuda_array_interface__, DLPack, the interface else DLPack
 * (Python's order), a PyTorch tensor's own methods, and a CuPy array's own
 * attributes.  Anything else or odd (an error, an empty extent, a
 * malformed interface) goes to the Python normaliser (`fallback`): this
 * file never answers what Python would not, and never words an error.
 *
 * The GIL is held throughout (memhook_query takes no lock a Python thread
 * could hold and never calls Python); the configured objects below are
 * read and replaced under it.
 *
 * Limited API 3.11 (the buffer protocol), whose symbols every CPython 3.9+
 * exports, so the wheel stays cp39-abi3; free-threaded and debug builds
 * take the full API (python-queries.md). */
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && !defined(Py_DEBUG) && !defined(Py_TRACE_REFS) && \
    !defined(Py_REF_DEBUG)
#define Py_LIMITED_API 0x030b0000
#endif
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "memhook/memhook.h"

#ifdef Py_LIMITED_API
/* Public and exported since Python 3.9, declared by the limited API's
 * headers from 3.12: a method call with keywords and no tuple or dict made
 * for it (the DLPack calls below). */
PyAPI_FUNC(PyObject *) PyObject_VectorcallMethod(PyObject *name, PyObject *const *args,
                                                 size_t nargsf, PyObject *kwnames);
#endif

#define TYPE_CODES 5

/* How an object of a learned type is read (memhook/_queries/query.py's _KIND_*). */
enum kind {
    KIND_BUFFER = 1, /* the buffer protocol: its storage */
    KIND_INDEX = 3,  /* __index__ */
    KIND_INT = 4,    /* __int__ (a pointer handle) */
    KIND_CAI = 5,    /* __cuda_array_interface__ */
    KIND_DLPACK = 6, /* __dlpack__ (versioned capsule, 1.x) */
    KIND_CTYPES_UNSIGNED = 7, /* a ctypes unsigned integer or c_void_p: its bytes */
    KIND_CTYPES_SIGNED = 8,   /* a ctypes signed integer: its bytes */
    KIND_CAI_DLPACK = 9, /* __cuda_array_interface__, else (it raised) DLPack */
    KIND_TORCH = 10,     /* a PyTorch tensor's own methods (tensor_range) */
    KIND_CUPY = 11,      /* a CuPy array's own attributes (cupy_range) */
};

/* Set once by memhook/_queries/query.py (query_configure); global because the
 * extension has one process cache to answer for. */
static struct {
    PyObject *types;       /* MemoryType members by code (a tuple) */
    PyObject *type_of[TYPE_CODES]; /* its items, borrowed from it */
    PyObject *make_region; /* (start, size, MemoryType, device) -> Region */
    /* Region made here where its fields are slots (Python 3.10+): the
     * type's allocator and each field's member descriptor, set as the
     * frozen dataclass's own trusted constructor sets them
     * (memhook/_values/types.py's _region_factory), without a call into Python. */
    PyObject *region_type;
    allocfunc region_alloc;
    PyObject *region_field[4];
    descrsetfunc region_set[4];
    PyObject *fallback;    /* (obj, size) -> (start, n), or raises */
    PyObject *kinds;       /* dict: type -> enum kind */
    /* The subscribers' delivery: while events wait in the core's queue
     * (its pending flag) and `registry.current` holds a subscription, a
     * query first calls deliver() (memhook._events.drain.query_drain), which hands
     * subscribers what it can without waiting, as queries always have. */
    PyObject *registry, *deliver;
    const volatile uint32_t *pending;
} g;

static PyObject *s_dlpack, *s_dlpack_device, *s_max_version;
/* __dlpack__'s keywords, made once: max_version=(1, 0), and stream=-1 (the
 * protocol's "no synchronisation": only metadata is read) off the CPU;
 * their names as vectorcall takes them (interned: matched by identity). */
static PyObject *v_max_version, *v_no_sync, *kwnames_cpu, *kwnames_device;
static PyObject *s_data_ptr, *s_stride, *s_element_size, *s_itemsize;
static PyObject *s_ptr, *s_size; /* the public keywords */
static PyObject *s_current, *s_cai, *s_data, *s_shape, *s_strides, *s_stream;

/* (PyLong_AsUnsignedLong and PyLong_AsLong read the digits in a loop;
 * the long long forms go through a byte-array conversion, several times
 * dearer for an address: long is 64 bits on every platform memhook runs
 * on.) */
_Static_assert(sizeof(long) == 8, "an LP64 platform");

/* A reader below failed: the Python path answers instead, so its error is
 * cleared - unless it is no Exception (a KeyboardInterrupt from a ^C that
 * landed in a producer's property or method, SystemExit...), which Python's
 * normaliser would let through: that one is kept aside, for the entry
 * point to raise again once the readers are done (raise_kept).  Per
 * thread: a free-threaded build runs readers at once. */
static _Thread_local struct {
    PyObject *type, *value, *traceback;
} t_kept;

static void read_failed(void)
{
    if (t_kept.type == NULL && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Fetch(&t_kept.type, &t_kept.value, &t_kept.traceback);
        return;
    }
    PyErr_Clear();
}

/* -1 with the exception read_failed kept, if any; else 0. */
static int raise_kept(void)
{
    if (t_kept.type == NULL)
        return 0;
    PyErr_Restore(t_kept.type, t_kept.value, t_kept.traceback);
    t_kept.type = t_kept.value = t_kept.traceback = NULL;
    return -1;
}

/* An exact int in [0, 2**64) as *v; 0 (no exception set) otherwise. */
static int as_u64(PyObject *o, uint64_t *v)
{
    if (!PyLong_CheckExact(o))
        return 0;
    unsigned long a = PyLong_AsUnsignedLong(o);
    if (a == (unsigned long)-1 && PyErr_Occurred()) {
        read_failed();
        return 0;
    }
    *v = a;
    return 1;
}

/* An int or an int subclass (an IntEnum: PyTorch's DLDeviceType) in
 * [-2**63, 2**63), as int() reads it, with no call into Python. */
static int as_int_i64(PyObject *o, int64_t *v)
{
    if (!PyLong_Check(o))
        return 0;
    long a = PyLong_AsLong(o);
    if (a == -1 && PyErr_Occurred()) {
        read_failed();
        return 0;
    }
    *v = a;
    return 1;
}

/* An exact int in [-2**63, 2**63). */
static int as_i64(PyObject *o, int64_t *v)
{
    return PyLong_CheckExact(o) && as_int_i64(o, v);
}

/* The lowest address and the byte count of a strided array: 0 when it does
 * not fit in 64 bits or is empty (the Python path answers those). */
static int extent(uint64_t ptr, int ndim, const int64_t *shape, const int64_t *strides,
                  int64_t itemsize, uint64_t *start, uint64_t *n)
{
    if (itemsize <= 0)
        return 0;
    __int128 lo = 0, hi = 0, count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return 0;
        if (strides != NULL) {
            __int128 span = (__int128)(shape[i] - 1) * strides[i];
            if (span < 0)
                lo += span;
            else
                hi += span;
        } else {
            count *= shape[i];
            if (count > ((__int128)1 << 64))
                return 0;
        }
    }
    __int128 first = (__int128)ptr + lo;
    __int128 bytes = strides != NULL ? hi - lo + itemsize : count * itemsize;
    if (first < 0 || bytes <= 0 || first + bytes > ((__int128)1 << 64))
        return 0;
    *start = (uint64_t)first;
    *n = (uint64_t)bytes;
    return 1;
}

static int buffer_range(PyObject *obj, uint64_t *start, uint64_t *n)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_STRIDES) != 0) {
        read_failed();
        return 0;
    }
    int ok = 0;
    if (view.len > 0 && view.ndim <= 64) {
        if (view.strides == NULL || view.ndim == 0) {
            *start = (uint64_t)(uintptr_t)view.buf;
            *n = (uint64_t)view.len;
            ok = *n <= UINT64_MAX - *start;
        } else {
            int64_t shape[64], strides[64];
            for (int i = 0; i < view.ndim; i++) {
                shape[i] = view.shape[i];
                strides[i] = view.strides[i];
            }
            ok = extent((uint64_t)(uintptr_t)view.buf, view.ndim, shape, strides,
                        view.itemsize, start, n);
        }
    }
    PyBuffer_Release(&view);
    return ok;
}

/* An int tuple of at most 64 entries (exact ints). */
static int int_tuple(PyObject *t, int64_t *out, Py_ssize_t *len)
{
    if (!PyTuple_Check(t))
        return 0;
    Py_ssize_t k = PyTuple_Size(t);
    if (k > 64)
        return 0;
    for (Py_ssize_t i = 0; i < k; i++)
        if (!as_i64(PyTuple_GetItem(t, i), &out[i]))
            return 0;
    *len = k;
    return 1;
}

/* An array-interface typestr's item size ("<f4": 4, "|u1": 1, "<U4": 16),
 * for the kinds numpy sizes as written; 0 for anything else.  (Tested
 * char by char, not with strchr: a producer may hand out a new string each
 * time - numpy's dtype.str does - so this runs on every such query.) */
static int64_t typestr_parse(PyObject *typestr)
{
    Py_ssize_t len;
    const char *s = PyUnicode_Check(typestr) ? PyUnicode_AsUTF8AndSize(typestr, &len) : NULL;
    if (s == NULL) {
        read_failed();
        return 0;
    }
    if (len < 3 || len > 12)
        return 0;
    switch (s[0]) {
    case '<': case '>': case '|': case '=':
        break;
    default:
        return 0;
    }
    switch (s[1]) {
    case 'b': case 'i': case 'u': case 'f': case 'c': case 'V': case '?': case 'S': case 'U':
        break;
    default:
        return 0;
    }
    int64_t size = 0;
    for (Py_ssize_t i = 2; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        size = size * 10 + (s[i] - '0');
    }
    return s[1] == 'U' ? size * 4 : size;
}

/* typestr_parse, remembered for the last string object read: a producer
 * hands out the same one (a literal, or one per dtype) every time.  (Under
 * the GIL, like g.) */
static int64_t typestr_itemsize(PyObject *typestr)
{
    static PyObject *last;
    static int64_t last_size;
    if (typestr == last)
        return last_size;
    int64_t size = typestr_parse(typestr);
    if (size > 0 && PyUnicode_CheckExact(typestr)) {
        Py_INCREF(typestr);
        Py_XDECREF(last);
        last = typestr;
        last_size = size;
    }
    return size;
}

/* The names an interface's keys are matched against (interned: a
 * producer's literals are the same objects): the five read, then the four
 * known and ignored. */
#define CAI_READ 5
#define CAI_NAMES 9
static PyObject *cai_names[CAI_NAMES];

/* The interface's entries: one pass over the dict where each key is one of
 * cai_names, else a lookup each.  (A walk: lookups by name cost twice as
 * much, and a producer builds the dict afresh for each read, so nothing of
 * it can be kept.) */
static void cai_entries(PyObject *iface, PyObject *out[CAI_READ])
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    int i;
    memset(out, 0, CAI_READ * sizeof *out);
    while (PyDict_Next(iface, &pos, &key, &value)) {
        for (i = 0; i < CAI_NAMES && key != cai_names[i]; i++)
            ;
        if (i < CAI_READ)
            out[i] = value;
        else if (i == CAI_NAMES)
            goto lookups;
    }
    return;
lookups:
    for (i = 0; i < CAI_READ; i++)
        out[i] = PyDict_GetItem(iface, cai_names[i]);
}

/* 1: read; 0: not read here (the Python path answers); -1: the attribute
 * raised, which the protocol order takes as "not offered" (a PyTorch CPU
 * tensor's AttributeError). */
static int cai_range(PyObject *obj, uint64_t *start, uint64_t *n)
{
    PyObject *iface = PyObject_GetAttr(obj, s_cai);
    if (iface == NULL) {
        read_failed();
        return -1;
    }
    int ok = 0;
    if (PyDict_CheckExact(iface)) {
        PyObject *e[CAI_READ];
        cai_entries(iface, e);
        PyObject *data = e[0], *shape_t = e[1], *typestr = e[2], *strides_t = e[3],
                 *offset_o = e[4];
        int64_t shape[64], strides[64], offset = 0, itemsize;
        Py_ssize_t nd = 0, ns = 0;
        uint64_t ptr;
        ok = data != NULL && PyTuple_Check(data) && PyTuple_Size(data) == 2 &&
             as_u64(PyTuple_GetItem(data, 0), &ptr) && shape_t != NULL &&
             int_tuple(shape_t, shape, &nd) && typestr != NULL &&
             (itemsize = typestr_itemsize(typestr)) > 0 &&
             (offset_o == NULL || offset_o == Py_None || as_i64(offset_o, &offset));
        if (ok && strides_t != NULL && strides_t != Py_None)
            ok = int_tuple(strides_t, strides, &ns) && ns == nd;
        else
            strides_t = NULL;
        if (ok) {
            __int128 p = (__int128)ptr + offset;
            ok = p >= 0 && p < ((__int128)1 << 64) &&
                 extent((uint64_t)p, (int)nd, shape, strides_t ? strides : NULL, itemsize, start,
                        n);
        }
    }
    Py_DECREF(iface);
    return ok;
}

/* The value a ctypes integer holds, read from its own storage (the buffer
 * ctypes exports: native byte order, the type's size) - a fraction of the
 * cost of .value.  A negative value: 0 (the Python path says why). */
static int ctypes_address(PyObject *obj, int is_signed, uint64_t *start)
{
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) != 0) {
        read_failed();
        return 0;
    }
    int ok = 1;
    const unsigned char *b = view.buf;
    switch (view.len) {
    case 1:
        *start = is_signed ? (uint64_t)(int64_t)(int8_t)b[0] : b[0];
        break;
    case 2: {
        uint16_t u;
        memcpy(&u, b, 2);
        *start = is_signed ? (uint64_t)(int64_t)(int16_t)u : u;
        break;
    }
    case 4: {
        uint32_t u;
        memcpy(&u, b, 4);
        *start = is_signed ? (uint64_t)(int64_t)(int32_t)u : u;
        break;
    }
    case 8:
        memcpy(start, b, 8);
        break;
    default:
        ok = 0;
    }
    PyBuffer_Release(&view);
    return ok && !(is_signed && (int64_t)*start < 0);
}

/* DLPack's DLTensor, as both capsule forms hold it (dlpack.h, 0.x and 1.x). */
typedef struct {
    void *data;
    int32_t device_type, device_id;
    int32_t ndim;
    uint8_t code, bits;
    uint16_t lanes;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;

/* DLManagedTensorVersioned: {version {major, minor}; manager_ctx; deleter;
 * flags; dl_tensor}; the legacy DLManagedTensor starts with its DLTensor. */
#define DL_VERSIONED_TENSOR_OFFSET 32
#define DL_CPU 1

/* The extent a DLTensor describes, as memhook._queries.inputs._dlpack_extent
 * reads it. */
static int dl_tensor_range(const dl_tensor *t, uint64_t *start, uint64_t *n)
{
    int64_t itemsize = ((int64_t)t->bits * t->lanes + 7) / 8;
    if (itemsize < 1)
        itemsize = 1;
    if (t->ndim < 0 || t->ndim > 64 || (t->ndim > 0 && t->shape == NULL))
        return 0;
    int64_t strides[64];
    for (int i = 0; t->strides != NULL && i < t->ndim; i++)
        strides[i] = t->strides[i] * itemsize;
    __int128 p = (__int128)(uintptr_t)t->data + t->byte_offset;
    return p < ((__int128)1 << 64) &&
           extent((uint64_t)p, t->ndim, t->shape, t->strides ? strides : NULL, itemsize, start,
                  n);
}

/* obj.__dlpack__(max_version=(1, 0)[, stream=-1 off the CPU]): a capsule,
 * versioned or legacy, read and released (its destructor calls the
 * producer's deleter, as memhook._queries.inputs does).  Anything odd: 0. */
static int dlpack_range(PyObject *obj, uint64_t *start, uint64_t *n)
{
    PyObject *args[3] = {obj, v_max_version, v_no_sync};
    PyObject *device = PyObject_VectorcallMethod(s_dlpack_device, args, 1, NULL);
    if (device == NULL) {
        read_failed();
        return 0;
    }
    int64_t dev_type;
    int ok = PyTuple_Check(device) && PyTuple_Size(device) == 2 &&
             as_int_i64(PyTuple_GetItem(device, 0), &dev_type);
    Py_DECREF(device);
    if (!ok)
        return 0;
    PyObject *capsule = PyObject_VectorcallMethod(s_dlpack, args, 1,
                                                  dev_type == DL_CPU ? kwnames_cpu
                                                                     : kwnames_device);
    if (capsule == NULL) {
        read_failed();
        return 0;
    }
    ok = 0;
    const char *name = PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
    const char *raw = name != NULL ? PyCapsule_GetPointer(capsule, name) : NULL;
    if (raw != NULL && strcmp(name, "dltensor_versioned") == 0) {
        uint32_t major;
        memcpy(&major, raw, sizeof major);
        if (major == 1)
            ok = dl_tensor_range((const dl_tensor *)(const void *)(raw +
                                                                   DL_VERSIONED_TENSOR_OFFSET),
                                 start, n);
    } else if (raw != NULL && strcmp(name, "dltensor") == 0) {
        ok = dl_tensor_range((const dl_tensor *)(const void *)raw, start, n);
    }
    read_failed();
    Py_DECREF(capsule);
    return ok;
}

/* obj.name(), or NULL (no exception set). */
static PyObject *call0(PyObject *obj, PyObject *name)
{
    PyObject *args[1] = {obj};
    PyObject *r = PyObject_VectorcallMethod(name, args, 1, NULL);
    if (r == NULL)
        read_failed();
    return r;
}

/* A PyTorch tensor's extent from data_ptr(), shape, stride() (in elements)
 * and element_size(): methods written in C, which answer whether or not the
 * tensor requires grad, where both protocols refuse one that does and are
 * Python code in torch.  For any tensor the protocols read, it is the
 * extent they give (memhook._queries.inputs._tensor_extent; memhook/_queries/query.py
 * checks it on the type's first object). */
static int tensor_range(PyObject *obj, uint64_t *start, uint64_t *n)
{
    PyObject *ptr_o = NULL, *shape_t = NULL, *strides_t = NULL, *itemsize_o = NULL;
    int64_t shape[64], strides[64], itemsize;
    Py_ssize_t nd = 0, ns = 0;
    uint64_t ptr;
    int ok = (ptr_o = call0(obj, s_data_ptr)) != NULL && as_u64(ptr_o, &ptr) &&
             (shape_t = PyObject_GetAttr(obj, s_shape)) != NULL &&
             int_tuple(shape_t, shape, &nd) && (strides_t = call0(obj, s_stride)) != NULL &&
             int_tuple(strides_t, strides, &ns) && ns == nd &&
             (itemsize_o = call0(obj, s_element_size)) != NULL &&
             as_i64(itemsize_o, &itemsize) && itemsize > 0;
    for (Py_ssize_t i = 0; ok && i < nd; i++)
        ok = !__builtin_mul_overflow(strides[i], itemsize, &strides[i]);
    ok = ok && extent(ptr, (int)nd, shape, strides, itemsize, start, n);
    read_failed();
    Py_XDECREF(ptr_o);
    Py_XDECREF(shape_t);
    Py_XDECREF(strides_t);
    Py_XDECREF(itemsize_o);
    return ok;
}

/* A CuPy array's extent from data.ptr (a MemoryPointer's address of the
 * first element, a view's offset included), shape, strides (bytes) and
 * itemsize: what CuPy builds its __cuda_array_interface__ from, read
 * without the dict, the dtype's typestr and descr and the current stream
 * that building it costs on every read.  For any array the interface
 * gives an extent for, it is that extent (an empty one aside: its
 * interface's pointer is 0, and extent leaves it to Python).
 * memhook/_queries/query.py gives this kind only to CuPy's own ndarray
 * class and its subclasses that keep these attributes, and only once the
 * type's first object read this way gave byte_range's extent. */
static int cupy_range(PyObject *obj, uint64_t *start, uint64_t *n)
{
    PyObject *data = NULL, *ptr_o = NULL, *shape_t = NULL, *strides_t = NULL, *itemsize_o = NULL;
    int64_t shape[64], strides[64], itemsize;
    Py_ssize_t nd = 0, ns = 0;
    uint64_t ptr;
    int ok = (data = PyObject_GetAttr(obj, s_data)) != NULL &&
             (ptr_o = PyObject_GetAttr(data, s_ptr)) != NULL && as_u64(ptr_o, &ptr) &&
             (shape_t = PyObject_GetAttr(obj, s_shape)) != NULL &&
             int_tuple(shape_t, shape, &nd) &&
             (strides_t = PyObject_GetAttr(obj, s_strides)) != NULL &&
             int_tuple(strides_t, strides, &ns) && ns == nd &&
             (itemsize_o = PyObject_GetAttr(obj, s_itemsize)) != NULL &&
             as_i64(itemsize_o, &itemsize) && itemsize > 0 &&
             extent(ptr, (int)nd, shape, strides, itemsize, start, n);
    read_failed();
    Py_XDECREF(data);
    Py_XDECREF(ptr_o);
    Py_XDECREF(shape_t);
    Py_XDECREF(strides_t);
    Py_XDECREF(itemsize_o);
    return ok;
}

/* A PyLong from an attribute or a conversion, as an address. */
static int steal_address(PyObject *v, uint64_t *start)
{
    if (v == NULL) {
        read_failed();
        return 0;
    }
    int ok = as_u64(v, start);
    Py_DECREF(v);
    return ok;
}

/* The kind of the last type found in g.kinds.  A program passes objects of
 * one or two types over and over, and the lookup (a dict keyed by types,
 * then the kind's int) costs as much as reading a buffer's extent.
 * memhook/_queries/query.py only ever adds to that dict, and never changes
 * a kind once learned, so the memo stands while g.kinds is the dict it was
 * read from and holds as many entries; one removed (the tests forget a type
 * to learn it again) changes the count and drops it.  The memo holds its
 * type and dict, so no other can take their addresses.  (Under the GIL,
 * like g; a build without one looks up every time.) */
static struct {
    PyObject *type, *kinds;
    Py_ssize_t entries;
    long kind;
} g_kind_memo;

/* How objects of `type` are read (enum kind), 0 if not learned; no
 * exception set. */
static long kind_of(PyObject *type)
{
    if (g.kinds == NULL)
        return 0;
#ifndef Py_GIL_DISABLED
    if (type == g_kind_memo.type && g.kinds == g_kind_memo.kinds &&
        PyDict_Size(g.kinds) == g_kind_memo.entries)
        return g_kind_memo.kind;
#endif
    PyObject *k = PyDict_GetItemWithError(g.kinds, type);
    long kind = k != NULL && PyLong_CheckExact(k) ? PyLong_AsLong(k) : 0;
    if (kind <= 0) {
        read_failed();
        return 0;
    }
#ifndef Py_GIL_DISABLED
    PyObject *old_type = g_kind_memo.type, *old_kinds = g_kind_memo.kinds;
    Py_INCREF(type);
    Py_INCREF(g.kinds);
    g_kind_memo.type = type;
    g_kind_memo.kinds = g.kinds;
    g_kind_memo.entries = PyDict_Size(g.kinds);
    g_kind_memo.kind = kind;
    Py_XDECREF(old_type);
    Py_XDECREF(old_kinds);
#endif
    return kind;
}

/* [start, start + n) for obj and size, read here: 1; or 0 (no exception
 * set) where the Python normaliser must answer. */
static int normalise(PyObject *obj, PyObject *size, uint64_t *start, uint64_t *n)
{
    int is_address;
    if (PyLong_CheckExact(obj)) {
        if (!as_u64(obj, start))
            return 0;
        is_address = 1;
    } else if (PyBytes_CheckExact(obj)) {
        *start = (uint64_t)(uintptr_t)PyBytes_AsString(obj);
        *n = (uint64_t)PyBytes_Size(obj);
        is_address = 0;
    } else if (PyByteArray_CheckExact(obj)) {
        *start = (uint64_t)(uintptr_t)PyByteArray_AsString(obj);
        *n = (uint64_t)PyByteArray_Size(obj);
        is_address = 0;
    } else {
        long kind = kind_of((PyObject *)Py_TYPE(obj));
        switch (kind) {
        case KIND_BUFFER:
            if (!buffer_range(obj, start, n))
                return 0;
            is_address = 0;
            break;
        case KIND_CAI:
            if (cai_range(obj, start, n) != 1)
                return 0;
            is_address = 0;
            break;
        case KIND_CAI_DLPACK: {
            int got = cai_range(obj, start, n);
            if (got == 0 || (got < 0 && !dlpack_range(obj, start, n)))
                return 0;
            is_address = 0;
            break;
        }
        case KIND_TORCH:
            if (!tensor_range(obj, start, n))
                return 0;
            is_address = 0;
            break;
        case KIND_CUPY:
            if (!cupy_range(obj, start, n))
                return 0;
            is_address = 0;
            break;
        case KIND_DLPACK:
            if (!dlpack_range(obj, start, n))
                return 0;
            is_address = 0;
            break;
        case KIND_CTYPES_UNSIGNED:
        case KIND_CTYPES_SIGNED:
            if (!ctypes_address(obj, kind == KIND_CTYPES_SIGNED, start))
                return 0;
            is_address = 1;
            break;
        case KIND_INDEX:
            if (!steal_address(PyNumber_Index(obj), start))
                return 0;
            is_address = 1;
            break;
        case KIND_INT:
            if (!steal_address(PyNumber_Long(obj), start))
                return 0;
            is_address = 1;
            break;
        default:
            return 0;
        }
    }
    if (is_address) {
        if (size == NULL)
            *n = 1;
        else if (!as_u64(size, n) || *n == 0)
            return 0;
        return *n - 1 <= UINT64_MAX - *start; /* (may end at 2**64: see ask) */
    }
    /* an extent: no size but 1, and not empty (the data pointer's byte: the
     * Python path's rule) */
    uint64_t one;
    if (size != NULL && !(as_u64(size, &one) && one == 1))
        return 0;
    return *n != 0 && *n - 1 <= UINT64_MAX - *start;
}

/* normalise, else the Python normaliser: 0, or -1 with its exception. */
static int resolve(PyObject *obj, PyObject *size, uint64_t *start, uint64_t *n)
{
    /* (an address alone, the commonest call, without normalise's dispatch) */
    if (size == NULL && as_u64(obj, start)) {
        *n = 1;
        return 0;
    }
    int read = normalise(obj, size, start, n);
    if (raise_kept() != 0)
        return -1;
    if (read)
        return 0;
    PyObject *got = size == NULL ? PyObject_CallFunctionObjArgs(g.fallback, obj, NULL)
                                 : PyObject_CallFunctionObjArgs(g.fallback, obj, size, NULL);
    if (got == NULL)
        return -1;
    int ok = PyTuple_Check(got) && PyTuple_Size(got) == 2 &&
             as_u64(PyTuple_GetItem(got, 0), start) && as_u64(PyTuple_GetItem(got, 1), n);
    Py_DECREF(got);
    if (!ok) {
        PyErr_SetString(PyExc_RuntimeError, "memhook: the normaliser gave no (start, size)");
        return -1;
    }
    return 0;
}

/* The public signature (ptr, size=1), positional or by keyword, with the
 * errors CPython gives a def of it: these builtins are memhook.memory_type
 * and memhook.lookup themselves (query_public), so a call costs no Python
 * frame. */
static int args_in_full(const char *name, PyObject *const *argv, Py_ssize_t argc,
                        PyObject *kwnames, PyObject **obj, PyObject **size)
{
    if (argc > 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes from 1 to 2 positional arguments but %zd "
                     "were given", name, argc);
        return -1;
    }
    PyObject *got[2] = {argc > 0 ? argv[0] : NULL, argc > 1 ? argv[1] : NULL};
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GetItem(kwnames, i);
        int at = key == s_ptr ? 0 : key == s_size ? 1 : -1;
        if (at < 0) /* (a name the caller built, not interned) */
            at = PyUnicode_CompareWithASCIIString(key, "ptr") == 0    ? 0
                 : PyUnicode_CompareWithASCIIString(key, "size") == 0 ? 1
                                                                      : -1;
        if (at < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", name,
                         key);
            return -1;
        }
        if (got[at] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", name,
                         at == 0 ? "ptr" : "size");
            return -1;
        }
        got[at] = argv[argc + i];
    }
    if (got[0] == NULL) {
        PyErr_Format(PyExc_TypeError, "%s() missing 1 required positional argument: 'ptr'",
                     name);
        return -1;
    }
    *obj = got[0];
    *size = got[1];
    return 0;
}

static inline int args(const char *name, PyObject *const *argv, Py_ssize_t argc,
                       PyObject *kwnames, PyObject **obj, PyObject **size)
{
    if (kwnames == NULL && (argc == 1 || argc == 2)) {
        *obj = argv[0];
        *size = argc == 2 ? argv[1] : NULL;
        return 0;
    }
    return args_in_full(name, argv, argc, kwnames, obj, size);
}

/* Events wait and subscribers want them: hand them out (0, or -1 with the
 * exception deliver() raised). */
static int deliver(void)
{
    if (g.deliver == NULL || *g.pending == 0)
        return 0;
    PyObject *current = PyObject_GetAttr(g.registry, s_current);
    if (current == NULL)
        return -1;
    int want = PyObject_IsTrue(current);
    Py_DECREF(current);
    if (want <= 0)
        return want;
    PyObject *done = PyObject_CallObject(g.deliver, NULL);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

static int ask(PyObject *obj, PyObject *size, memhook_region *r)
{
    uint64_t start, n;
    if (g.types == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "memhook._native: queries not configured");
        return -1;
    }
    if (deliver() != 0)
        return -1;
    if (resolve(obj, size, &start, &n) != 0)
        return -1;
    r->struct_size = sizeof *r;
    if (n > UINT64_MAX - start) {
        /* A range ending at 2**64, which the core cannot name: its last
         * byte is in no region (a region ends by 2**64 - 1), so the range
         * without it is asked about; the last byte alone is host memory. */
        if (--n == 0) {
            *r = (memhook_region){.struct_size = sizeof *r, .mem_type = MEMHOOK_MEMORY_HOST,
                                  .device = -1, .base = start, .size = 1};
            return 0;
        }
    }
    int rc = memhook_query((const void *)(uintptr_t)start, (size_t)n, r);
    if (rc != 0) {
        PyErr_Format(PyExc_ValueError, "memhook_query refused the range at 0x%llx (%llu bytes): "
                     "error %d", (unsigned long long)start, (unsigned long long)n, -rc);
        return -1;
    }
    if (r->mem_type < 0 || r->mem_type >= TYPE_CODES)
        r->mem_type = MEMHOOK_MEMORY_UNKNOWN;
    return 0;
}

/* memhook.memory_type(ptr, size=1). */
static PyObject *query_type(PyObject *self, PyObject *const *argv, Py_ssize_t argc,
                            PyObject *kwnames)
{
    (void)self;
    PyObject *obj, *size;
    memhook_region r;
    if (args("memory_type", argv, argc, kwnames, &obj, &size) != 0 || ask(obj, size, &r) != 0)
        return NULL;
    PyObject *t = g.type_of[r.mem_type];
    Py_INCREF(t);
    return t;
}

/* Regions lookup answered lately, by alloc_id (direct-mapped; read and
 * written under the GIL, like g). */
#define REGION_MEMO 1024
typedef struct {
    uint64_t alloc_id, base, size;
    int type, device;
    PyObject *region;
} region_memo;
static region_memo g_regions[REGION_MEMO];

/* A Region of r's extent, type and device: made here where the type's
 * fields are slots, else by memhook._values.types' constructor. */
static PyObject *make_region(const memhook_region *r)
{
    PyObject *t = g.type_of[r->mem_type];
    if (g.region_type == NULL)
        return PyObject_CallFunction(g.make_region, "KKOi", (unsigned long long)r->base,
                                     (unsigned long long)r->size, t, r->device);
    PyObject *v[4] = {PyLong_FromUnsignedLongLong(r->base),
                      PyLong_FromUnsignedLongLong(r->size), t, PyLong_FromLong(r->device)};
    Py_INCREF(t);
    PyObject *region = v[0] && v[1] && v[3] ? g.region_alloc((PyTypeObject *)g.region_type, 0)
                                            : NULL;
    for (int i = 0; region != NULL && i < 4; i++)
        if (g.region_set[i](g.region_field[i], region, v[i]) != 0)
            Py_CLEAR(region);
    for (int i = 0; i < 4; i++)
        Py_XDECREF(v[i]);
    return region;
}

/* memhook.lookup(ptr, size=1). */
static PyObject *query_region(PyObject *self, PyObject *const *argv, Py_ssize_t argc,
                              PyObject *kwnames)
{
    (void)self;
    PyObject *obj, *size;
    memhook_region r;
    if (args("lookup", argv, argc, kwnames, &obj, &size) != 0 || ask(obj, size, &r) != 0)
        return NULL;
    if (r.mem_type == MEMHOOK_MEMORY_HOST)
        Py_RETURN_NONE;
    /* An allocation's Region is made once and handed out again while its
     * extent, type and device stay (Regions are immutable): making one
     * costs several times the query. */
    region_memo *m = r.alloc_id ? &g_regions[r.alloc_id % REGION_MEMO] : NULL;
    if (m != NULL && m->region != NULL && m->alloc_id == r.alloc_id && m->base == r.base &&
        m->size == r.size && m->type == r.mem_type && m->device == r.device) {
        Py_INCREF(m->region);
        return m->region;
    }
    PyObject *region = make_region(&r);
    if (region != NULL && m != NULL) {
        PyObject *old = m->region;
        *m = (region_memo){.alloc_id = r.alloc_id, .base = r.base, .size = r.size,
                           .type = r.mem_type, .device = r.device, .region = region};
        Py_INCREF(region);
        Py_XDECREF(old);
    }
    return region;
}

/* query_extent(obj, kind): what this file reads of obj as `kind`, as
 * (start, size), or None where it would ask the Python normaliser (for
 * memhook/_queries/query.py to check a type before it learns it). */
static PyObject *query_extent(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    if (argc != 2 || !PyLong_CheckExact(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "query_extent(obj, kind)");
        return NULL;
    }
    PyObject *probe = PyDict_New();
    if (probe == NULL)
        return NULL;
    if (PyDict_SetItem(probe, (PyObject *)Py_TYPE(argv[0]), argv[1]) != 0) {
        Py_DECREF(probe);
        return NULL;
    }
    PyObject *saved = g.kinds;
    g.kinds = probe;
    uint64_t start, n;
    int ok = normalise(argv[0], NULL, &start, &n);
    g.kinds = saved;
    Py_DECREF(probe);
    if (raise_kept() != 0)
        return NULL;
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(KK)", (unsigned long long)start, (unsigned long long)n);
}

static void set(PyObject **slot, PyObject *value)
{
    PyObject *old = *slot;
    Py_XINCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

/* query_hand_out(): deliver() before memhook.memory_types' batch. */
static PyObject *query_hand_out(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (deliver() != 0)
        return NULL;
    Py_RETURN_NONE;
}

/* query_deliver(registry, deliver) or query_deliver(None, None): see g. */
static PyObject *query_deliver(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    if (argc != 2 || (argv[0] == Py_None) != (argv[1] == Py_None) ||
        (argv[1] != Py_None && !PyCallable_Check(argv[1]))) {
        PyErr_SetString(PyExc_TypeError, "query_deliver(registry, deliver) or (None, None)");
        return NULL;
    }
    g.pending = memhook_events_pending_flag();
    set(&g.registry, argv[0] == Py_None ? NULL : argv[0]);
    set(&g.deliver, argv[1] == Py_None ? NULL : argv[1]);
    Py_RETURN_NONE;
}

/* The slotted Region's allocator and field setters, or NULL in
 * g.region_type (Regions then made by g.make_region). */
static void region_fields(PyObject *type)
{
    static const char *const names[4] = {"start", "size", "mem_type", "device"};
    PyObject *fields[4] = {NULL};
    descrsetfunc sets[4];
    allocfunc alloc = type != Py_None && PyType_Check(type)
                          ? (allocfunc)PyType_GetSlot((PyTypeObject *)type, Py_tp_alloc)
                          : NULL;
    int ok = alloc != NULL;
    for (int i = 0; ok && i < 4; i++) {
        fields[i] = PyObject_GetAttrString(type, names[i]);
        sets[i] = fields[i] != NULL ? (descrsetfunc)PyType_GetSlot(Py_TYPE(fields[i]),
                                                                    Py_tp_descr_set)
                                    : NULL;
        ok = sets[i] != NULL;
    }
    PyErr_Clear();
    Py_CLEAR(g.region_type);
    for (int i = 0; i < 4; i++) {
        Py_CLEAR(g.region_field[i]);
        if (ok) {
            g.region_field[i] = fields[i];
            g.region_set[i] = sets[i];
        } else {
            Py_XDECREF(fields[i]);
        }
    }
    if (ok) {
        Py_INCREF(type);
        g.region_type = type;
        g.region_alloc = alloc;
    }
}

/* query_configure(types, region_type, make_region, fallback, kinds):
 * region_type is Region where its fields are member descriptors (slots),
 * else None. */
static PyObject *query_configure(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    if (argc != 5 || !PyTuple_Check(argv[0]) || PyTuple_Size(argv[0]) != TYPE_CODES ||
        (argv[1] != Py_None && !PyType_Check(argv[1])) || !PyCallable_Check(argv[2]) ||
        !PyCallable_Check(argv[3]) || !PyDict_Check(argv[4])) {
        PyErr_SetString(PyExc_TypeError, "query_configure(5 MemoryTypes, Region or None, "
                                         "make_region, fallback, kinds dict)");
        return NULL;
    }
    region_fields(argv[1]);
    set(&g.types, argv[0]);
    for (int i = 0; i < TYPE_CODES; i++)
        g.type_of[i] = PyTuple_GetItem(g.types, i);
    set(&g.make_region, argv[2]);
    set(&g.fallback, argv[3]);
    set(&g.kinds, argv[4]);
    Py_RETURN_NONE;
}

/* memhook.memory_type and memhook.lookup themselves (query_public).  Not
 * const, and static: a builtin reads its name and docstring through its
 * PyMethodDef for as long as it lives. */
static PyMethodDef g_public[] = {
    {"memory_type", (PyCFunction)(void (*)(void))query_type, METH_FASTCALL | METH_KEYWORDS,
     NULL},
    {"lookup", (PyCFunction)(void (*)(void))query_region, METH_FASTCALL | METH_KEYWORDS, NULL},
};

/* query_public(fn, signature): the builtin above named fn.__name__, with
 * fn's module and docstring and `signature` as its __text_signature__ -
 * the Python def it stands for, less the frame a def costs every call
 * (memhook/_queries/query.py's _in_c). */
static PyObject *query_public(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    (void)self;
    if (argc != 2 || !PyUnicode_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "query_public(fn, signature)");
        return NULL;
    }
    PyObject *name = PyObject_GetAttrString(argv[0], "__name__");
    PyObject *doc = name != NULL ? PyObject_GetAttrString(argv[0], "__doc__") : NULL;
    PyObject *module = doc != NULL ? PyObject_GetAttrString(argv[0], "__module__") : NULL;
    PyObject *text = NULL, *fn = NULL;
    PyMethodDef *def = NULL;
    for (size_t i = 0; module != NULL && i < sizeof g_public / sizeof g_public[0]; i++)
        if (PyUnicode_Check(name) &&
            PyUnicode_CompareWithASCIIString(name, g_public[i].ml_name) == 0)
            def = &g_public[i];
    if (module != NULL && def == NULL)
        PyErr_Format(PyExc_ValueError, "query_public: no builtin named %R", name);
    if (def != NULL)
        text = PyUnicode_Check(doc) ? PyUnicode_FromFormat("%U%U\n--\n\n%U", name, argv[1], doc)
                                    : PyUnicode_FromFormat("%U%U\n--\n\n", name, argv[1]);
    Py_ssize_t len;
    const char *utf8 = text != NULL ? PyUnicode_AsUTF8AndSize(text, &len) : NULL;
    char *copy = utf8 != NULL ? malloc((size_t)len + 1) : NULL;
    if (utf8 != NULL && copy == NULL)
        PyErr_NoMemory();
    if (copy != NULL) {
        memcpy(copy, utf8, (size_t)len + 1);
        /* (the GIL is held: no builtin of this def reads the old text now) */
        free((void *)def->ml_doc);
        def->ml_doc = copy;
        fn = PyCFunction_NewEx(def, NULL, module);
    }
    Py_XDECREF(text);
    Py_XDECREF(module);
    Py_XDECREF(doc);
    Py_XDECREF(name);
    return fn;
}

static PyMethodDef methods[] = {
    {"query_type", (PyCFunction)(void (*)(void))query_type, METH_FASTCALL | METH_KEYWORDS,
     "query_type(ptr, size=1): memhook.memory_type's answer"},
    {"query_region", (PyCFunction)(void (*)(void))query_region, METH_FASTCALL | METH_KEYWORDS,
     "query_region(ptr, size=1): memhook.lookup's answer"},
    {"query_public", (PyCFunction)(void (*)(void))query_public, METH_FASTCALL,
     "query_public(fn, signature): the builtin standing for fn"},
    {"query_extent", (PyCFunction)(void (*)(void))query_extent, METH_FASTCALL,
     "query_extent(obj, kind): (start, size) as read in C, or None"},
    {"query_configure", (PyCFunction)(void (*)(void))query_configure, METH_FASTCALL,
     "query_configure(types, region_type, make_region, fallback, kinds)"},
    {"query_hand_out", query_hand_out, METH_NOARGS,
     "query_hand_out(): the subscribers' delivery a query makes first"},
    {"query_deliver", (PyCFunction)(void (*)(void))query_deliver, METH_FASTCALL,
     "query_deliver(registry, deliver): the subscribers' delivery before a query"},
    {NULL, NULL, 0, NULL},
};

static PyObject *intern(const char *s)
{
    return PyUnicode_InternFromString(s);
}

/* Add the builtins above to the extension module `m` (its init calls
 * this): 0, or -1 with an exception. */
int memhook_pyext_add(PyObject *m)
{
    /* (the order cai_entries reads them in) */
    static const char *const cai[CAI_NAMES] = {"data", "shape", "typestr", "strides", "offset",
                                               "version", "stream", "mask", "descr"};
    for (int i = 0; i < CAI_NAMES; i++)
        if (!(cai_names[i] = intern(cai[i])))
            return -1;
    s_data = cai_names[0];
    s_shape = cai_names[1];
    s_strides = cai_names[3];
    s_stream = cai_names[6];
    if (!(s_current = intern("current")) || !(s_ptr = intern("ptr")) ||
        !(s_size = intern("size")) || !(s_cai = intern("__cuda_array_interface__")) ||
        !(s_dlpack = intern("__dlpack__")) ||
        !(s_dlpack_device = intern("__dlpack_device__")) || !(s_data_ptr = intern("data_ptr")) ||
        !(s_stride = intern("stride")) || !(s_element_size = intern("element_size")) ||
        !(s_itemsize = intern("itemsize")) ||
        !(v_max_version = Py_BuildValue("(ii)", 1, 0)) || !(v_no_sync = PyLong_FromLong(-1)) ||
        !(s_max_version = intern("max_version")) ||
        !(kwnames_cpu = PyTuple_Pack(1, s_max_version)) ||
        !(kwnames_device = PyTuple_Pack(2, s_max_version, s_stream)))
        return -1;
    return PyModule_AddFunctions(m, methods);
}
