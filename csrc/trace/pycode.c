/*
 * pycode.c - code records (trace_proto.h: mh_trace_pycode): each code
 * object's identity - filename, qualified name, first line, line table -
 * copied into the trace area the first time a frame of it is seen, so the
 * collector computes file, function and line from a frame's (code,
 * instruction) pair by itself, long after the code object is gone.
 *
 * A code object can die and another be made at its address (a function
 * defined by exec and deleted, a module reloaded).  A frame must then never
 * be named after the dead one: the cache (code address -> record) is only a
 * hint, and a hit counts only when the record says the same as the live
 * object - the same address, first line, the same filename, qualname and
 * line-table objects, and the same characters and bytes in each (a dead
 * string's address may be reused too).  Whatever differs, the object gets a
 * record of its own.  A string's characters are compared through its own
 * cached hash where it has one (names are hashed when interned): equal
 * length, kind and 64-bit hash with other characters is a 2^-64 chance;
 * without one they are compared byte for byte, as the line table always
 * is.  What a hit costs is those loads and compares: the walk is bound by
 * the cache lines it touches (bench/hooks/pyframes_bench.py --walk).
 *
 * Lock-free: records are claimed with one fetch_add on codes_used and
 * written by their thread alone; `len` is stored last (release), and a
 * record's offset enters the cache (and an ALLOC's Python record) only
 * after that, so whatever the collector is pointed at is complete.  Two
 * threads meeting a new code object at once each write a record: both are
 * right.
 */
#include <stdatomic.h>
#include <string.h>

#include "pyframes.h"

/* Cache slots (a power of two) and how many one code address may use. */
#define CACHE_SLOTS 16384
#define PROBES 4
#define GEN_SHIFT 40
#define REF_MASK ((UINT64_C(1) << GEN_SHIFT) - 1)
/* The most a record copies (trace_proto.h): longer strings are unknown,
 * a longer line table leaves the lines unknown (MH_TRACE_PYCODE_NO_LINES). */
#define NAME_MAX_CHARS MH_TRACE_PYCODE_NAME_MAX
#define LINETABLE_MAX MH_TRACE_PYCODE_LINES_MAX

/* Process-wide by nature: code objects are.  Each slot holds (generation
 * << 40 | record ref); a slot of another generation (another area: a fork
 * child's new one) is empty.  128 KiB of .bss. */
static _Atomic uint64_t g_cache[CACHE_SLOTS];
static _Atomic uint64_t g_gen = 1;

void mh_pycode_area_ready(void) { atomic_fetch_add(&g_gen, 1); }

typedef struct {
    uintptr_t obj;
    const void *data;
    int64_t hash;   /* a str's cached hash, -1 none */
    uint32_t len;   /* characters (a str) or bytes */
    uint8_t kind;   /* bytes a character; 0: not readable */
} py_text;

static size_t bytes_of(const py_text *t) { return (size_t)t->len * t->kind; }
static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

/* A compact str: its characters where they lie.  A legacy (non-compact)
 * or not-ready string of 3.9-3.11, a str subclass, or anything else reads
 * as unknown. */
static void read_str(const mh_py_runtime *rt, uintptr_t obj, py_text *t)
{
    *t = (py_text){.obj = obj, .hash = -1};
    if (!mh_py_ptr_ok(obj) || mh_py_type(obj) != rt->unicode_type)
        return;
    uint64_t length = *(const uint64_t *)(obj + 16);
    uint32_t state = *(const uint32_t *)(obj + 32);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || (rt->L->str_has_ready && !((state >> 7) & 1)) ||
        (kind != 1 && kind != 2 && kind != 4) || length > NAME_MAX_CHARS)
        return;
    t->data = (const void *)(obj + (ascii ? rt->L->str_ascii_data : rt->L->str_compact_data));
    t->hash = *(const int64_t *)(obj + 24);
    t->len = (uint32_t)length;
    t->kind = (uint8_t)kind;
}

static void read_bytes(const mh_py_runtime *rt, uintptr_t obj, py_text *t)
{
    *t = (py_text){.obj = obj, .hash = -1};
    if (!mh_py_ptr_ok(obj) || mh_py_type(obj) != rt->bytes_type)
        return;
    uint64_t size = *(const uint64_t *)(obj + 16);
    if (size > LINETABLE_MAX) {
        t->len = UINT32_MAX;  /* there, too long to copy */
        return;
    }
    t->data = (const void *)(obj + 32);
    t->len = (uint32_t)size;
    t->kind = 1;
}

static const char *after_header(const mh_trace_pycode *r) { return (const char *)(r + 1); }

/* memcmp() == 0 for the few tens of bytes names and line tables have,
 * without a call through the PLT (a third of a hit's time, measured). */
static bool same_bytes(const void *x, const void *y, size_t n)
{
    const unsigned char *p = x, *q = y;
    for (; n >= 8; p += 8, q += 8, n -= 8) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, q, 8);
        if (a != b)
            return false;
    }
    for (; n > 0; n--)
        if (*p++ != *q++)
            return false;
    return true;
}

static bool same_text(const py_text *t, uintptr_t obj, uint32_t len, uint8_t kind,
                      int64_t hash, const char *copy)
{
    if (t->obj != obj || t->kind != kind || t->len != len)
        return false;
    if (hash != -1 && t->hash == hash)
        return true;
    return same_bytes(t->data, copy, bytes_of(t));
}

static bool matches(const mh_trace_pycode *r, uintptr_t code, uint32_t first,
                    const py_text *fn, const py_text *qn, const py_text *lt)
{
    if (r->code != code || r->firstlineno != first || r->filename_obj != fn->obj ||
        r->qualname_obj != qn->obj || r->linetable_obj != lt->obj)
        return false;
    const char *at = after_header(r);
    if (!same_text(fn, r->filename_obj, r->filename_len, r->filename_kind, r->filename_hash, at))
        return false;
    at += pad8(bytes_of(fn));
    if (!same_text(qn, r->qualname_obj, r->qualname_len, r->qualname_kind, r->qualname_hash, at))
        return false;
    at += pad8(bytes_of(qn));
    if (r->flags & MH_TRACE_PYCODE_NO_LINES)
        return lt->kind == 0;
    return same_text(lt, r->linetable_obj, r->linetable_len, 1, -1, at);
}

/* The complete record `ref` names in this area, or NULL. */
static const mh_trace_pycode *record_at(mh_trace_area *a, uint64_t ref)
{
    uint64_t off = (ref - 1) * 8;
    if (ref == 0 || off + sizeof(mh_trace_pycode) > a->codes_cap)
        return NULL;
    const mh_trace_pycode *r = (const mh_trace_pycode *)((char *)a + a->codes_off + off);
    uint32_t len = __atomic_load_n(&r->len, __ATOMIC_ACQUIRE);
    return len != 0 && off + len <= a->codes_cap ? r : NULL;
}

static uint64_t write_record(mh_trace_area *a, const mh_py_runtime *rt, uintptr_t code,
                             uint32_t first, const py_text *fn, const py_text *qn,
                             const py_text *lt)
{
    size_t lines = lt->kind ? lt->len : 0;
    uint64_t size = sizeof(mh_trace_pycode) + pad8(bytes_of(fn)) + pad8(bytes_of(qn)) +
                    pad8(lines);
    uint64_t off = __atomic_fetch_add(&a->codes_used, size, __ATOMIC_RELAXED);
    if (off + size > a->codes_cap) {
        __atomic_fetch_add(&a->codes_lost, 1, __ATOMIC_RELAXED);
        return 0;
    }
    mh_trace_pycode *r = (mh_trace_pycode *)((char *)a + a->codes_off + off);
    char *at = (char *)(r + 1);
    memcpy(at, fn->data, bytes_of(fn));
    at += pad8(bytes_of(fn));
    memcpy(at, qn->data, bytes_of(qn));
    at += pad8(bytes_of(qn));
    memcpy(at, lt->data, lines);
    r->firstlineno = first;
    r->code = code;
    r->filename_obj = fn->obj;
    r->qualname_obj = qn->obj;
    r->linetable_obj = lt->obj;
    r->filename_hash = fn->kind ? fn->hash : -1;
    r->qualname_hash = qn->kind ? qn->hash : -1;
    r->filename_len = fn->len;
    r->qualname_len = qn->len;
    r->linetable_len = (uint32_t)lines;
    r->filename_kind = fn->kind;
    r->qualname_kind = qn->kind;
    r->flags = lt->kind ? 0 : MH_TRACE_PYCODE_NO_LINES;
    r->py_minor = rt->L->minor;
    __atomic_store_n(&r->len, (uint32_t)size, __ATOMIC_RELEASE);
    return off / 8 + 1;
}

uint32_t mh_pycode_ref(mh_trace_area *a, const mh_py_runtime *rt, uintptr_t code)
{
    const mh_py_layout *L = rt->L;
    uint32_t first = *(const uint32_t *)(code + L->co_firstlineno);
    py_text fn, qn, lt;
    read_str(rt, mh_py_word(code, L->co_filename), &fn);
    read_str(rt, mh_py_word(code, L->co_qualname), &qn);
    read_bytes(rt, mh_py_word(code, L->co_linetable), &lt);
    uint64_t gen = atomic_load_explicit(&g_gen, memory_order_relaxed);
    uint64_t h = (code >> 4) * UINT64_C(0x9E3779B97F4A7C15) >> 50;  /* 14 bits */
    int victim = -1;
    for (int i = 0; i < PROBES; i++) {
        uint64_t v = atomic_load_explicit(&g_cache[(h + i) % CACHE_SLOTS], memory_order_acquire);
        if (v >> GEN_SHIFT != gen) {
            if (victim < 0)
                victim = i;
            continue;
        }
        const mh_trace_pycode *r = record_at(a, v & REF_MASK);
        if (r != NULL && matches(r, code, first, &fn, &qn, &lt))
            return (uint32_t)(v & REF_MASK);
    }
    uint64_t ref = write_record(a, rt, code, first, &fn, &qn, &lt);
    if (ref != 0) {
        if (victim < 0)
            victim = (int)((code >> 20) % PROBES);
        atomic_store_explicit(&g_cache[(h + victim) % CACHE_SLOTS], gen << GEN_SHIFT | ref,
                              memory_order_release);
    }
    return (uint32_t)ref;
}
