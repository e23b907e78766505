/*
 * module.c - modules and libraries with their global variables.
 *
 * The simulator cannot run kernels, so its module image only declares
 * globals.  An image is NUL-terminated text:
 *
 *     MEMHOOK-SIM-MODULE 1
 *     global  <name> <size>
 *     managed <name> <size>
 *
 * The first line must be exactly the header.  Each following line declares
 * one global: `global` is a __device__ variable, `managed` a __managed__ one.
 * <name> is 1..255 non-blank characters, unique in the image; <size> is a
 * positive byte count (decimal, or 0x-prefixed hex) of at most 1 TiB.
 * Fields are separated by blanks; blank lines and lines starting with `#`
 * are ignored; a line may end in "\r\n".  Anything else, including a real
 * cubin/fatbin/PTX image, is CUDA_ERROR_INVALID_IMAGE.
 *
 * Modules (cuModuleLoad*) belong to the context current at load time; their
 * globals are allocated there at once.  Libraries (cuLibraryLoad*) are
 * context-free: a library's globals are instantiated in a context the
 * first time the library is used there (cuLibraryGetGlobal/GetManaged/
 * GetModule), as a module that belongs to the library.  Unloading a
 * library frees its globals in every context; destroying a context unloads
 * its modules and its library instances.
 *
 * Globals are zero-filled allocations made with sim_mem_alloc_locked
 * (owner = the module) and flagged SIM_ALLOC_FLAG_MODULE_GLOBAL, so that
 * cuMemFree refuses them: only unloading frees them.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_api.h"
#include "sim_control.h"

#define MODULE_HEADER "MEMHOOK-SIM-MODULE 1"
#define MODULE_MAGIC 0x4d4f444cu
#define LIBRARY_MAGIC 0x4c494252u
#define MAX_NAME 255
#define MAX_GLOBAL_SIZE (1ull << 40)
#define MAX_FILE_SIZE (64ull << 20)

typedef struct gspec {
    char *name;
    uint64_t size;
    bool managed;
} gspec;

typedef struct image {
    gspec *v;
    size_t n;
} image;

struct library_obj;

typedef struct module_obj {
    uint32_t magic;
    sim_ctx *ctx;
    struct library_obj *lib;   /* owning library, or NULL */
    image img;                 /* owned when lib == NULL, else the library's */
    uint64_t *addr;            /* one per global, 0 when not allocated */
    struct module_obj *next;
} module_obj;

typedef struct library_obj {
    uint32_t magic;
    image img;
    struct library_obj *next;
} library_obj;

/* Process-wide, like the driver state it simulates (one per process, shared
 * by every thread and context); guarded by sim_lock. */
static module_obj *g_modules;      /* published modules, all contexts */
static library_obj *g_libraries;

/* ---- the image format ---------------------------------------------------- */

static void image_free(image *img)
{
    for (size_t i = 0; i < img->n; i++)
        free(img->v[i].name);
    free(img->v);
    img->v = NULL;
    img->n = 0;
}

static const char *skip_blank(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static const char *token_end(const char *p, const char *end)
{
    while (p < end && *p != ' ' && *p != '\t')
        p++;
    return p;
}

static CUresult parse_line(const char *p, const char *end, image *img)
{
    p = skip_blank(p, end);
    if (p == end || *p == '#')
        return CUDA_SUCCESS;
    const char *k = p, *ke = token_end(p, end);
    const char *n = skip_blank(ke, end), *ne = token_end(n, end);
    const char *s = skip_blank(ne, end), *se = token_end(s, end);
    if (skip_blank(se, end) != end || n == ne || s == se)
        return CUDA_ERROR_INVALID_IMAGE;
    bool managed;
    if ((size_t)(ke - k) == 6 && memcmp(k, "global", 6) == 0)
        managed = false;
    else if ((size_t)(ke - k) == 7 && memcmp(k, "managed", 7) == 0)
        managed = true;
    else
        return CUDA_ERROR_INVALID_IMAGE;
    size_t nlen = (size_t)(ne - n);
    if (nlen > MAX_NAME)
        return CUDA_ERROR_INVALID_IMAGE;
    char num[32];
    if ((size_t)(se - s) >= sizeof num || !isdigit((unsigned char)*s))
        return CUDA_ERROR_INVALID_IMAGE;
    memcpy(num, s, (size_t)(se - s));
    num[se - s] = '\0';
    char *stop = NULL;
    errno = 0;
    unsigned long long size = strtoull(num, &stop, 0);
    if (errno || *stop != '\0' || size == 0 || size > MAX_GLOBAL_SIZE)
        return CUDA_ERROR_INVALID_IMAGE;
    for (size_t i = 0; i < img->n; i++)
        if (strlen(img->v[i].name) == nlen && memcmp(img->v[i].name, n, nlen) == 0)
            return CUDA_ERROR_INVALID_IMAGE;
    gspec *v = realloc(img->v, (img->n + 1) * sizeof *v);
    if (v == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    img->v = v;
    char *name = malloc(nlen + 1);
    if (name == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(name, n, nlen);
    name[nlen] = '\0';
    img->v[img->n++] = (gspec){ name, size, managed };
    return CUDA_SUCCESS;
}

static CUresult parse_image(const char *text, image *out)
{
    image img = { NULL, 0 };
    size_t hlen = strlen(MODULE_HEADER);
    if (strncmp(text, MODULE_HEADER, hlen) != 0)
        return CUDA_ERROR_INVALID_IMAGE;
    const char *p = text + hlen;
    if (*p == '\r')
        p++;
    if (*p != '\n' && *p != '\0')
        return CUDA_ERROR_INVALID_IMAGE;
    while (*p != '\0') {
        p++;                                   /* past the '\n' */
        const char *eol = p;
        while (*eol != '\0' && *eol != '\n')
            eol++;
        const char *end = eol;
        if (end > p && end[-1] == '\r')
            end--;
        CUresult rc = parse_line(p, end, &img);
        if (rc != CUDA_SUCCESS) {
            image_free(&img);
            return rc;
        }
        p = eol;
    }
    *out = img;
    return CUDA_SUCCESS;
}

static CUresult read_file(const char *path, char **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    CUresult rc = CUDA_SUCCESS;
    while (buf != NULL) {
        if (len + 1 >= cap) {
            if (cap >= MAX_FILE_SIZE) {
                rc = CUDA_ERROR_INVALID_IMAGE;
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL)
                break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = CUDA_ERROR_FILE_NOT_FOUND;
            break;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (buf == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        free(buf);
        return rc;
    }
    buf[len] = '\0';
    *out = buf;
    return CUDA_SUCCESS;
}

/* ---- globals ------------------------------------------------------------- */

/* Free the globals m still owns.  Each address is checked against the
 * registry (still live, and still owned by m) so that nothing is freed
 * twice, whatever freed it before. */
static void free_globals_locked(module_obj *m)
{
    for (size_t i = 0; i < m->img.n; i++) {
        sim_alloc *a = m->addr[i] != 0 ? sim_registry_find(m->addr[i]) : NULL;
        if (a != NULL && a->base == m->addr[i] && a->owner == (void *)m)
            sim_mem_free_locked(m->addr[i]);
        m->addr[i] = 0;
    }
}

static void module_free(module_obj *m)
{
    if (m->lib == NULL)
        image_free(&m->img);
    m->magic = 0;
    free(m->addr);
    free(m);
}

static bool module_published_locked(const module_obj *m)
{
    for (const module_obj *o = g_modules; o != NULL; o = o->next)
        if (o == m && o->magic == MODULE_MAGIC)
            return true;
    return false;
}

static void unpublish_locked(module_obj *m)
{
    for (module_obj **pp = &g_modules; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            return;
        }
    }
}

/* Make a module for ctx with its globals allocated, and publish it.  The
 * memory half hands out zero-filled allocations (fresh or hole-punched
 * memfd pages), so the globals start at zero.  Caller holds sim_lock and
 * has checked that ctx is alive; on failure the caller still owns img. */
static CUresult make_module_locked(sim_ctx *ctx, library_obj *lib, image img, module_obj **out)
{
    module_obj *m = calloc(1, sizeof *m);
    uint64_t *addr = calloc(img.n ? img.n : 1, sizeof *addr);
    if (m == NULL || addr == NULL) {
        free(m);
        free(addr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->magic = MODULE_MAGIC;
    m->ctx = ctx;
    m->lib = lib;
    m->img = img;
    m->addr = addr;
    CUresult rc = CUDA_SUCCESS;
    for (size_t i = 0; i < img.n && rc == CUDA_SUCCESS; i++) {
        rc = sim_mem_alloc_locked(ctx, img.v[i].managed ? SIM_ALLOC_MANAGED : SIM_ALLOC_DEVICE,
                                  img.v[i].size, m, &m->addr[i]);
        if (rc != CUDA_SUCCESS) {
            m->addr[i] = 0;
            break;
        }
        sim_alloc *a = sim_registry_find(m->addr[i]);
        if (a != NULL)
            a->flags |= SIM_ALLOC_FLAG_MODULE_GLOBAL;
    }
    if (rc != CUDA_SUCCESS) {
        free_globals_locked(m);
        m->img = (image){ NULL, 0 };       /* the caller still owns img */
        module_free(m);
        return rc;
    }
    m->next = g_modules;
    g_modules = m;
    *out = m;
    return CUDA_SUCCESS;
}

SIM_HIDDEN void sim_module_drop_ctx_locked(sim_ctx *ctx)
{
    module_obj **pp = &g_modules;
    while (*pp != NULL) {
        module_obj *m = *pp;
        if (m->ctx == ctx) {
            *pp = m->next;
            free_globals_locked(m);
            module_free(m);
        } else {
            pp = &m->next;
        }
    }
}

/* ---- modules ------------------------------------------------------------- */

static CUresult load_text(CUmodule *module, const char *text)
{
    image img;
    CUresult rc = parse_image(text, &img);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_ctx *ctx;
    module_obj *m = NULL;
    rc = sim_ctx_require(&ctx);
    if (rc == CUDA_SUCCESS)
        rc = make_module_locked(ctx, NULL, img, &m);
    sim_unlock();
    if (rc != CUDA_SUCCESS) {
        image_free(&img);
        return rc;
    }
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    CUresult rc = sim_ctx_require(NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (module == NULL || fname == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    char *text;
    rc = read_file(fname, &text);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = load_text(module, text);
    free(text);
    return rc;
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUresult rc = sim_ctx_require(NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (module == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return load_text(module, image);
}

/* A module obtained from a library (cuLibraryGetModule) is the library's:
 * unloading it here is CUDA_ERROR_NOT_PERMITTED. */
SIM_API CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    module_obj *m = (module_obj *)hmod;
    sim_lock();
    if (m == NULL || !module_published_locked(m)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (m->lib != NULL) {
        sim_unlock();
        return CUDA_ERROR_NOT_PERMITTED;
    }
    unpublish_locked(m);
    free_globals_locked(m);
    module_free(m);
    sim_unlock();
    return CUDA_SUCCESS;
}

/* Look up name in a published module; kind_managed: -1 any, 0/1 only that
 * kind. */
static CUresult module_global(module_obj *m, const char *name, int kind_managed,
                              uint64_t *addr, uint64_t *size)
{
    sim_lock();
    if (m == NULL || !module_published_locked(m)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    for (size_t i = 0; i < m->img.n; i++) {
        const gspec *g = &m->img.v[i];
        if (strcmp(g->name, name) == 0 &&
            (kind_managed < 0 || (int)g->managed == kind_managed)) {
            *addr = m->addr[i];
            *size = g->size;
            sim_unlock();
            return CUDA_SUCCESS;
        }
    }
    sim_unlock();
    return CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                      const char *name)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t addr, size;
    rc = module_global((module_obj *)hmod, name, -1, &addr, &size);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dptr != NULL)
        *dptr = addr;
    if (bytes != NULL)
        *bytes = (size_t)size;
    return CUDA_SUCCESS;
}

/* The 32-bit v1 ABI: first a current context made by the v1 cuCtxCreate,
 * else CUDA_ERROR_INVALID_CONTEXT, as every v1 entry point (sim_internal.h);
 * then an answer only where the values fit in 32 bits.  Globals live in the
 * 64-bit device range, so asking for an address is CUDA_ERROR_INVALID_VALUE
 * (nothing written) and asking only for the size (dptr NULL) works, as on a
 * real driver, where a CUdeviceptr_v1 cannot hold such a pointer either. */
SIM_API CUresult cuModuleGetGlobal(CUdeviceptr_v1 *dptr, unsigned int *bytes, CUmodule hmod,
                                   const char *name)
{
    CUresult rc = sim_ctx_require_legacy(NULL);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t addr, size;
    rc = module_global((module_obj *)hmod, name, -1, &addr, &size);
    if (rc != CUDA_SUCCESS)
        return rc;
    if ((dptr != NULL && addr > 0xffffffffull) || (bytes != NULL && size > 0xffffffffull))
        return CUDA_ERROR_INVALID_VALUE;
    if (dptr != NULL)
        *dptr = (CUdeviceptr_v1)addr;
    if (bytes != NULL)
        *bytes = (unsigned int)size;
    return CUDA_SUCCESS;
}

/* ---- libraries ----------------------------------------------------------- */

static bool library_alive_locked(const library_obj *l)
{
    for (const library_obj *o = g_libraries; o != NULL; o = o->next)
        if (o == l && o->magic == LIBRARY_MAGIC)
            return true;
    return false;
}

static CUresult check_options(const void *opts, void **vals, unsigned int n)
{
    return (n > 0 && (opts == NULL || vals == NULL)) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult library_from_text(CUlibrary *library, const char *text)
{
    image img;
    CUresult rc = parse_image(text, &img);
    if (rc != CUDA_SUCCESS)
        return rc;
    library_obj *l = calloc(1, sizeof *l);
    if (l == NULL) {
        image_free(&img);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    l->magic = LIBRARY_MAGIC;
    l->img = img;
    sim_lock();
    l->next = g_libraries;
    g_libraries = l;
    sim_unlock();
    *library = (CUlibrary)l;
    return CUDA_SUCCESS;
}

/* The checks cuLibraryLoadData and cuLibraryLoadFromFile share.  JIT and
 * library options are accepted (when well-formed) and ignored. */
static CUresult library_load_checks(CUlibrary *library, const void *source,
                                    sim_jit_option *jitOptions, void **jitOptionsValues,
                                    unsigned int numJitOptions,
                                    sim_library_option *libraryOptions,
                                    void **libraryOptionValues, unsigned int numLibraryOptions)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (library == NULL || source == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (check_options(jitOptions, jitOptionsValues, numJitOptions) != CUDA_SUCCESS ||
        check_options(libraryOptions, libraryOptionValues, numLibraryOptions) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
                                   sim_jit_option *jitOptions, void **jitOptionsValues,
                                   unsigned int numJitOptions,
                                   sim_library_option *libraryOptions,
                                   void **libraryOptionValues, unsigned int numLibraryOptions)
{
    CUresult rc = library_load_checks(library, code, jitOptions, jitOptionsValues, numJitOptions,
                                      libraryOptions, libraryOptionValues, numLibraryOptions);
    if (rc != CUDA_SUCCESS)
        return rc;
    return library_from_text(library, code);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                       sim_jit_option *jitOptions, void **jitOptionsValues,
                                       unsigned int numJitOptions,
                                       sim_library_option *libraryOptions,
                                       void **libraryOptionValues, unsigned int numLibraryOptions)
{
    CUresult rc = library_load_checks(library, fileName, jitOptions, jitOptionsValues,
                                      numJitOptions, libraryOptions, libraryOptionValues,
                                      numLibraryOptions);
    if (rc != CUDA_SUCCESS)
        return rc;
    char *text;
    rc = read_file(fileName, &text);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = library_from_text(library, text);
    free(text);
    return rc;
}

SIM_API CUresult cuLibraryUnload(CUlibrary library)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    library_obj *l = (library_obj *)library;
    sim_lock();
    if (l == NULL || !library_alive_locked(l)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    module_obj **pp = &g_modules;
    while (*pp != NULL) {
        module_obj *m = *pp;
        if (m->lib == l) {
            *pp = m->next;
            free_globals_locked(m);
            module_free(m);
        } else {
            pp = &m->next;
        }
    }
    for (library_obj **lp = &g_libraries; *lp != NULL; lp = &(*lp)->next) {
        if (*lp == l) {
            *lp = l->next;
            break;
        }
    }
    l->magic = 0;
    image_free(&l->img);
    free(l);
    sim_unlock();
    return CUDA_SUCCESS;
}

static module_obj *find_instance_locked(const library_obj *l, const sim_ctx *ctx)
{
    for (module_obj *m = g_modules; m != NULL; m = m->next)
        if (m->lib == l && m->ctx == ctx)
            return m;
    return NULL;
}

/* The library's instance in the current context, made on first use. */
static CUresult library_instance(library_obj *l, module_obj **out)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_lock();
    sim_ctx *ctx;
    rc = sim_ctx_require(&ctx);
    if (rc == CUDA_SUCCESS && !library_alive_locked(l))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        module_obj *m = find_instance_locked(l, ctx);
        if (m == NULL)
            rc = make_module_locked(ctx, l, l->img, &m);
        if (rc == CUDA_SUCCESS)
            *out = m;
    }
    sim_unlock();
    return rc;
}

static CUresult library_global(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                               const char *name, bool managed_only)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    library_obj *l = (library_obj *)library;
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    if (l == NULL || !library_alive_locked(l)) {
        sim_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    bool known = false;
    for (size_t i = 0; i < l->img.n && !known; i++)
        known = strcmp(l->img.v[i].name, name) == 0 && (!managed_only || l->img.v[i].managed);
    sim_unlock();
    if (!known)
        return CUDA_ERROR_NOT_FOUND;
    module_obj *m;
    rc = library_instance(l, &m);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t addr, size;
    rc = module_global(m, name, managed_only ? 1 : -1, &addr, &size);
    if (rc != CUDA_SUCCESS)                         /* e.g. unloaded meanwhile */
        return rc;
    if (dptr != NULL)
        *dptr = addr;
    if (bytes != NULL)
        *bytes = (size_t)size;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                    const char *name)
{
    return library_global(dptr, bytes, library, name, false);
}

SIM_API CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                     const char *name)
{
    return library_global(dptr, bytes, library, name, true);
}

SIM_API CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pMod == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    bool alive = library != NULL && library_alive_locked((library_obj *)library);
    sim_unlock();
    if (!alive)
        return CUDA_ERROR_INVALID_HANDLE;
    module_obj *m;
    rc = library_instance((library_obj *)library, &m);
    if (rc != CUDA_SUCCESS)
        return rc;
    *pMod = (CUmodule)m;
    return CUDA_SUCCESS;
}
