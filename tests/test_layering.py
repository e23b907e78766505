"""The C core's layering: no file includes a header from a layer above its
own (issue 16).  The layers, bottom up, as docs/architecture.md draws them:

    include/   the public API (memhook/memhook.h, memhook/cuda_abi.h) and
               what the core exports for its own tests and Python binding
               (memhook_internal/api.h, not installed)
    core/      helpers every layer may use: logging, options, clock, the
               /proc/self/maps reader, visibility, sonames, the lock order
    queue/     the event queue: lanes, drain, clock        } peers: none
    bistro/    patching function entries                   } includes
    reloc/     rewriting GOT slots                         } another
    trace/     the trace streamer: includes the queue; its lane header
               (trace_lane.h) is how the hooks hand it each event
    cuda/      the CUDA hook layer: uses all of the above

Calls follow the same order (call_climbs): no file calls a function defined
in a layer above its own or in a peer, whatever header declares it - the
public memhook.h included.  A lower layer reaches a higher one only through
a callback the higher one registered (the objects' observers, the queue's
feed and sink, reloc's interposers); the hook layer starts the hooks, for
the trace too (csrc/cuda/startup_order.c).  csrc/sim/ is a separate
product (the simulated driver and runtime) and is not part of this order.

Headers are included by bare name (csrc/build_native.py puts every layer's
folder on the include path), so a header name must also be unique across
the layers, or one would silently shadow another.

bistro's generic files reach its x86-64 part (bistro/arch/x86_64/) through
bistro/arch.h only, and name no opcode, register or decoder (ARCH_SPECIFIC).

The core keeps one of each helper (the environment, the monotonic clock, the
driver's soname, the /proc/self/maps reader, MH_HIDDEN); ONE_OF_EACH holds
each to its one file.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections import defaultdict
from pathlib import Path

from memhook_testing import CSRC, ROOT

# Rank of each folder of the core; a file may include headers of its own
# folder and of folders of strictly lower rank only.
LAYERS: dict[str, int] = {
    "include": 0,
    "core": 1,
    "queue": 2,
    "bistro": 2,
    "reloc": 2,
    "trace": 3,
    # the memory-type cache: fed by the queue (a registered feed), told of
    # the hooks by cuda/; it knows nothing of them.
    "cache": 3,
    "cuda": 4,
    # memory_type's fast path, built into the Python extension (not the core
    # library): it may use every layer's public header, nothing includes it.
    "pyext": 5,
}
SOURCE_SUFFIXES = {".c", ".h", ".S", ".def"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def _core_files(root: Path) -> list[Path]:
    files = [p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()
             and p.relative_to(root).parts[0] != "sim"]
    assert files, f"no C sources under {root}"
    return sorted(files)


def _headers_by_name(root: Path, files: list[Path]) -> dict[str, list[Path]]:
    by_name: dict[str, list[Path]] = defaultdict(list)
    for p in files:
        if p.suffix in {".h", ".def"}:
            rel = p.relative_to(root)
            key = str(p.relative_to(root / "include")) if rel.parts[0] == "include" else p.name
            by_name[key].append(p)
    return by_name


def layering_violations(root: Path) -> list[str]:
    """One line per include under `root` (a csrc/ tree) that breaks the
    order, names no header of the core, or sits in a folder with no layer."""
    files = _core_files(root)
    by_name = _headers_by_name(root, files)
    problems = []
    for src in files:
        layer = src.relative_to(root).parts[0]
        where = src.relative_to(root)
        if layer not in LAYERS:
            problems.append(f"{where}: folder {layer!r} has no layer; add it "
                            f"to LAYERS in {Path(__file__).name} (known: {sorted(LAYERS)})")
            continue
        for m in INCLUDE.finditer(src.read_text()):
            quote, name = m.groups()
            local = src.parent / name
            if quote == '"' and local.is_file():
                target = local
            elif name in by_name:
                target = by_name[name][0]
            elif quote == "<":
                continue  # a system header
            else:
                problems.append(f"{where}: #include \"{name}\" is no header of the core")
                continue
            to = target.relative_to(root).parts[0]
            if to != layer and LAYERS.get(to, 99) >= LAYERS[layer]:
                problems.append(f"{where} ({layer}, rank {LAYERS[layer]}) includes "
                                f"{target.relative_to(root)} ({to}, rank {LAYERS.get(to)})")
    return problems


def test_no_file_includes_a_header_from_a_layer_above_it() -> None:
    problems = layering_violations(CSRC)
    assert not problems, "layering broken:\n  " + "\n  ".join(problems)


def test_header_names_are_unique_across_layers() -> None:
    dupes = {name: [str(p.relative_to(CSRC)) for p in paths]
             for name, paths in _headers_by_name(CSRC, _core_files(CSRC)).items()
             if len(paths) > 1}
    assert not dupes, f"headers are included by bare name; these shadow each other: {dupes}"


def test_every_layer_folder_exists() -> None:
    folders = {p.name for p in CSRC.iterdir() if p.is_dir() and p.name not in {"sim", "__pycache__"}}
    assert folders == set(LAYERS), (folders, set(LAYERS))


def test_the_check_catches_an_upward_include(tmp_path: Path) -> None:
    """The checker on a copy of the core with two bad includes added to the
    queue: one of the hook layer's header, one of a peer's."""
    root = tmp_path / "csrc"
    shutil.copytree(CSRC, root, ignore=shutil.ignore_patterns("sim", "__pycache__", "*.py"))
    assert layering_violations(root) == []
    clock = root / "queue" / "clock.c"
    clock.write_text('#include "cuda_hooks.h"\n#include "bistro.h"\n' + clock.read_text())
    problems = layering_violations(root)
    assert any("queue/clock.c (queue, rank 2) includes cuda/cuda_hooks.h" in p for p in problems)
    assert any("queue/clock.c (queue, rank 2) includes bistro/bistro.h" in p for p in problems)
    assert len(problems) == 2, problems


# A function definition at file scope: not static, its name before the
# parameter list, its body next (declarations end in ';').
_DEFINITION = re.compile(r"^(?!static\b|typedef\b|extern\b)[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)"
                         r"\s*\((?:[^;{}()]|\([^()]*\))*\)\s*\{", re.M)


def _bare_code(path: Path) -> str:
    """A file's code without comments, strings and attributes."""
    return _ATTRIBUTE.sub("", _STRING.sub('""', _COMMENT.sub("", path.read_text())))


def call_climbs(root: Path) -> list[str]:
    """One line per function of another layer that a file under `root` (a
    csrc/ tree) names although that layer is not below its own: a call up,
    or across to a peer.  The public API's declarations (include/) call
    nothing; a function pointer a layer registers is named only by its own
    layer, so a callback is never a climb."""
    files = _core_files(root)
    defined_in: dict[str, set[str]] = defaultdict(set)
    for src in files:
        if src.suffix == ".c":
            layer = src.relative_to(root).parts[0]
            for name in _DEFINITION.findall(_bare_code(src)):
                defined_in[name].add(layer)
    problems = []
    for src in files:
        layer = src.relative_to(root).parts[0]
        if layer == "include" or layer not in LAYERS or src.suffix not in {".c", ".h"}:
            continue
        for name in sorted(set(_IDENT.findall(_bare_code(src)))):
            owners = defined_in.get(name, set())
            if owners and layer not in owners:
                above = sorted(o for o in owners if LAYERS.get(o, 99) >= LAYERS[layer])
                if above:
                    problems.append(f"{src.relative_to(root).as_posix()} ({layer}, rank "
                                    f"{LAYERS[layer]}) calls {name}, defined in "
                                    f"{', '.join(above)} (rank {LAYERS[above[0]]})")
    return problems


def test_no_file_calls_a_function_of_a_layer_above_it() -> None:
    problems = call_climbs(CSRC)
    assert not problems, "calls climb the layers:\n  " + "\n  ".join(problems)


def test_the_call_check_catches_a_call_up_and_across(tmp_path: Path) -> None:
    """On a copy of the core: the trace installing the hooks itself through
    the public API (what it did before the hook layer started them), and
    the queue calling bistro, its peer.  A callback registered from above,
    and a name in a comment or a message, are fine."""
    root = tmp_path / "csrc"
    shutil.copytree(CSRC, root, ignore=shutil.ignore_patterns("sim", "__pycache__", "*.py"))
    assert call_climbs(root) == []
    trace = root / "trace" / "trace.c"
    trace.write_text(trace.read_text() + """
/* memhook_hooks_install in a comment is fine */
static int install_here(unsigned mode)
{
    char why[64] = "memhook_mode_parse";
    return memhook_hooks_install(mode, why, sizeof why);
}
""")
    clock = root / "queue" / "clock.c"
    clock.write_text(clock.read_text() + "\nstatic void poke(void) { memhook_bistro_remove(0); }\n")
    assert call_climbs(root) == [
        "queue/clock.c (queue, rank 2) calls memhook_bistro_remove, defined in bistro (rank 2)",
        "trace/trace.c (trace, rank 3) calls memhook_hooks_install, defined in cuda (rank 4)",
    ]


# The core's "one of each" helpers (issue 16): each pattern may appear in
# code (comments stripped) only in the file that owns it.
ONE_OF_EACH: dict[str, tuple[str, str]] = {
    "reads the environment": (r"\bgetenv\s*\(", "core/mh_options.c"),
    "reads CLOCK_MONOTONIC": (r"\bclock_gettime\s*\(", "core/mh_time.h"),
    "names the driver's soname": (r'"libcuda\.so', "core/mh_sonames.h"),
    "opens /proc/self/maps": (r'"/proc/self/maps"', "core/procfs.c"),
    "defines MH_HIDDEN": (r"#\s*define\s+MH_HIDDEN\b", "core/mh_visibility.h"),
    # One registration, in the lock order (core/mh_lock_order.h): a module
    # registering its own would run its prepare out of that order.
    "registers fork() handlers": (r"\bpthread_atfork\s*\(", "cuda/fork_order.c"),
}
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def one_of_each_violations(root: Path) -> list[str]:
    problems = []
    for src in _core_files(root):
        code = _COMMENT.sub("", src.read_text())
        rel = src.relative_to(root).as_posix()
        for what, (pattern, owner) in ONE_OF_EACH.items():
            if rel != owner and re.search(pattern, code):
                problems.append(f"{rel} {what}; only {owner} may (use its helper)")
    return problems


def test_one_of_each_helper() -> None:
    problems = one_of_each_violations(CSRC)
    assert not problems, "\n  ".join(["helpers duplicated:", *problems])


def test_the_one_of_each_check_catches_a_second_reader(tmp_path: Path) -> None:
    root = tmp_path / "csrc"
    shutil.copytree(CSRC, root, ignore=shutil.ignore_patterns("sim", "__pycache__", "*.py"))
    trace = root / "trace" / "trace.c"
    trace.write_text(trace.read_text() + '\n/* getenv("X") in a comment is fine */\n'
                     'static const char *knob(void) { return getenv("MEMHOOK_X"); }\n')
    assert one_of_each_violations(root) == [
        "trace/trace.c reads the environment; only core/mh_options.c may (use its helper)"]


# bistro's generic patcher (plan, write, publish, restore) knows no
# instruction set: x86-64's encodings, registers and decoder live in
# csrc/bistro/arch/x86_64/, reached through the one door bistro/arch.h (the
# split of funchook's funchook_internal.h + funchook_x86.c and UCX's
# bistro.c + bistro_x86_64.c).  Looked for in code, comments and strings
# stripped: a comment may explain int3, a refusal may name an endbr64.
ARCH_DOOR = "bistro/arch.h"
ARCH_SPECIFIC: dict[str, str] = {
    "an x86-64 opcode byte": r"\b0x(?:E9|CC|EB|FEEB|48|B8|0F|50|57|58)\b",
    "a machine register of the signal context": r"\bREG_[A-Z0-9]+\b|\bgregs\b|\buc_mcontext\b",
    "the x86-64 decoder": r"\b(?:mh_x86_|MH_X86_|MH_FLOW_)\w*",
    "x86-64 instructions": r"\b__builtin_ia32_\w+|\b__asm__\b|\basm\b|\bmovabs\b|\bint3\b",
}
# Only the door names the instruction set and includes its files.
ARCH_SELECTION = r'\b__x86_64__\b|#\s*include\s*"(?:arch/|x86\.h|arch_x86_64\.h)'
_STRING = re.compile(r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'")


def arch_violations(root: Path) -> list[str]:
    """One line per x86-64 specific in a generic bistro file under `root`
    (a csrc/ tree): outside bistro/arch/, and outside the door but for its
    selection of the instruction set."""
    problems = []
    for src in _core_files(root):
        rel = src.relative_to(root)
        if rel.parts[0] != "bistro" or rel.parts[1] == "arch":
            continue
        code = _COMMENT.sub("", src.read_text())
        bare = _STRING.sub('""', code)
        found = [what for what, pattern in ARCH_SPECIFIC.items() if re.search(pattern, bare, re.I)]
        if rel.as_posix() != ARCH_DOOR and re.search(ARCH_SELECTION, code):
            found.append("the instruction set's own files")
        problems += [f"{rel.as_posix()} names {what}: it belongs in bistro/arch/x86_64/, "
                     f"reached through {ARCH_DOOR}" for what in found]
    return problems


def test_generic_bistro_files_hold_no_x86_specifics() -> None:
    problems = arch_violations(CSRC)
    assert not problems, "\n  ".join(["x86-64 outside bistro/arch/:", *problems])


def test_the_arch_check_catches_x86_in_generic_files(tmp_path: Path) -> None:
    """On a copy of the core: the pc read through the ucontext's REG_RIP
    in the live write, a jmp opcode in the patch record, the decoder's
    header included by the planner.  Comments and messages may say it."""
    root = tmp_path / "csrc"
    shutil.copytree(CSRC, root, ignore=shutil.ignore_patterns("sim", "__pycache__", "*.py"))
    assert arch_violations(root) == []
    arch = root / "bistro" / "arch" / "x86_64" / "arch_x86_64.h"
    assert re.search(ARCH_SPECIFIC["a machine register of the signal context"], arch.read_text())
    poke = root / "bistro" / "text_poke.c"
    poke.write_text(poke.read_text() + "\n/* int3 and movabs in a comment are fine */\n"
                    "static uint64_t pc_of(ucontext_t *uc)\n"
                    "{ return (uint64_t)uc->uc_mcontext.gregs[REG_RIP]; }\n")
    patch = root / "bistro" / "patch.c"
    patch.write_text(patch.read_text() + '\nstatic const char *said = "movabs, 0xe9";\n'
                     "static const uint8_t jmp_rel32 = 0xe9;\n")
    plan = root / "bistro" / "plan.c"
    plan.write_text('#include "arch/x86_64/x86.h"\n' + plan.read_text())
    assert arch_violations(root) == [
        "bistro/patch.c names an x86-64 opcode byte: it belongs in bistro/arch/x86_64/, "
        "reached through bistro/arch.h",
        "bistro/plan.c names the instruction set's own files: it belongs in "
        "bistro/arch/x86_64/, reached through bistro/arch.h",
        "bistro/text_poke.c names a machine register of the signal context: it belongs in "
        "bistro/arch/x86_64/, reached through bistro/arch.h",
    ]


# A layer may split its header in two: the one the layers above include,
# declaring exactly what they use of it, and an internal one for the
# layer's own files (issue 27: reloc.h had 46 declarations, cuda/ used 10).
SPLIT_HEADERS: dict[str, tuple[str, str]] = {
    "reloc": ("reloc.h", "reloc_int.h"),
}
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")
_FN_TYPEDEF = re.compile(r"\btypedef\b[^;]*?\(\s*\*\s*(\w+)\s*\)\s*\(")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def declared_names(header: Path) -> set[str]:
    """The names a header declares: its MH_HIDDEN functions and variables,
    its typedefs and its macros (the include guard aside)."""
    text = _COMMENT.sub("", header.read_text())
    names = set(re.findall(r"^\s*#\s*define\s+(\w+)", text, re.M))
    names -= set(re.findall(r"^\s*#\s*ifndef\s+(\w+)", text, re.M))
    body = re.sub(r"^\s*#.*$", "", text, flags=re.M)
    body = _ATTRIBUTE.sub("", body)
    # Flatten braces (struct and enum bodies) so that each top-level
    # statement ends at its own semicolon.
    while re.search(r"\{[^{}]*\}", body):
        body = re.sub(r"\{[^{}]*\}", " ", body)
    for stmt in body.split(";"):
        stmt = " ".join(stmt.split())
        if not stmt:
            continue
        if stmt.startswith("typedef"):
            m = _FN_TYPEDEF.search(stmt)
            names.add(m.group(1) if m else _IDENT.findall(stmt)[-1])
        elif stmt.startswith("MH_HIDDEN"):
            fn = re.search(r"(\w+)\s*\(", stmt)
            names.add(fn.group(1) if fn else _IDENT.findall(stmt)[-1])
    return names


def split_header_violations(root: Path) -> list[str]:
    """One line per break of SPLIT_HEADERS' rule under `root` (a csrc/
    tree): a file outside the layer includes its internal header, a name
    of the internal header is used outside the layer, or the outer header
    declares a name no file outside the layer uses (nor any of its own
    declarations that are used, as a typedef is by a variable)."""
    files = _core_files(root)
    problems = []
    for layer, (outer, internal) in SPLIT_HEADERS.items():
        outside = [p for p in files if p.relative_to(root).parts[0] != layer]
        used: set[str] = set()
        for src in outside:
            rel = src.relative_to(root).as_posix()
            text = src.read_text()
            for m in INCLUDE.finditer(text):
                if Path(m.group(2)).name == internal:
                    problems.append(f"{rel} includes {layer}/{internal}, which is internal "
                                    f"to {layer}/; include {outer}")
            used |= set(_IDENT.findall(_COMMENT.sub("", text)))
        outer_path, internal_path = root / layer / outer, root / layer / internal
        missing = [p for p in (outer_path, internal_path) if not p.is_file()]
        if missing:
            problems += [f"{p.relative_to(root)} is missing" for p in missing]
            continue
        for name in sorted(declared_names(internal_path) & used):
            problems.append(f"{name} ({layer}/{internal}) is used outside {layer}/: "
                            f"declare it in {outer}")
        outer_names = declared_names(outer_path)
        outer_code = _COMMENT.sub("", outer_path.read_text())
        for name in sorted(outer_names - used):
            users = [n for n in outer_names & used
                     if re.search(rf"\b{name}\b[^;]*\b{n}\b", outer_code)]
            if not users:
                problems.append(f"{name} ({layer}/{outer}) is used by nothing outside "
                                f"{layer}/: move it to {internal}")
    return problems


def test_split_headers_declare_what_the_layers_above_use() -> None:
    problems = split_header_violations(CSRC)
    assert not problems, "\n  ".join(["split headers broken:", *problems])


def test_the_split_header_check_catches_each_break(tmp_path: Path) -> None:
    """On a copy of the core: cuda/ includes reloc_int.h, calls an internal
    name, and reloc.h declares a name nothing above uses."""
    root = tmp_path / "csrc"
    shutil.copytree(CSRC, root, ignore=shutil.ignore_patterns("sim", "__pycache__", "*.py"))
    assert split_header_violations(root) == []
    assert {"mh_reloc_interpose", "mh_real_dlsym", "mh_dlsym_fn", "mh_reloc_inside",
            "mh_reloc_watch_unload"} <= declared_names(root / "reloc" / "reloc.h")
    assert {"mh_reloc_lock", "mh_elf_object", "MH_RELOC_NAME_MAX", "mh_real_dlvsym",
            "mh_dlsym_entry"} <= declared_names(root / "reloc" / "reloc_int.h")
    gpa = root / "cuda" / "proc_address.c"
    gpa.write_text('#include "reloc_int.h"\n' + gpa.read_text()
                   + "\nstatic void locked(void) { mh_reloc_lock(); }\n")
    header = root / "reloc" / "reloc.h"
    header.write_text(header.read_text().replace(
        "#endif", "MH_HIDDEN int mh_reloc_unused(void);\n#endif"))
    assert split_header_violations(root) == [
        "cuda/proc_address.c includes reloc/reloc_int.h, which is internal to reloc/; "
        "include reloc.h",
        "mh_reloc_lock (reloc/reloc_int.h) is used outside reloc/: declare it in reloc.h",
        "mh_reloc_unused (reloc/reloc.h) is used by nothing outside reloc/: "
        "move it to reloc_int.h",
    ]


# The Python side's "one of each" (issue 27), as ONE_OF_EACH is the core's:
# each may appear in memhook/ only in the module that owns it.  Strings are
# looked at in code only: a docstring may name the file or the soname.
def _py_strings(tree: ast.AST) -> list[str]:
    """Every str or bytes constant of a module but its docstrings (a bare
    string statement), f-strings' literal parts included."""
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
            and id(node) not in docstrings]


def _splits_a_maps_line(tree: ast.AST) -> bool:
    """A call ``.split(None, 5)`` or ``.split(maxsplit=5)``: a maps line's
    six fields, the last the path (which may hold spaces)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "split"):
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            kw = {k.arg: k.value.value for k in node.keywords
                  if isinstance(k.value, ast.Constant)}
            if args[1:2] == [5] or kw.get("maxsplit") == 5:
                return True
    return False


PY_ONE_OF_EACH: dict[str, tuple[object, str]] = {
    "reads /proc/PID/maps": (lambda tree: any("/maps" in t for t in _py_strings(tree)),
                             "_objects/procmaps.py"),
    "parses a maps line": (_splits_a_maps_line, "_objects/procmaps.py"),
    "spells the driver's soname": (
        lambda tree: any("libcuda.so.1" in t for t in _py_strings(tree)),
        "_objects/sonames.py"),
}


def py_one_of_each_violations(package: Path) -> list[str]:
    problems = []
    for src in sorted(package.rglob("*.py")):
        rel = src.relative_to(package).as_posix()
        tree = ast.parse(src.read_text(), filename=str(src))
        for what, (found, owner) in PY_ONE_OF_EACH.items():
            if rel != owner and found(tree):  # type: ignore[operator]
                problems.append(f"memhook/{rel} {what}; only memhook/{owner} may (use it)")
    return problems


def test_python_has_one_of_each_helper() -> None:
    problems = py_one_of_each_violations(ROOT / "memhook")
    assert not problems, "\n  ".join(["Python helpers duplicated:", *problems])


def test_the_python_one_of_each_check_catches_a_second_reader(tmp_path: Path) -> None:
    package = tmp_path / "memhook"
    shutil.copytree(ROOT / "memhook", package,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.so.*", "*.a", "lib"))
    assert py_one_of_each_violations(package) == []
    (package / "cli" / "second.py").write_text(
        '"""Reads /proc/self/maps and loads libcuda.so.1 (a docstring may say so)."""\n'
        "import ctypes\n\n\n"
        "def libs(pid):\n"
        '    with open(f"/proc/{pid}/maps") as f:\n'
        "        return [line.split(None, 5) for line in f]\n\n\n"
        "def driver():\n"
        '    return ctypes.CDLL(b"libcuda.so.1")\n')
    assert py_one_of_each_violations(package) == [
        "memhook/cli/second.py reads /proc/PID/maps; "
        "only memhook/_objects/procmaps.py may (use it)",
        "memhook/cli/second.py parses a maps line; "
        "only memhook/_objects/procmaps.py may (use it)",
        "memhook/cli/second.py spells the driver's soname; "
        "only memhook/_objects/sonames.py may (use it)",
    ]
