"""cffi (API mode) builder for memhook._native, the bridge to libmemhook.so.

Run by setup.py (``cffi_modules``).  The extension links to the core library
with rpath ``$ORIGIN``, so it always binds the libmemhook.so sitting next to
it: the same file that ``memhook trace`` LD_PRELOADs.  API mode means the C
compiler checks every declaration below against the core's two headers: the
C API (memhook/memhook.h) and what the core exports for this binding, the
tests and the benches only (memhook_internal/api.h, never installed).
"""

from __future__ import annotations

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(os.path.dirname(HERE), "csrc", "include")
# memory_type and lookup: builtins of this extension, added to the module at
# its init (csrc/pyext/query.c; docs/design/python-queries.md says why).
QUERY = os.path.join(os.path.dirname(HERE), "csrc", "pyext", "query.c")
# The core's long control calls, with the GIL held (csrc/pyext/control.c).
CONTROL = os.path.join(os.path.dirname(HERE), "csrc", "pyext", "control.c")
# memory_types over a cache snapshot (csrc/pyext/batch_search.c says why).
BATCH_SEARCH = os.path.join(os.path.dirname(HERE), "csrc", "pyext", "batch_search.c")

CDEF = """
const char *memhook_version(void);
int memhook_version_number(void);
const char *memhook_library_path(void);
unsigned long long memhook_loader_generation(void);
int memhook_log_level_get(void);
int memhook_log_level_set(int level);
int memhook_log_level_parse(const char *name);
const char *memhook_log_level_name(int level);
void memhook_log_write(int level, const char *message);
typedef struct memhook_bistro_patch memhook_bistro_patch;
int memhook_bistro_install(void *target, void *hook, int jump_size, void **original,
                           memhook_bistro_patch **out, char *why, size_t why_len);
int memhook_bistro_remove(memhook_bistro_patch *patch);
int memhook_bistro_patch_jump_size(const memhook_bistro_patch *patch);
int memhook_bistro_patch_intact(const memhook_bistro_patch *patch);
typedef struct memhook_bistro_request {
    void *target;
    void *hook;
    int jump_size;
    void **original;
    memhook_bistro_patch *patch;
    int err;
    char why[256];
} memhook_bistro_request;
size_t memhook_bistro_install_batch(memhook_bistro_request *req, size_t n);
size_t memhook_bistro_remove_batch(memhook_bistro_patch **patches, int *errs, size_t n);

int memhook_x86_insn_length(const void *code, size_t avail);
size_t memhook_x86_lengths(const void *buf, size_t stride, size_t count, int8_t *out_lengths);
int memhook_x86_relocate(const void *src, uint64_t src_addr, size_t avail, size_t need,
                         void *dst, uint64_t dst_addr, size_t dst_cap,
                         size_t *consumed, size_t *written, char *reason, size_t reason_cap);
typedef struct memhook_bistro_analysis {
    int patchable;
    int jump_size;
    size_t patch_offset;
    size_t consumed;
    int refusal;
    char reason[256];
} memhook_bistro_analysis;
int memhook_bistro_analyze(const void *code, size_t avail, uint64_t address,
                           size_t symbol_size, int jump_size,
                           uint64_t trampoline_address, const char *name,
                           const char *library, memhook_bistro_analysis *out);

typedef struct memhook_reloc_symbol {
    const char *name;
    void *replacement;
    void **original;
} memhook_reloc_symbol;
int memhook_reloc_install(const memhook_reloc_symbol *symbols, size_t count,
                          char *why, size_t why_len);
int memhook_reloc_uninstall(void);
size_t memhook_reloc_patched_slots(void);

/* the CUDA hook layer (csrc/cuda/) */
#define MEMHOOK_MODE_NONE ...
#define MEMHOOK_MODE_BISTRO ...
#define MEMHOOK_MODE_RELOC ...
#define MEMHOOK_MODE_ALL ...
#define MEMHOOK_MODE_DEFAULT ...
#define MEMHOOK_EVENT_ALLOC ...
#define MEMHOOK_EVENT_FREE ...
#define MEMHOOK_EVENT_NONE ...
#define MEMHOOK_MEM_HOST ...
#define MEMHOOK_MEM_CUDA ...
#define MEMHOOK_MEM_CUDA_MANAGED ...
#define MEMHOOK_MEM_CUDA_HOST ...
#define MEMHOOK_MEM_UNKNOWN ...
#define MEMHOOK_API_DRIVER ...
#define MEMHOOK_API_RUNTIME ...
#define MEMHOOK_EVENT_SIZE_UNKNOWN ...
#define MEMHOOK_EVENT_SKIPPED ...
#define MEMHOOK_EVENT_DRIVER_UNLOADED ...
#define MEMHOOK_EVENT_CONTEXT_RESET ...
#define MEMHOOK_EVENT_HOOKS_GAP ...
typedef struct memhook_event {
    uint64_t seq;
    uint64_t address;
    uint64_t size;
    uint64_t timestamp_ns;
    uint64_t caller;
    int16_t kind;
    int16_t function;
    int16_t mem_type;
    int16_t device;
    int32_t pid;
    int32_t tid;
    int32_t result;
    uint32_t flags;
} memhook_event;
int memhook_mode_parse(const char *text, unsigned *mode, char *why, size_t why_len);
int memhook_hooks_install(unsigned mode, char *why, size_t why_len);
int memhook_hooks_uninstall(void);
unsigned memhook_hooks_mode(void);
int memhook_hooks_set_pointer_attributes(int on);
int memhook_hooks_pointer_attributes(void);
unsigned long long memhook_testing_pointer_attributes_answered(void);
int memhook_testing_drain_hold(int hold);
int memhook_testing_clock_tsc_always(void);
double memhook_clock_ns_per_tick(void);
unsigned long long memhook_testing_device_queries(void);
int memhook_hooks_coverage_complete(void);
unsigned long long memhook_coverage_token(void);
long long memhook_cuda_reserved_ranges(uint64_t *pairs, size_t capacity);
typedef struct memhook_hook_info {
    const char *name;
    int api;
    int kind;
    int present;
    unsigned mechanisms;
    int bistro_jump;
    char reason[320];
    int bistro_overwritten;
} memhook_hook_info;
size_t memhook_hook_count(void);
int memhook_hook_get(size_t index, memhook_hook_info *out);
size_t memhook_hook_get_range(size_t first, size_t count, memhook_hook_info *out);
int memhook_hook_index(const char *name);
void *memhook_hooks_original(const char *name);
size_t memhook_events_drain(memhook_event *out, size_t capacity);
size_t memhook_events_drain_bounded(memhook_event *out, size_t capacity, uint64_t *mark);
size_t memhook_events_drain_into(memhook_event *out, size_t capacity, uint64_t *mark,
                                uint64_t *filled);
size_t memhook_events_drain_background(memhook_event *out, size_t capacity);
int memhook_events_wait_backlog(uint64_t threshold, unsigned timeout_ms);
const volatile uint32_t *memhook_events_pending_flag(void);
int memhook_events_precise_time(int want);
int memhook_events_exact_sizes(int want);
typedef struct memhook_queue_stats {
    uint64_t produced;
    uint64_t consumed;
    uint64_t segments_live;
    uint64_t segments_peak;
    uint64_t segment_bytes;
    uint64_t free_size_from_driver;
    uint64_t free_size_unknown;
    uint64_t lanes;
} memhook_queue_stats;
void memhook_queue_stats_get(memhook_queue_stats *out);
int memhook_events_record(int kind, int function, uint64_t address,
                          uint64_t size, int mem_type, int device, int result);
#define MEMHOOK_MEMORY_HOST ...
#define MEMHOOK_MEMORY_CUDA ...
#define MEMHOOK_MEMORY_CUDA_MANAGED ...
#define MEMHOOK_MEMORY_CUDA_HOST ...
#define MEMHOOK_MEMORY_UNKNOWN ...
#define MEMHOOK_ORIGIN_UNKNOWN ...
#define MEMHOOK_ORIGIN_HOOKS ...
#define MEMHOOK_ORIGIN_DRIVER ...
typedef struct memhook_region {
    size_t struct_size;
    int mem_type;
    int device;
    uint64_t base;
    uint64_t size;
    uint64_t alloc_id;
    int origin;
    int reserved0;
} memhook_region;
int memhook_query(const void *ptr, size_t len, memhook_region *out);
int memhook_query_cached(const void *ptr, size_t len, memhook_region *out);
int memhook_query_batch(const void *const *ptrs, size_t count, memhook_region *out);
int memhook_query_types(const uint64_t *ptrs, size_t count, uint8_t *types);
int memhook_query_types_cached(const uint64_t *ptrs, size_t count, uint8_t *types);
int memhook_cache_update(uint64_t base, uint64_t size, int mem_type, int device);
int memhook_cache_remove(uint64_t base, uint64_t size);
int memhook_cache_clear(void);
int memhook_cache_lookup(const void *ptr, size_t len, memhook_region *out);
size_t memhook_cache_regions(memhook_region *out, size_t capacity);
typedef struct memhook_testing_cache memhook_testing_cache;
memhook_testing_cache *memhook_testing_cache_new(void);
void memhook_testing_cache_free(memhook_testing_cache *cache);
void memhook_testing_cache_apply(memhook_testing_cache *cache, const memhook_event *events,
                                 size_t count);
void memhook_testing_cache_remember(memhook_testing_cache *cache, uint64_t base, uint64_t size,
                                    int mem_type, int device);
void memhook_testing_cache_hooks(memhook_testing_cache *cache, int installed, int coverage);
int memhook_testing_cache_lookup(memhook_testing_cache *cache, uint64_t ptr, uint64_t len,
                                 memhook_region *out);
size_t memhook_testing_cache_regions(memhook_testing_cache *cache, memhook_region *out,
                                     size_t capacity);
void memhook_testing_cache_types(memhook_testing_cache *cache, const uint64_t *ptrs,
                                 size_t count, uint8_t *types);
void memhook_testing_cache_stage(memhook_testing_cache *cache, const memhook_event *events,
                                 size_t count);
void memhook_testing_cache_commit(memhook_testing_cache *cache, int deferrable);
size_t memhook_testing_cache_deferred(memhook_testing_cache *cache);
int memhook_testing_cache_driver_alloc_at(memhook_testing_cache *cache, uint64_t addr,
                                          memhook_region *out);
int memhook_testing_cache_search_steps(memhook_testing_cache *cache);
int memhook_testing_span_touches(uint64_t back, uint64_t lo, uint64_t hi);
"""

# The two driver queries of memhook/_binding/driver.py, called through pointers that
# dlsym finds in an already-loaded libcuda.so.1 (memhook never links or loads
# the driver).  Their types come from cuda_abi.h, so the compiler checks these
# declarations and cffi checks every argument at the call.
DRIVER_CDEF = """
typedef int... CUresult;
typedef int... CUpointer_attribute;
typedef int... CUdeviceptr;
typedef CUresult (*mh_cuPointerGetAttributes_fn)(unsigned int, CUpointer_attribute *,
                                                 void **, CUdeviceptr);
typedef CUresult (*mh_cuMemGetAddressRange_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
#define RTLD_NOW ...
#define RTLD_NOLOAD ...
void *dlopen(const char *file, int mode);
void *dlsym(void *handle, const char *name);
"""

DRIVER_SOURCE = """
#include <dlfcn.h>
#include "memhook/cuda_abi.h"
typedef CUresult (*mh_cuPointerGetAttributes_fn)(unsigned int, CUpointer_attribute *,
                                                 void **, CUdeviceptr);
typedef CUresult (*mh_cuMemGetAddressRange_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
"""

ffibuilder = FFI()
BATCH_SEARCH_CDEF = """
void memhook_lower_bounds(const uint64_t *sorted, size_t n, const uint64_t *keys, size_t m,
                          int64_t *out);
void memhook_memory_types(const uint64_t *starts, const uint64_t *lasts, const uint8_t *types,
                          size_t regions, const uint64_t *keys, size_t m, uint8_t *codes,
                          uint8_t *absent);
"""

# The module's init, wrapped so that it also adds csrc/pyext/query.c's and
# control.c's builtins (query_type, control_install...) to the module cffi
# made.  This text
# follows cffi's own helpers in the generated C and precedes its PyInit,
# which calls _cffi_init by that name (cffi 1.x and 2.x): renaming the call
# is the whole hook, and memhook/_queries/query.py fails its import with a clear
# error if the builtins are missing.
INIT_WRAP = """
int memhook_pyext_add(PyObject *module);
int memhook_pyext_control_add(PyObject *module);
static PyObject *memhook_cffi_init(const char *name, Py_ssize_t version,
                                   const struct _cffi_type_context_s *ctx)
{
    PyObject *module = _cffi_init(name, version, ctx);
    if (module != NULL && (memhook_pyext_add(module) != 0 ||
                           memhook_pyext_control_add(module) != 0))
        Py_CLEAR(module);
#ifdef Py_GIL_DISABLED
    /* The builtins keep memos in statics read and written under the GIL
     * (docs/design/python-queries.md); cffi may have declared the module
     * GIL-free, so say otherwise: CPython then turns the GIL on. */
    if (module != NULL && PyUnstable_Module_SetGIL(module, Py_MOD_GIL_USED) != 0)
        Py_CLEAR(module);
#endif
    return module;
}
#define _cffi_init memhook_cffi_init
"""

ffibuilder.cdef(CDEF + DRIVER_CDEF + BATCH_SEARCH_CDEF)
ffibuilder.set_source(
    "memhook._native",
    '#include "memhook/memhook.h"\n#include "memhook_internal/api.h"\n' + DRIVER_SOURCE
    + BATCH_SEARCH_CDEF + INIT_WRAP,
    sources=[QUERY, CONTROL, BATCH_SEARCH],
    include_dirs=[INCLUDE],
    libraries=["memhook", "dl"],  # dl: dlopen/dlsym before glibc 2.34
    # library_dirs is filled in by setup.py's build_ext, which builds the core
    # first; the rpath makes the installed extension find it beside itself.
    extra_link_args=["-Wl,-rpath,$ORIGIN", "-Wl,-z,now"],
    extra_compile_args=["-Wall", "-Wextra", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
