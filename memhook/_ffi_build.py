"""cffi (API mode) builder for memhook._native, the bridge to libmemhook.so.

Run by setup.py (``cffi_modules``).  The extension links to the core library
with rpath ``$ORIGIN``, so it always binds the libmemhook.so sitting next to
it: the same file that ``memhook trace`` LD_PRELOADs.  API mode means the C
compiler checks every declaration below against memhook.h.
"""

from __future__ import annotations

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(os.path.dirname(HERE), "csrc", "include")

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
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
ffibuilder.set_source(
    "memhook._native",
    '#include "memhook/memhook.h"\n',
    include_dirs=[INCLUDE],
    libraries=["memhook"],
    # library_dirs is filled in by setup.py's build_ext, which builds the core
    # first; the rpath makes the installed extension find it beside itself.
    extra_link_args=["-Wl,-rpath,$ORIGIN", "-Wl,-z,now"],
    extra_compile_args=["-Wall", "-Wextra", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
