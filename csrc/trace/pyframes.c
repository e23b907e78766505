/*
 * pyframes.c - --python's capture: the calling thread's Python frames,
 * read in the hook on that thread, without the GIL and without running
 * any Python.
 *
 * The thread state comes from the "gilstate" key
 * (PyGILState_GetThisThreadState: a pthread_getspecific, bound whether the
 * thread holds the GIL or released it around the CUDA call), and on 3.12+
 * first from the thread-local current state; either counts only if its
 * thread_id is pthread_self().  Nothing is read before Py_Initialize or
 * once finalization has begun.  The walk is safe because only this thread
 * changes its frame chain, and it is in the hook; every pointer is checked
 * before it is followed and every code object's type compared, so a wrong
 * layout ends the walk at its first frame.  docs/design/python-frames.md
 * gives the argument per CPython version and what is recorded.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "mh_objects.h"
#include "pyframes.h"

/* Frames looked at per walk, skipped ones included: a bound for a chain
 * that were to loop. */
#define STEPS_MAX 1024
/* Code objects a walk remembers having looked up: a stack repeats a few
 * (PyTorch's Module.__call__ and _call_impl at every level of nesting).
 * Within one walk a repeat needs no second check: every code object on the
 * chain is held by its frame, and nothing runs while the walk does. */
#define SEEN_MAX 8

void mh_pyframes_watch(void)
{
    /* Process-wide: observers are registered once per process. */
    static atomic_bool watching;
    if (atomic_exchange(&watching, true))
        return;
    mh_objects_observe(mh_py_discover);
    mh_py_discover();
}

void mh_pyframes_area_ready(mh_trace_area *a)
{
    a->py_version = atomic_load(&mh_py_found_version);
    mh_pycode_area_ready();
}

/* This thread's own thread state, or 0. */
static uintptr_t thread_state(const mh_py_runtime *rt)
{
    uintptr_t self = (uintptr_t)pthread_self();
    unsigned id_at = rt->L->ts_thread_id;
    if (rt->current != NULL) {
        uintptr_t ts = (uintptr_t)rt->current();
        if (mh_py_ptr_ok(ts) && mh_py_word(ts, id_at) == self)
            return ts;
    }
    uintptr_t ts = (uintptr_t)rt->this_thread();
    return mh_py_ptr_ok(ts) && mh_py_word(ts, id_at) == self ? ts : 0;
}

static uintptr_t innermost_frame(const mh_py_layout *L, uintptr_t ts)
{
    uintptr_t f = mh_py_word(ts, L->ts_frame);
    if (L->chain == MH_PY_CFRAME)
        f = mh_py_ptr_ok(f) ? mh_py_word(f, L->cframe_current) : 0;
    return f;
}

static uint64_t head(unsigned n, uint32_t state, bool more)
{
    return n | (uint64_t)state << 16 | (more ? MH_TRACE_PY_MORE : 0);
}

/* Frames into rec[1..depth]; returns rec[0], the head. */
static uint64_t walk(mh_trace_area *a, uint64_t *rec, unsigned depth)
{
    const mh_py_runtime *rt = atomic_load_explicit(&mh_py_rt, memory_order_acquire);
    if (rt == NULL) {
        uint32_t v = atomic_load_explicit(&mh_py_found_version, memory_order_relaxed);
        if (__atomic_load_n(&a->py_version, __ATOMIC_RELAXED) != v)
            __atomic_store_n(&a->py_version, v, __ATOMIC_RELAXED);
        return head(0, atomic_load_explicit(&mh_py_missing, memory_order_relaxed), false);
    }
    if (__builtin_expect(__atomic_load_n(&a->py_version, __ATOMIC_RELAXED) != rt->version_hex, 0))
        __atomic_store_n(&a->py_version, rt->version_hex, __ATOMIC_RELAXED);  /* found late */
    if (!rt->initialized() || rt->finalizing())
        return head(0, MH_TRACE_PY_NO_PYTHON, false);
    uintptr_t ts = thread_state(rt);
    if (ts == 0)
        return head(0, MH_TRACE_PY_NO_THREAD, false);
    const mh_py_layout *L = rt->L;
    unsigned n = 0, seen_n = 0;
    uintptr_t seen_code[SEEN_MAX];
    uint32_t seen_ref[SEEN_MAX];
    uint32_t state = MH_TRACE_PY_FRAMES;
    bool more = false;
    uintptr_t f = innermost_frame(L, ts);
    for (unsigned steps = 0; f != 0; steps++, f = mh_py_word(f, L->fr_back)) {
        if (steps == STEPS_MAX || !mh_py_ptr_ok(f)) {
            state = MH_TRACE_PY_BROKEN;
            break;
        }
        unsigned owner = L->fr_owner ? *(const uint8_t *)(f + L->fr_owner) : MH_PY_NO_OWNER;
        if (owner == L->owner_cstack && owner != MH_PY_NO_OWNER)
            continue;  /* a shim frame: the C stack's entry into the interpreter */
        uintptr_t code = mh_py_word(f, L->fr_code);
        if (!mh_py_ptr_ok(code) || mh_py_type(code) != rt->code_type) {
            state = MH_TRACE_PY_BROKEN;
            break;
        }
        int64_t lasti;
        if (L->chain == MH_PY_FRAME_OBJECTS) {
            lasti = *(const int32_t *)(f + L->fr_instr);
        } else {
            /* Code units (2 bytes) past the first instruction. */
            intptr_t ip = (intptr_t)mh_py_word(f, L->fr_instr);
            lasti = (ip - (intptr_t)(code + L->co_code_adaptive)) / 2;
            if (owner != L->owner_generator &&
                lasti < *(const int32_t *)(code + L->co_firsttraceable))
                continue;  /* still in its setup: not a frame tracebacks show */
        }
        if (n == depth) {
            more = true;
            break;
        }
        if (lasti < -1 || lasti > INT32_MAX)
            lasti = -1;
        uint32_t ref = 0;
        unsigned k = 0;
        while (k < seen_n && seen_code[k] != code)
            k++;
        if (k < seen_n) {
            ref = seen_ref[k];
        } else {
            ref = mh_pycode_ref(a, rt, code);
            k = seen_n < SEEN_MAX ? seen_n++ : n % SEEN_MAX;
            seen_code[k] = code;
            seen_ref[k] = ref;
        }
        rec[1 + n++] = (uint64_t)ref << 32 | (uint32_t)(int32_t)lasti;
    }
    return head(n, state, more);
}

uint64_t mh_pyframes_record(mh_trace_area *a)
{
    /* Walked into the stack first: the record then takes only the words
     * its frames need (new pages of the area cost a fault each). */
    uint64_t rec[1 + MH_TRACE_PY_DEPTH_MAX];
    unsigned depth = a->py_depth < MH_TRACE_PY_DEPTH_MAX ? a->py_depth : MH_TRACE_PY_DEPTH_MAX;
    rec[0] = walk(a, rec, depth);
    uint64_t bytes = ((rec[0] & 0xffff) + 1) * 8;
    uint64_t off = __atomic_fetch_add(&a->py_used, bytes, __ATOMIC_RELAXED);
    if (off + bytes > a->py_cap) {
        __atomic_fetch_add(&a->py_lost, 1, __ATOMIC_RELAXED);
        return 0;
    }
    memcpy((char *)a + a->py_off + off, rec, bytes);
    return off / 8 + 1;
}
