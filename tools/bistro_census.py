#!/usr/bin/env python3
"""Run bistro's x86-64 relocator over every function of a library.

Input is either an ELF shared library (every STT_FUNC symbol of .dynsym and
.symtab with a size, its bytes read from the file) or a JSON file of prologue
vectors recorded from NVIDIA's libraries (library -> symbol -> [symbol size,
hex of the first 32 bytes]; tests/data/nvidia-prologues.json, the default).
Each function is judged with ``memhook_bistro_analyze`` for both patch forms: the 5-byte ``jmp rel32``
and the 12-byte ``movabs rax; jmp rax``, with the hypothetical trampoline
1 GiB above the function so RIP-relative operands are judged the way a
trampoline mapped within +-2 GiB would see them.  For the JSON vectors only
32 bytes are known, so the back-branch sweep covers those bytes.

Output: per library the figures and the refusals grouped by reason (with
examples, which name the function, library and bytes), the allocation/free
entry points of csrc/cuda/hook_table.def that are not patchable, and, as the last
line, the totals::

    patchable 5-byte: X/Y, 12-byte: X/Y

    python tools/bistro_census.py PROLOGUES.json
    python tools/bistro_census.py /lib/x86_64-linux-gnu/libc.so.6
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "tests" / "data" / "nvidia-prologues.json"

GIB = 1 << 30
JUMP_SIZES = (5, 12)

# csrc/cuda/hook_table.def: the allocation / free entry points (and their _ptsz
# variants) that bistro must be able to patch.
DRIVER_ENTRY_POINTS = (
    "cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocPitch", "cuMemAllocPitch_v2", "cuMemAllocManaged",
    "cuMemFree", "cuMemFree_v2", "cuMemAllocHost", "cuMemAllocHost_v2", "cuMemHostAlloc",
    "cuMemFreeHost", "cuMemMap", "cuMemUnmap", "cuMemAllocAsync", "cuMemFreeAsync",
    "cuMemAllocFromPoolAsync", "cuModuleGetGlobal", "cuModuleGetGlobal_v2", "cuLibraryGetGlobal",
    "cuLibraryGetManaged", "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle",
    "cuMemHostRegister", "cuMemHostRegister_v2", "cuMemHostUnregister",
)
RUNTIME_ENTRY_POINTS = (
    "cudaMalloc", "cudaMallocManaged", "cudaMallocPitch", "cudaMallocAsync",
    "cudaMallocFromPoolAsync", "cudaMallocHost", "cudaHostAlloc", "cudaFree", "cudaFreeAsync",
    "cudaFreeHost", "cudaGetSymbolAddress", "cudaHostRegister", "cudaHostUnregister",
)
ENTRY_POINTS = frozenset(
    name + suffix for name in DRIVER_ENTRY_POINTS + RUNTIME_ENTRY_POINTS for suffix in ("", "_ptsz")
)

REFUSAL_NAMES = {
    0: "ok", 1: "decode-failed", 2: "rip-out-of-range", 3: "branch-out-of-range",
    4: "unsupported", 5: "too-short", 6: "branch-into-window", 7: "no-room",
}


@dataclasses.dataclass
class Function:
    name: str
    address: int
    size: int      # symbol size (0 = unknown)
    code: bytes    # the bytes known (all of them for an ELF, 32 for the vectors)


@dataclasses.dataclass
class Verdict:
    function: Function
    patchable: bool
    refusal: int
    reason: str
    patch_offset: int
    consumed: int


def analyze(fn: Function, library: str, jump_size: int) -> Verdict:
    from memhook._binding.core import ffi, lib

    out = ffi.new("memhook_bistro_analysis *")
    code = fn.code if fn.code else b"\x00"
    rc = lib.memhook_bistro_analyze(code, len(fn.code), fn.address, fn.size, jump_size,
                                    fn.address + GIB, fn.name.encode(), library.encode(), out)
    if rc != 0:
        raise RuntimeError(f"memhook_bistro_analyze({fn.name}) returned {rc}")
    return Verdict(fn, bool(out.patchable), out.refusal, ffi.string(out.reason).decode(
        errors="replace"), out.patch_offset, out.consumed)


# ------------------------------------------------------------------ sources

def functions_from_json(path: Path) -> dict[str, list[Function]]:
    data = json.loads(path.read_text())
    libraries = data.get("libraries", data)
    result: dict[str, list[Function]] = {}
    for library, symbols in libraries.items():
        fns = []
        # Synthetic, well-spaced addresses: only relative distances matter.
        for i, (name, (size, hexbytes)) in enumerate(sorted(symbols.items())):
            fns.append(Function(name, 0x7F0000000000 + i * 0x10000, int(size),
                                bytes.fromhex(hexbytes)))
        result[library] = fns
    return result


def functions_from_elf(path: Path) -> dict[str, list[Function]]:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    fns: dict[tuple[str, int], Function] = {}
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        if elf.get_machine_arch() != "x64":
            raise SystemExit(f"{path}: not an x86-64 ELF ({elf.get_machine_arch()})")
        sections = list(elf.iter_sections())
        for symtab_name in (".dynsym", ".symtab"):
            symtab = elf.get_section_by_name(symtab_name)
            if not isinstance(symtab, SymbolTableSection):
                continue
            for sym in symtab.iter_symbols():
                if sym["st_info"]["type"] != "STT_FUNC" or sym["st_size"] == 0:
                    continue
                shndx = sym["st_shndx"]
                if not isinstance(shndx, int) or shndx >= len(sections):
                    continue
                sec = sections[shndx]
                if sec["sh_type"] == "SHT_NOBITS":
                    continue
                value, size = sym["st_value"], sym["st_size"]
                name = sym.name.split("@")[0]
                if (name, value) in fns:
                    continue
                start = sec["sh_offset"] + (value - sec["sh_addr"])
                if value < sec["sh_addr"] or value + size > sec["sh_addr"] + sec["sh_size"]:
                    continue
                fh.seek(start)
                code = fh.read(size)
                # Executables may load anywhere: place them where a shared
                # object would be, so +1 GiB stays a plausible trampoline.
                fns[(name, value)] = Function(name, 0x7F0000000000 + value, size, code)
    return {path.name: sorted(fns.values(), key=lambda f: f.address)}


# ------------------------------------------------------------------- report

def _reason_key(v: Verdict) -> str:
    """Group reasons: the refusal kind plus the reason text with the names,
    numbers and bytes taken out."""
    text = v.reason
    # "<library>: <name>: <why> [bytes: ...]"
    parts = text.split(": ", 2)
    why = parts[2] if len(parts) == 3 else text
    why = re.sub(r"\s*\[bytes:.*\]$", "", why)
    why = re.sub(r"0x[0-9a-f]+", "ADDR", why)
    why = re.sub(r"[+-]?\d+(\.\d+)?", "N", why)
    why = re.sub(r"\(([a-z ]+): [0-9a-f ]+\)", r"(\1)", why)
    return f"{REFUSAL_NAMES.get(v.refusal, v.refusal)}: {why}"


def census(libraries: dict[str, list[Function]], examples: int = 3,
           out=sys.stdout) -> dict:
    summary: dict = {"libraries": {}, "entry_points": {}}
    totals = {js: [0, 0] for js in JUMP_SIZES}
    for library, fns in libraries.items():
        lib_counts = {js: [0, len(fns)] for js in JUMP_SIZES}
        groups: dict[int, dict[str, list[Verdict]]] = {js: collections.defaultdict(list)
                                                       for js in JUMP_SIZES}
        entry_refused = []
        entries_seen = 0
        for fn in fns:
            is_entry = fn.name in ENTRY_POINTS
            entries_seen += is_entry
            for js in JUMP_SIZES:
                v = analyze(fn, library, js)
                if v.patchable:
                    lib_counts[js][0] += 1
                else:
                    groups[js][_reason_key(v)].append(v)
                    if is_entry:
                        entry_refused.append((js, v.reason))
        print(f"== {library}: {len(fns)} functions", file=out)
        for js in JUMP_SIZES:
            ok, n = lib_counts[js]
            totals[js][0] += ok
            totals[js][1] += n
            pct = 100.0 * ok / n if n else 100.0
            print(f"  {js:2d}-byte: {ok}/{n} patchable ({pct:.2f}%)", file=out)
            for key, vs in sorted(groups[js].items(), key=lambda kv: -len(kv[1])):
                print(f"    {len(vs):5d}  {key}", file=out)
                for v in vs[:examples]:
                    print(f"           e.g. {v.reason}", file=out)
        if entries_seen:
            print(f"  allocation/free entry points: {entries_seen} present, "
                  f"{len({r for _, r in entry_refused})} refusals", file=out)
            for js, reason in entry_refused:
                print(f"    {js}-byte refused: {reason}", file=out)
        summary["libraries"][library] = {
            str(js): {"patchable": lib_counts[js][0], "total": lib_counts[js][1],
                      "refusals": {k: len(v) for k, v in groups[js].items()}}
            for js in JUMP_SIZES
        }
        summary["entry_points"][library] = {"present": entries_seen,
                                            "refused": [r for _, r in entry_refused]}
    summary["totals"] = {str(js): {"patchable": totals[js][0], "total": totals[js][1]}
                         for js in JUMP_SIZES}
    print(f"patchable 5-byte: {totals[5][0]}/{totals[5][1]}, "
          f"12-byte: {totals[12][0]}/{totals[12][1]}", file=out)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", nargs="?", default=str(DEFAULT_JSON),
                    help="an x86-64 ELF library, or the prologue vectors JSON "
                         "(default: %(default)s)")
    ap.add_argument("--examples", type=int, default=3, help="examples per refusal reason")
    ap.add_argument("--summary-json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    path = Path(args.input)
    if not path.exists():
        ap.error(f"{path}: no such file")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    libraries = functions_from_elf(path) if magic == b"\x7fELF" else functions_from_json(path)
    summary = census(libraries, args.examples)
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
