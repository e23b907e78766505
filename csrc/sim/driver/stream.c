/*
 * stream.c - streams.  All simulated work is synchronous, so a stream is
 * just a handle that belongs to a context: Synchronize and Query succeed at
 * once for every live stream.  Handles are validated by looking them up in
 * the list of live streams.  The special handles NULL, CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD mean "the current context's default stream" and need
 * a current context.  Destroying a context destroys its streams.
 */
#include <stdlib.h>

#include "sim_api.h"
#include "sim_control.h"

#define SIM_STREAM_MAGIC 0x5354524du
/* What an H200 reports from cuCtxGetStreamPriorityRange: [-5, 0]. */
#define SIM_PRIORITY_GREATEST (-5)
#define SIM_PRIORITY_LEAST 0

typedef struct stream_obj {
    uint32_t magic;
    sim_ctx *ctx;
    unsigned int flags;
    int priority;
    struct stream_obj *next;
} stream_obj;

/* Process-wide, like the driver state it simulates (one per process, shared
 * by every thread and context); guarded by sim_lock. */
static stream_obj *g_streams;

static bool is_special(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

/* Caller holds sim_lock. */
static stream_obj *find_locked(CUstream s)
{
    for (stream_obj *o = g_streams; o != NULL; o = o->next)
        if ((CUstream)o == s && o->magic == SIM_STREAM_MAGIC)
            return o;
    return NULL;
}

SIM_HIDDEN CUresult sim_stream_check(CUstream stream)
{
    if (is_special(stream))
        return CUDA_SUCCESS;
    sim_ctx *cur = sim_ctx_current();
    sim_lock();
    stream_obj *o = find_locked(stream);
    bool ok = o != NULL && o->ctx == cur;
    sim_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_HIDDEN void sim_stream_drop_ctx_locked(sim_ctx *ctx)
{
    stream_obj **pp = &g_streams;
    while (*pp != NULL) {
        stream_obj *o = *pp;
        if (o->ctx == ctx) {
            *pp = o->next;
            o->magic = 0;
            free(o);
        } else {
            pp = &o->next;
        }
    }
}

/* The context a stream handle works in: its own for a live stream, the
 * current one for the special handles. */
static CUresult stream_ctx(CUstream s, sim_ctx **out, stream_obj **obj)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (obj != NULL)
        *obj = NULL;
    if (is_special(s))
        return sim_ctx_require(out);
    sim_lock();
    stream_obj *o = find_locked(s);
    if (o != NULL) {
        if (out != NULL)
            *out = o->ctx;
        if (obj != NULL)
            *obj = o;
    }
    sim_unlock();
    return o != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult create(CUstream *phStream, unsigned int flags, int priority)
{
    sim_ctx *ctx;
    CUresult rc = sim_ctx_require(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (phStream == NULL || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    /* out-of-range priorities are clamped, as the real driver does */
    if (priority < SIM_PRIORITY_GREATEST)
        priority = SIM_PRIORITY_GREATEST;
    if (priority > SIM_PRIORITY_LEAST)
        priority = SIM_PRIORITY_LEAST;
    stream_obj *o = calloc(1, sizeof *o);
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->magic = SIM_STREAM_MAGIC;
    o->ctx = ctx;
    o->flags = flags;
    o->priority = priority;
    sim_lock();
    o->next = g_streams;
    g_streams = o;
    sim_unlock();
    *phStream = (CUstream)o;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return create(phStream, Flags, SIM_PRIORITY_LEAST);
}

SIM_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return create(phStream, flags, priority);
}

static CUresult destroy(CUstream s)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (is_special(s))
        return CUDA_ERROR_INVALID_HANDLE;
    sim_lock();
    for (stream_obj **pp = &g_streams; *pp != NULL; pp = &(*pp)->next) {
        if ((CUstream)*pp == s) {
            stream_obj *o = *pp;
            *pp = o->next;
            o->magic = 0;
            free(o);
            sim_unlock();
            return CUDA_SUCCESS;
        }
    }
    sim_unlock();
    return CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuStreamDestroy(CUstream hStream) { return destroy(hStream); }
SIM_API CUresult cuStreamDestroy_v2(CUstream hStream) { return destroy(hStream); }

SIM_API CUresult cuStreamSynchronize(CUstream hStream) { return stream_ctx(hStream, NULL, NULL); }
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_ctx(hStream, NULL, NULL); }
SIM_API CUresult cuStreamQuery(CUstream hStream) { return stream_ctx(hStream, NULL, NULL); }
SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_ctx(hStream, NULL, NULL); }

static CUresult get_ctx(CUstream s, CUcontext *pctx, CUgreenCtx *pGreenCtx)
{
    sim_ctx *c;
    CUresult rc = stream_ctx(s, &c, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)c;
    if (pGreenCtx != NULL)
        *pGreenCtx = NULL;   /* no green contexts in the simulator */
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    return get_ctx(hStream, pctx, NULL);
}

SIM_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
    return get_ctx(hStream, pctx, NULL);
}

SIM_API CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pctx, CUgreenCtx *pGreenCtx)
{
    return get_ctx(hStream, pctx, pGreenCtx);
}

SIM_API CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pctx, CUgreenCtx *pGreenCtx)
{
    return get_ctx(hStream, pctx, pGreenCtx);
}

static CUresult get_flags(CUstream s, unsigned int *flags)
{
    CUresult rc = stream_ctx(s, NULL, NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    stream_obj *o = is_special(s) ? NULL : find_locked(s);
    *flags = o != NULL ? o->flags : CU_STREAM_DEFAULT;
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags) { return get_flags(hStream, flags); }
SIM_API CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags) { return get_flags(hStream, flags); }
