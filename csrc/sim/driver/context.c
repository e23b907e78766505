/*
 * context.c - contexts: the primary context of each device, contexts made
 * with cuCtxCreate*, and each thread's stack of current contexts.
 *
 * Handles are pointers to a ctx_obj whose first member is the shared
 * sim_ctx.  A handle is validated by looking it up among the live contexts
 * (never by reading through a pointer that may have been freed), then by
 * its magic.  Primary contexts are static, one per device; their handle
 * stays the same across release/retain, and is "live" while retained.
 *
 * Teardown (cuCtxDestroy, the last primary release, primary reset) unloads
 * the context's modules and library instances, destroys its streams, then
 * frees every allocation it owns (sim_mem_free_ctx_locked).
 *
 * Each thread has a fixed-depth stack of current contexts (SIM_CTX_STACK
 * entries; pushing past it is CUDA_ERROR_OUT_OF_MEMORY).  A thread whose
 * current context was destroyed elsewhere sees no usable current context
 * (INVALID_CONTEXT), and cuCtxGetCurrent reports CONTEXT_IS_DESTROYED.
 *
 * A context made by the v1 cuCtxCreate (API version 3010) is a legacy one:
 * only there do the 32-bit v1 entry points work (sim_ctx_require_legacy).
 */
#include <stdlib.h>
#include <string.h>

#include "sim_api.h"
#include "sim_control.h"

#define SIM_CTX_STACK 256

typedef struct ctx_obj {
    sim_ctx pub;                 /* first: a sim_ctx* is a ctx_obj* */
    unsigned int api_version;    /* cuCtxGetApiVersion */
    struct ctx_obj *next;        /* list of live created contexts */
} ctx_obj;

/* Process-wide, like the driver state it simulates (one per process, shared
 * by every thread and context); guarded by sim_lock. */
static ctx_obj g_primary[SIM_MAX_DEVICES];
static ctx_obj *g_created;                  /* live non-primary contexts */
static unsigned long long g_next_id = 1;    /* cuCtxGetId */

/* Per thread, as in the driver: each thread has its own current-context stack. */
static __thread sim_ctx *t_stack[SIM_CTX_STACK];
static __thread int t_depth;

static bool is_primary_ptr(const void *p)
{
    const char *c = p;
    return c >= (const char *)&g_primary[0] &&
           c < (const char *)&g_primary[SIM_MAX_DEVICES] &&
           (size_t)(c - (const char *)&g_primary[0]) % sizeof(ctx_obj) == 0;
}

SIM_HIDDEN bool sim_ctx_alive_locked(const sim_ctx *ctx)
{
    if (ctx == NULL)
        return false;
    if (is_primary_ptr(ctx))
        return ctx->refcount > 0 && ctx->magic == SIM_CTX_MAGIC;
    for (ctx_obj *o = g_created; o != NULL; o = o->next)
        if (&o->pub == ctx)
            return o->pub.magic == SIM_CTX_MAGIC;
    return false;
}

SIM_HIDDEN sim_ctx *sim_ctx_current(void)
{
    if (t_depth == 0)
        return NULL;
    sim_lock();
    sim_ctx *top = t_stack[t_depth - 1];
    if (!sim_ctx_alive_locked(top))
        top = NULL;
    sim_unlock();
    return top;
}

SIM_HIDDEN CUresult sim_ctx_require(sim_ctx **out)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_ctx *c = sim_ctx_current();
    if (c == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (out != NULL)
        *out = c;
    return CUDA_SUCCESS;
}

SIM_HIDDEN CUresult sim_ctx_check(CUcontext handle, sim_ctx **out)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    bool alive = sim_ctx_alive_locked((sim_ctx *)handle);
    sim_unlock();
    if (!alive)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (out != NULL)
        *out = (sim_ctx *)handle;
    return CUDA_SUCCESS;
}

/* ---- the legacy 32-bit (v1) API ---------------------------------------- */

SIM_HIDDEN bool sim_ctx_is_legacy(const sim_ctx *ctx)
{
    return ctx != NULL && ((const ctx_obj *)ctx)->api_version < 3020;
}

SIM_HIDDEN CUresult sim_ctx_require_legacy(sim_ctx **out)
{
    sim_ctx *c;
    CUresult rc = sim_ctx_require(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!sim_ctx_is_legacy(c))
        return CUDA_ERROR_INVALID_CONTEXT; /* what the H200's driver answers */
    if (out != NULL)
        *out = c;
    return CUDA_SUCCESS;
}

/* ctx given, or the current one when ctx is NULL. */
static CUresult ctx_or_current(CUcontext ctx, sim_ctx **out)
{
    return ctx == NULL ? sim_ctx_require(out) : sim_ctx_check(ctx, out);
}

static void teardown_locked(sim_ctx *c)
{
    sim_module_drop_ctx_locked(c);
    sim_stream_drop_ctx_locked(c);
    sim_mem_free_ctx_locked(c);
}

static CUresult push(sim_ctx *c)
{
    if (t_depth >= SIM_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    t_stack[t_depth++] = c;
    return CUDA_SUCCESS;
}

/* Remove every occurrence of c from the calling thread's stack. */
static void forget_in_this_thread(const sim_ctx *c)
{
    int j = 0;
    for (int i = 0; i < t_depth; i++)
        if (t_stack[i] != c)
            t_stack[j++] = t_stack[i];
    t_depth = j;
}

/* ---- primary contexts ---------------------------------------------------- */

static CUresult check_dev(CUdevice dev)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    return sim_device_valid(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static bool valid_ctx_flags(unsigned int flags)
{
    if (flags & ~(unsigned int)CU_CTX_FLAGS_MASK)
        return false;
    unsigned int sched = flags & CU_CTX_SCHED_MASK;
    return sched == CU_CTX_SCHED_AUTO || sched == CU_CTX_SCHED_SPIN ||
           sched == CU_CTX_SCHED_YIELD || sched == CU_CTX_SCHED_BLOCKING_SYNC;
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    ctx_obj *p = &g_primary[dev];
    if (p->pub.refcount == 0) {
        p->pub.magic = SIM_CTX_MAGIC;
        p->pub.device = dev;
        p->pub.primary = true;
        p->pub.id = g_next_id++;
        p->api_version = 3020;
    }
    p->pub.refcount++;
    *pctx = (CUcontext)&p->pub;
    sim_unlock();
    return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    ctx_obj *p = &g_primary[dev];
    if (p->pub.refcount == 0) {
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--p->pub.refcount == 0) {
        teardown_locked(&p->pub);
        p->pub.magic = 0;
    }
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }

/* Frees everything the primary context holds and makes it inactive; the
 * flags are kept. */
static CUresult primary_reset(CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    ctx_obj *p = &g_primary[dev];
    if (p->pub.refcount > 0) {
        teardown_locked(&p->pub);
        p->pub.refcount = 0;
        p->pub.magic = 0;
    }
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }
SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags == NULL || active == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    *flags = g_primary[dev].pub.flags;
    *active = g_primary[dev].pub.refcount > 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

/* v1 (CUDA 7.0) refuses while the primary context is active; v2 (11.0)
 * allows it, as the real driver does. */
static CUresult primary_set_flags(CUdevice dev, unsigned int flags, bool allow_active)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!valid_ctx_flags(flags))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    ctx_obj *p = &g_primary[dev];
    if (!allow_active && p->pub.refcount > 0) {
        sim_unlock();
        return CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE;
    }
    p->pub.flags = flags;
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return primary_set_flags(dev, flags, false);
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    return primary_set_flags(dev, flags, true);
}

/* ---- created contexts ---------------------------------------------------- */

static CUresult check_affinity(const CUexecAffinityParam *params, int num)
{
    if (num < 0 || (num > 0 && params == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < num; i++) {
        if (params[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
            return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
        int sms = 0;
        sim_device_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0, &sms);
        if (params[i].param.smCount.val == 0 || params[i].param.smCount.val > (unsigned)sms)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev,
                           unsigned int api_version)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL || !valid_ctx_flags(flags))
        return CUDA_ERROR_INVALID_VALUE;
    if (t_depth >= SIM_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_obj *o = calloc(1, sizeof *o);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->pub.magic = SIM_CTX_MAGIC;
    o->pub.device = dev;
    o->pub.flags = flags;
    o->pub.primary = false;
    o->pub.refcount = 1;
    o->api_version = api_version;
    sim_lock();
    o->pub.id = g_next_id++;
    o->next = g_created;
    g_created = o;
    sim_unlock();
    push(&o->pub);
    *pctx = (CUcontext)&o->pub;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev, 3010);
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev, 3020);
}

SIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                int numParams, unsigned int flags, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = check_affinity(paramsArray, numParams);
    if (rc != CUDA_SUCCESS)
        return rc;
    return ctx_create(pctx, flags, dev, 3020);
}

/* Green-context (CIG) parameters are not simulated: NOT_SUPPORTED. */
SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    CUresult rc = check_dev(dev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctxCreateParams != NULL) {
        if (ctxCreateParams->cigParams != NULL && ctxCreateParams->numExecAffinityParams > 0)
            return CUDA_ERROR_INVALID_VALUE;
        if (ctxCreateParams->cigParams != NULL)
            return CUDA_ERROR_NOT_SUPPORTED;
        rc = check_affinity(ctxCreateParams->execAffinityParams,
                            ctxCreateParams->numExecAffinityParams);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return ctx_create(pctx, flags, dev, 3020);
}

static CUresult ctx_destroy(CUcontext handle)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (handle == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    sim_ctx *c = (sim_ctx *)handle;
    if (!sim_ctx_alive_locked(c) || c->primary) {
        /* a primary context is released, never destroyed */
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    teardown_locked(c);
    for (ctx_obj **pp = &g_created; *pp != NULL; pp = &(*pp)->next) {
        if (&(*pp)->pub == c) {
            ctx_obj *o = *pp;
            *pp = o->next;
            o->pub.magic = 0;
            free(o);
            break;
        }
    }
    sim_unlock();
    forget_in_this_thread(c);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx); }
SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }

/* ---- the current-context stack ------------------------------------------ */

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (t_depth == 0) {
        *pctx = NULL;
        return CUDA_SUCCESS;
    }
    sim_ctx *top = t_stack[t_depth - 1];
    sim_lock();
    bool gone = !is_primary_ptr(top) && !sim_ctx_alive_locked(top);
    sim_unlock();
    if (gone) {
        *pctx = NULL;
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    *pctx = (CUcontext)top;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx == NULL) {
        if (t_depth > 0)
            t_depth--;
        return CUDA_SUCCESS;
    }
    sim_ctx *c;
    rc = sim_ctx_check(ctx, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (t_depth == 0)
        return push(c);
    t_stack[t_depth - 1] = c;
    return CUDA_SUCCESS;
}

static CUresult ctx_push(CUcontext ctx)
{
    sim_ctx *c;
    CUresult rc = sim_ctx_check(ctx, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    return push(c);
}

SIM_API CUresult cuCtxPushCurrent(CUcontext ctx) { return ctx_push(ctx); }
SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return ctx_push(ctx); }

static CUresult ctx_pop(CUcontext *pctx)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (t_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_ctx *c = t_stack[--t_depth];
    if (pctx != NULL)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPopCurrent(CUcontext *pctx) { return ctx_pop(pctx); }
SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx) { return ctx_pop(pctx); }

/* ---- queries ------------------------------------------------------------- */

SIM_API CUresult cuCtxGetDevice(CUdevice *device)
{
    sim_ctx *c;
    CUresult rc = sim_ctx_require(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *device = c->device;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *device = c->device;
    return CUDA_SUCCESS;
}

/* All work is synchronous: synchronising only validates the context. */
SIM_API CUresult cuCtxSynchronize(void) { return sim_ctx_require(NULL); }

SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx) { return ctx_or_current(ctx, NULL); }

SIM_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    sim_ctx *c;
    CUresult rc = sim_ctx_require(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctxId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = ((ctx_obj *)c)->api_version;
    return CUDA_SUCCESS;
}
