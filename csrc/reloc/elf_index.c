/*
 * elf_index.c - read a loaded object's dynamic section and enumerate the
 * relocations that bind a named symbol to a pointer-sized slot.
 *
 * Relocation kinds (x86-64 only uses RELA):
 *   DT_JMPREL   R_X86_64_JUMP_SLOT   PLT GOT slots (lazy or bound at load)
 *   DT_RELA     R_X86_64_GLOB_DAT    GOT slots of address-taken symbols and
 *                                    of every call in -fno-plt code
 *               R_X86_64_64          absolute pointers in data
 * Each relocation is reported with its plain name and, where the object
 * records one (DT_VERSYM + DT_VERNEED), the version it needs, so callers can
 * match "name" or "name@VERSION".
 *
 * d_ptr values: glibc adds the load bias to the DT_* pointers of the objects
 * it relocates, in place; the vDSO's (and those of loaders that keep the
 * dynamic section read-only) stay file-relative.  A value below the load
 * bias cannot be an absolute address inside the object, so it is relocated.
 */
#include <string.h>

#include "reloc_int.h"

static uintptr_t dyn_ptr(uintptr_t base, ElfW(Addr) value)
{
    return (base != 0 && value < base) ? base + value : (uintptr_t)value;
}

bool mh_phdr_contains(uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum, uintptr_t addr)
{
    for (size_t i = 0; i < phnum; i++) {
        if (phdr[i].p_type != PT_LOAD)
            continue;
        uintptr_t start = base + phdr[i].p_vaddr;
        if (addr >= start && addr < start + phdr[i].p_memsz)
            return true;
    }
    return false;
}

int mh_elf_prot(uintptr_t base, const ElfW(Phdr) *phdr, size_t phnum, uintptr_t addr)
{
    for (size_t i = 0; i < phnum; i++) {
        if (phdr[i].p_type != PT_GNU_RELRO)
            continue;
        uintptr_t start = base + phdr[i].p_vaddr;
        uintptr_t end = (start + phdr[i].p_memsz) & ~(uintptr_t)4095;  /* ld.so rounds down */
        if (addr >= (start & ~(uintptr_t)4095) && addr < end)
            return 1; /* PROT_READ */
    }
    for (size_t i = 0; i < phnum; i++) {
        if (phdr[i].p_type != PT_LOAD)
            continue;
        uintptr_t start = base + phdr[i].p_vaddr;
        if (addr >= start && addr < start + phdr[i].p_memsz)
            return ((phdr[i].p_flags & PF_R) ? 1 : 0) | ((phdr[i].p_flags & PF_W) ? 2 : 0) |
                   ((phdr[i].p_flags & PF_X) ? 4 : 0);
    }
    return -1;
}

bool mh_elf_contains(const mh_elf_object *obj, uintptr_t addr)
{
    return mh_phdr_contains(obj->base, obj->phdr, obj->phnum, addr);
}

bool mh_elf_parse(uintptr_t base, const char *name, const ElfW(Phdr) *phdr, size_t phnum,
                  mh_elf_object *out)
{
    memset(out, 0, sizeof(*out));
    out->base = base;
    out->name = name ? name : "";
    out->phdr = phdr;
    out->phnum = phnum;
    const ElfW(Dyn) *dyn = NULL;
    for (size_t i = 0; i < phnum; i++)
        if (phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + phdr[i].p_vaddr);
    if (dyn == NULL)
        return false;

    size_t relasz = 0, relaent = sizeof(ElfW(Rela)), pltrelsz = 0;
    ElfW(Sxword) pltrel = DT_RELA;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB: out->symtab = (const ElfW(Sym) *)dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_STRTAB: out->strtab = (const char *)dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_STRSZ: out->strsz = dyn->d_un.d_val; break;
        case DT_VERSYM: out->versym = (const ElfW(Versym) *)dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_VERNEED: out->verneed = (const ElfW(Verneed) *)dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_VERNEEDNUM: out->verneednum = dyn->d_un.d_val; break;
        case DT_JMPREL: out->jmprel = (const ElfW(Rela) *)dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: pltrelsz = dyn->d_un.d_val; break;
        case DT_PLTREL: pltrel = dyn->d_un.d_val; break;
        case DT_RELA: out->rela = (const ElfW(Rela) *)dyn_ptr(base, dyn->d_un.d_ptr); break;
        case DT_RELASZ: relasz = dyn->d_un.d_val; break;
        case DT_RELAENT: relaent = dyn->d_un.d_val; break;
        default: break;
        }
    }
    if (out->symtab == NULL || out->strtab == NULL)
        return false;
    if (pltrel != DT_RELA || relaent != sizeof(ElfW(Rela)))
        out->jmprel = NULL;   /* not the x86-64 layout: leave it alone */
    out->jmprel_count = out->jmprel ? pltrelsz / sizeof(ElfW(Rela)) : 0;
    out->rela_count = (out->rela && relaent == sizeof(ElfW(Rela))) ? relasz / relaent : 0;
    return true;
}

/* The version name a symbol index needs, from DT_VERSYM/DT_VERNEED. */
static const char *needed_version(const mh_elf_object *obj, size_t sym_index)
{
    if (obj->versym == NULL || obj->verneed == NULL)
        return NULL;
    ElfW(Versym) ndx = obj->versym[sym_index] & 0x7fff;
    if (ndx < 2)   /* local / global: unversioned */
        return NULL;
    const ElfW(Verneed) *vn = obj->verneed;
    for (size_t i = 0; i < obj->verneednum; i++) {
        const ElfW(Vernaux) *va = (const ElfW(Vernaux) *)((const char *)vn + vn->vn_aux);
        for (size_t j = 0; j < vn->vn_cnt; j++) {
            if (va->vna_other == ndx)
                return obj->strtab + va->vna_name;
            if (va->vna_next == 0)
                break;
            va = (const ElfW(Vernaux) *)((const char *)va + va->vna_next);
        }
        if (vn->vn_next == 0)
            break;
        vn = (const ElfW(Verneed) *)((const char *)vn + vn->vn_next);
    }
    return NULL;   /* defined here (Verdef) or unknown: treat as unversioned */
}

static bool visit(const mh_elf_object *obj, const ElfW(Rela) *r, mh_elf_reloc_fn fn, void *ctx)
{
    uint32_t type = ELF64_R_TYPE(r->r_info);
    size_t sym_index = ELF64_R_SYM(r->r_info);
    if (sym_index == 0)
        return true;
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT && type != R_X86_64_64)
        return true;
    const ElfW(Sym) *sym = &obj->symtab[sym_index];
    if (sym->st_name == 0 || (obj->strsz && sym->st_name >= obj->strsz))
        return true;
    mh_elf_reloc rel = {
        .name = obj->strtab + sym->st_name,
        .version = needed_version(obj, sym_index),
        .slot = (void **)(obj->base + r->r_offset),
        .addend = r->r_addend,
        .type = type,
        .sym = sym,
    };
    return fn(obj, &rel, ctx);
}

void mh_elf_for_each_reloc(const mh_elf_object *obj, mh_elf_reloc_fn fn, void *ctx)
{
    for (size_t i = 0; i < obj->jmprel_count; i++)
        if (!visit(obj, &obj->jmprel[i], fn, ctx))
            return;
    for (size_t i = 0; i < obj->rela_count; i++)
        if (!visit(obj, &obj->rela[i], fn, ctx))
            return;
}
