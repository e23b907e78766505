"""The C core's layering: no file includes a header from a layer above its
own (issue 16).  The layers, bottom up, as docs/architecture.md draws them:

    include/   the public API (memhook/memhook.h, memhook/cuda_abi.h)
    core/      helpers every layer may use: logging, options, clock, the
               /proc/self/maps reader, visibility, sonames, the lock order
    queue/     the event queue: lanes, drain, clock        } peers: none
    bistro/    patching function entries                   } includes
    reloc/     rewriting GOT slots                         } another
    trace/     the trace streamer: includes the queue; its lane header
               (trace_lane.h) is how the hooks hand it each event
    cuda/      the CUDA hook layer: uses all of the above

Calls upward go through the public API (memhook.h: the trace installs hooks
with memhook_hooks_install) or a registered callback (the queue's sink),
never through an upper layer's internal header.  csrc/sim/ is a separate
product (the simulated driver and runtime) and is not part of this order.

Headers are included by bare name (csrc/build_native.py puts every layer's
folder on the include path), so a header name must also be unique across
the layers, or one would silently shadow another.

The core keeps one of each helper (the environment, the monotonic clock, the
driver's soname, the /proc/self/maps reader, MH_HIDDEN); ONE_OF_EACH holds
each to its one file.
"""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from pathlib import Path

from memhook_testing import CSRC

# Rank of each folder of the core; a file may include headers of its own
# folder and of folders of strictly lower rank only.
LAYERS: dict[str, int] = {
    "include": 0,
    "core": 1,
    "queue": 2,
    "bistro": 2,
    "reloc": 2,
    "trace": 3,
    "cuda": 4,
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
