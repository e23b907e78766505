"""The core's load and unload are written in one place, as its fork order is:
csrc/cuda/startup_order.c holds libmemhook.so's only constructor and
destructor, and calls every module's step (a function named *_at_load) in
an order whose reasons it gives.  A constructor in any other file of the
core would run in an order set by priorities and the link order, out of
sight of that file; a step nobody calls would silently not run.

Held twice: in the sources (every file libmemhook.so is built from, as
csrc/build_native.py lists them; the simulator's libraries are separate
objects and keep their own), and in the built library's .init_array and
.fini_array, where any other way of running code at load would show.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from memhook_testing import CSRC, NativeBuild, build_native

STARTUP = "cuda/startup_order.c"
# Running code at load or unload, by attribute or by section.
AT_LOAD = re.compile(r"__attribute__\s*\(\(\s*(?:__)?(?:constructor|destructor)(?:__)?\b"
                     r"|\.(?:init|fini|preinit)_array\b")
STEP_DEF = re.compile(r"^(?!static\b)[\w \t\*]*?\b(mh_\w+_at_(?:load|unload))\s*\(\s*void\s*\)\s*\{",
                      re.M)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_STRING = re.compile(r"\"(?:\\.|[^\"\\\n])*\"")


def core_sources(root: Path) -> list[Path]:
    """The files libmemhook.so is built from, under `root` (a csrc/ tree)."""
    core = next(t for t in build_native.TARGETS if t.name == "memhook/libmemhook.so")
    files = sorted({p for pattern in core.sources for p in root.glob(pattern)})
    assert files, f"no sources of libmemhook.so under {root}"
    return files


def _code(path: Path) -> str:
    return _STRING.sub('""', _COMMENT.sub("", path.read_text()))


def startup_violations(root: Path) -> list[str]:
    """One line per break under `root`: code run at load or unload outside
    the startup file, a step of the load that the startup file does not
    call, or calls more than once, or that is called elsewhere."""
    problems = []
    steps: dict[str, str] = {}
    for src in core_sources(root):
        rel = src.relative_to(root).as_posix()
        code = _code(src)
        if rel != STARTUP and AT_LOAD.search(_COMMENT.sub("", src.read_text())):
            problems.append(f"{rel} runs code at load or unload; add its step to {STARTUP}, "
                            "which holds the order")
        steps.update((name, rel) for name in STEP_DEF.findall(code))
    startup = _code(root / STARTUP)
    for name, where in sorted(steps.items()):
        calls = len(re.findall(rf"\b{name}\s*\(", startup))
        if calls != 1:
            problems.append(f"{name} ({where}) is called {calls} times by {STARTUP}; "
                            "a step of the load runs once, in its place there")
    for src in core_sources(root):
        rel = src.relative_to(root).as_posix()
        if rel == STARTUP:
            continue
        code = _code(src)
        for name, where in steps.items():
            calls = len(re.findall(rf"\b{name}\s*\(", code)) - (where == rel)
            if calls:
                problems.append(f"{rel} calls {name}; only {STARTUP} runs the steps of the load")
    return problems


def test_the_load_is_written_in_one_place() -> None:
    problems = startup_violations(CSRC)
    assert not problems, "\n  ".join(["startup order broken:", *problems])


def test_the_check_catches_a_constructor_elsewhere_and_a_step_not_run(tmp_path: Path) -> None:
    """On a copy of the core: a constructor in the queue's clock, a
    destructor by section in the cache, a step the startup file forgets
    and one the trace runs itself."""
    root = tmp_path / "csrc"
    shutil.copytree(CSRC, root, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    assert startup_violations(root) == []
    clock = root / "queue" / "clock.c"
    clock.write_text(clock.read_text() + "\n/* a __attribute__((constructor)) in a comment is "
                     "fine */\n__attribute__((constructor(101))) static void early(void) {}\n")
    feed = root / "cache" / "cache_feed.c"
    feed.write_text(feed.read_text() + "\nstatic void bye(void) {}\n"
                    '__attribute__((section(".fini_array"), used)) '
                    "static void (*bye_p)(void) = bye;\n")
    startup = root / STARTUP
    startup.write_text(startup.read_text().replace("    mh_cache_readers_at_load();\n", ""))
    trace = root / "trace" / "trace.c"
    trace.write_text(trace.read_text().replace(
        "    t.enabled = true;\n    return true;",
        "    t.enabled = true;\n    mh_trace_modules_at_load();\n    return true;"))
    assert startup_violations(root) == [
        "cache/cache_feed.c runs code at load or unload; add its step to cuda/startup_order.c, "
        "which holds the order",
        "queue/clock.c runs code at load or unload; add its step to cuda/startup_order.c, "
        "which holds the order",
        "mh_cache_readers_at_load (cache/region_map.c) is called 0 times by "
        "cuda/startup_order.c; a step of the load runs once, in its place there",
        "trace/trace.c calls mh_trace_modules_at_load; only cuda/startup_order.c runs the "
        "steps of the load",
    ]


def _array_functions(lib: Path, section: str) -> list[str]:
    """The functions `section` (.init_array or .fini_array) of `lib` runs,
    in order, named from .symtab."""
    with lib.open("rb") as f:
        elf = ELFFile(f)
        array = elf.get_section_by_name(section)
        if array is None:
            return []
        names: dict[int, str] = {}
        symtab = elf.get_section_by_name(".symtab")
        assert symtab is not None, f"{lib} has no .symtab to name {section}'s entries"
        for sym in symtab.iter_symbols():
            if sym["st_info"]["type"] == "STT_FUNC":
                names.setdefault(sym["st_value"], sym.name)
        lo, hi = array["sh_addr"], array["sh_addr"] + array["sh_size"]
        slots = {}
        for rel in elf.iter_sections():
            if isinstance(rel, RelocationSection) and rel.is_RELA():
                for r in rel.iter_relocations():
                    if lo <= r["r_offset"] < hi:
                        slots[r["r_offset"]] = names.get(r["r_addend"], hex(r["r_addend"]))
        assert len(slots) * 8 == array["sh_size"], (section, slots)
        return [slots[k] for k in sorted(slots)]


# The toolchain's own (crtbeginS.o): transactional-memory clone tables.
TOOLCHAIN = {"frame_dummy", "__do_global_dtors_aux"}


def test_the_built_core_runs_one_function_at_load_and_one_at_unload(native: NativeBuild) -> None:
    init = [n for n in _array_functions(native.core, ".init_array") if n not in TOOLCHAIN]
    fini = [n for n in _array_functions(native.core, ".fini_array") if n not in TOOLCHAIN]
    assert (init, fini) == (["memhook_load"], ["memhook_unload"]), (
        f"{native.core} runs {init} at load and {fini} at unload; everything the core does "
        f"then goes through csrc/{STARTUP}")
