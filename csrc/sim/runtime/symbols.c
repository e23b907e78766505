/*
 * symbols.c - the registration ABI nvcc's host code calls, and the symbol
 * functions built on it (cudaGetSymbolAddress, cudaGetSymbolSize,
 * cudaMemcpyToSymbol, cudaMemcpyFromSymbol).
 *
 * nvcc emits, per translation unit, a static constructor that calls
 *   h = __cudaRegisterFatBinary(&fatbin);
 *   __cudaRegisterVar(h, &host_shadow, ..., "device_name", ext, size, constant, global);
 *   __cudaRegisterManagedVar(h, &host_ptr_slot, ..., "name", ...);
 *   __cudaRegisterFunction(h, ...);
 *   __cudaRegisterFatBinaryEnd(h);
 * and an atexit handler that calls __cudaUnregisterFatBinary(h).  These run
 * before main and must not touch the driver, so registration only records.
 *
 * The simulator ignores the fat binary.  On first use of one of its symbols
 * (or __cudaInitModule, which nvcc's code calls before touching a managed
 * variable) the runtime builds a simulator module image from the registered
 * variables:
 *
 *   MEMHOOK-SIM-MODULE 1
 *   global <deviceName> <size>      (__device__ and __constant__ variables)
 *   managed <deviceName> <size>     (__managed__ variables)
 *
 * loads it once with cuLibraryLoadData (a library is context-independent)
 * and resolves each symbol in the current context with cuLibraryGetGlobal /
 * cuLibraryGetManaged.  A host address that no registered variable has is
 * cudaErrorInvalidSymbol.
 *
 * __cudaUnregisterFatBinary forgets the variables but leaves the library
 * loaded: it runs from atexit, after the driver's own destructors may have
 * run, where calling into the driver is not safe.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudart_internal.h"

#define IMAGE_MAGIC "MEMHOOK-SIM-MODULE 1\n"

struct var {
    struct var *next;
    const void *host_key;   /* the host shadow (plain) or the slot (managed) */
    void **managed_slot;    /* managed: where the host code reads the pointer */
    char *name;             /* deviceName, copied */
    size_t size;
    bool managed;
};

struct module {
    struct module *next;
    void *fatbin;           /* the handle given out is &fatbin */
    struct var *vars;       /* registration order reversed */
    size_t nvars;
    bool loaded;
    CUlibrary lib;
    char *image;            /* kept alive while the library is loaded */
};

/* Process-wide by nature: nvcc's constructors register each translation
 * unit's variables once per process, and every thread resolves against the
 * same table.  reg_lock guards the list, every module and every var. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module *modules;

static struct module *module_of(void **handle)
{
    if (handle == NULL)
        return NULL;
    return (struct module *)(void *)((char *)handle - offsetof(struct module, fatbin));
}

/* ---- registration ABI --------------------------------------------------------- */

CUDART_API void **__cudaRegisterFatBinary(void *fatCubin)
{
    struct module *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->fatbin = fatCubin;
    pthread_mutex_lock(&reg_lock);
    m->next = modules;
    modules = m;
    pthread_mutex_unlock(&reg_lock);
    return &m->fatbin;
}

CUDART_API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle;   /* nothing to finish: the module is built lazily */
}

CUDART_API void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    struct module *m = module_of(fatCubinHandle);
    if (m == NULL)
        return;
    pthread_mutex_lock(&reg_lock);
    for (struct module **pp = &modules; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    for (struct var *v = m->vars, *next; v != NULL; v = next) {
        next = v->next;
        free(v->name);
        free(v);
    }
    /* m->image and m->lib stay: see the top of the file. */
    if (!m->loaded) {
        free(m->image);
        free(m);
    }
}

static void add_var(void **handle, const void *key, void **slot, const char *name, size_t size,
                    bool managed)
{
    struct module *m = module_of(handle);
    if (m == NULL || key == NULL || name == NULL)
        return;
    struct var *v = calloc(1, sizeof(*v));
    char *copy = strdup(name);
    if (v == NULL || copy == NULL) {
        free(v);
        free(copy);
        return;
    }
    v->host_key = key;
    v->managed_slot = slot;
    v->name = copy;
    v->size = size;
    v->managed = managed;
    pthread_mutex_lock(&reg_lock);
    v->next = m->vars;
    m->vars = v;
    m->nvars++;
    pthread_mutex_unlock(&reg_lock);
}

CUDART_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                  const char *deviceName, int ext, size_t size, int constant,
                                  int global)
{
    (void)deviceAddress;
    (void)ext;
    (void)constant;
    (void)global;
    add_var(fatCubinHandle, hostVar, NULL, deviceName, size, false);
}

CUDART_API void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                         char *deviceAddress, const char *deviceName, int ext,
                                         size_t size, int constant, int global)
{
    (void)deviceAddress;
    (void)ext;
    (void)constant;
    (void)global;
    add_var(fatCubinHandle, hostVarPtrAddress, hostVarPtrAddress, deviceName, size, true);
}

CUDART_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
                                       char *deviceFun, const char *deviceName,
                                       int thread_limit, struct uint3 *tid, struct uint3 *bid,
                                       struct dim3 *bDim, struct dim3 *gDim, int *wSize)
{
    /* Kernels are not simulated; registering one is accepted and ignored. */
    (void)fatCubinHandle;
    (void)hostFun;
    (void)deviceFun;
    (void)deviceName;
    (void)thread_limit;
    (void)tid;
    (void)bid;
    (void)bDim;
    (void)gDim;
    (void)wSize;
}

/* ---- loading -------------------------------------------------------------------- */

/* Build the module image.  Caller holds reg_lock. */
static char *build_image(const struct module *m)
{
    size_t cap = sizeof(IMAGE_MAGIC);
    for (const struct var *v = m->vars; v != NULL; v = v->next)
        cap += strlen(v->name) + 32;
    char *img = malloc(cap);
    if (img == NULL)
        return NULL;
    size_t len = (size_t)snprintf(img, cap, "%s", IMAGE_MAGIC);
    /* The list is newest-first; emit in registration order by walking the
     * list once per position (modules hold few variables). */
    for (size_t i = m->nvars; i-- > 0;) {
        const struct var *v = m->vars;
        for (size_t k = 0; k < i && v != NULL; k++)
            v = v->next;
        if (v == NULL)
            continue;
        len += (size_t)snprintf(img + len, cap - len, "%s %s %zu\n",
                                v->managed ? "managed" : "global", v->name, v->size);
    }
    return img;
}

/* Load m's library once.  Caller holds reg_lock. */
static cudaError_t load_module(struct module *m)
{
    if (m->loaded)
        return cudaSuccess;
    if (memhook_cudart_drv.cuLibraryLoadData == NULL)
        return cudaErrorCallRequiresNewerDriver;
    if (m->image == NULL) {
        m->image = build_image(m);
        if (m->image == NULL)
            return cudaErrorMemoryAllocation;
    }
    CUlibrary lib = NULL;
    CUresult r = memhook_cudart_drv.cuLibraryLoadData(&lib, m->image, NULL, NULL, 0, NULL,
                                                      NULL, 0);
    if (r != CUDA_SUCCESS)
        return memhook_cudart_from_cu(r);
    m->lib = lib;
    m->loaded = true;
    return cudaSuccess;
}

/* Resolve v (of m) in the current context.  Caller holds reg_lock. */
static cudaError_t resolve_var(struct module *m, struct var *v, CUdeviceptr *addr,
                               size_t *size)
{
    cudaError_t err = load_module(m);
    if (err != cudaSuccess)
        return err;
    CUdeviceptr p = 0;
    size_t bytes = 0;
    CUresult r;
    if (v->managed) {
        if (memhook_cudart_drv.cuLibraryGetManaged == NULL)
            return cudaErrorCallRequiresNewerDriver;
        r = memhook_cudart_drv.cuLibraryGetManaged(&p, &bytes, m->lib, v->name);
    } else {
        if (memhook_cudart_drv.cuLibraryGetGlobal == NULL)
            return cudaErrorCallRequiresNewerDriver;
        r = memhook_cudart_drv.cuLibraryGetGlobal(&p, &bytes, m->lib, v->name);
    }
    if (r == CUDA_ERROR_NOT_FOUND)
        return cudaErrorInvalidSymbol;
    if (r != CUDA_SUCCESS)
        return memhook_cudart_from_cu(r);
    if (v->managed && v->managed_slot != NULL)
        *v->managed_slot = (void *)(uintptr_t)p;
    *addr = p;
    *size = bytes ? bytes : v->size;
    return cudaSuccess;
}

/* Find the variable whose host address is symbol: a plain variable's host
 * shadow, a managed variable's pointer slot, or the managed address the
 * slot holds (what &x is in nvcc's host code for a __managed__ x). */
static struct var *find_var(const void *symbol, struct module **owner)
{
    for (struct module *m = modules; m != NULL; m = m->next) {
        for (struct var *v = m->vars; v != NULL; v = v->next) {
            if (v->host_key == symbol ||
                (v->managed && v->managed_slot != NULL && *v->managed_slot == symbol)) {
                *owner = m;
                return v;
            }
        }
    }
    return NULL;
}

static cudaError_t resolve_symbol(const void *symbol, CUdeviceptr *addr, size_t *size)
{
    if (symbol == NULL)
        return cudaErrorInvalidSymbol;
    cudaError_t err = memhook_cudart_ctx_ensure();
    if (err != cudaSuccess)
        return err;
    pthread_mutex_lock(&reg_lock);
    struct module *m = NULL;
    struct var *v = find_var(symbol, &m);
    err = v == NULL ? cudaErrorInvalidSymbol : resolve_var(m, v, addr, size);
    pthread_mutex_unlock(&reg_lock);
    return err;
}

CUDART_API char __cudaInitModule(void **fatCubinHandle)
{
    struct module *m = module_of(fatCubinHandle);
    if (m == NULL || memhook_cudart_ctx_ensure() != cudaSuccess)
        return 0;
    cudaError_t err = cudaSuccess;
    pthread_mutex_lock(&reg_lock);
    for (struct var *v = m->vars; v != NULL && err == cudaSuccess; v = v->next) {
        if (v->managed) {
            CUdeviceptr p;
            size_t size;
            err = resolve_var(m, v, &p, &size);
        }
    }
    if (err == cudaSuccess)
        err = load_module(m);
    pthread_mutex_unlock(&reg_lock);
    return err == cudaSuccess ? 1 : 0;
}

/* ---- exported symbol functions ------------------------------------------------- */

CUDART_API cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    if (devPtr == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    size_t size = 0;
    cudaError_t err = resolve_symbol(symbol, &p, &size);
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

CUDART_API cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
    if (size == NULL)
        return memhook_cudart_ret(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    size_t bytes = 0;
    cudaError_t err = resolve_symbol(symbol, &p, &bytes);
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    *size = bytes;
    return cudaSuccess;
}

/* The device address of [offset, offset+count) inside a registered symbol,
 * after checking the copy direction against `allowed` (the two kinds that
 * are valid besides cudaMemcpyDefault). */
static cudaError_t symbol_span(const void *symbol, size_t count, size_t offset,
                               enum cudaMemcpyKind kind, enum cudaMemcpyKind allowed,
                               CUdeviceptr *at)
{
    if (kind != allowed && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    CUdeviceptr p = 0;
    size_t size = 0;
    cudaError_t err = resolve_symbol(symbol, &p, &size);
    if (err != cudaSuccess)
        return err;
    if (offset > size || count > size - offset)
        return cudaErrorInvalidValue;
    *at = p + offset;
    return cudaSuccess;
}

static cudaError_t to_symbol(const void *symbol, const void *src, size_t count, size_t offset,
                             enum cudaMemcpyKind kind, bool ptds)
{
    CUdeviceptr at = 0;
    cudaError_t err = symbol_span(symbol, count, offset, kind, cudaMemcpyHostToDevice, &at);
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    return memhook_cudart_ret(
        memhook_cudart_memcpy((void *)(uintptr_t)at, src, count, kind, ptds));
}

static cudaError_t from_symbol(void *dst, const void *symbol, size_t count, size_t offset,
                               enum cudaMemcpyKind kind, bool ptds)
{
    CUdeviceptr at = 0;
    cudaError_t err = symbol_span(symbol, count, offset, kind, cudaMemcpyDeviceToHost, &at);
    if (err != cudaSuccess)
        return memhook_cudart_ret(err);
    return memhook_cudart_ret(
        memhook_cudart_memcpy(dst, (const void *)(uintptr_t)at, count, kind, ptds));
}

CUDART_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                          size_t offset, enum cudaMemcpyKind kind)
{
    return to_symbol(symbol, src, count, offset, kind, false);
}

CUDART_API cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src,
                                               size_t count, size_t offset,
                                               enum cudaMemcpyKind kind)
{
    return to_symbol(symbol, src, count, offset, kind, true);
}

CUDART_API cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                            size_t offset, enum cudaMemcpyKind kind)
{
    return from_symbol(dst, symbol, count, offset, kind, false);
}

CUDART_API cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count,
                                                 size_t offset, enum cudaMemcpyKind kind)
{
    return from_symbol(dst, symbol, count, offset, kind, true);
}
