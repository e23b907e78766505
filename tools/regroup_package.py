#!/usr/bin/env python3
"""Group memhook's private modules by idea, and the tests by the source
folder they test: a codemod, run from the repository root on a clean tree.

    python tools/regroup_package.py            # move, rewrite, check
    python tools/regroup_package.py --check    # say what is left; change nothing

What it does, each step idempotent (a second run changes nothing):

1. ``git mv`` every module of MODULES into its group's folder and writes
   each group's ``__init__.py`` (a docstring, no imports: a group is a
   folder, not an API).  The public modules (``memhook/__init__.py``,
   ``cache.py``, ``events.py``, ``hooks.py``, ``cli/``, ``tracing/``,
   ``report/``, ``sim/``) and the two build-time files (``_version.py``,
   which pyproject reads, and ``_ffi_build.py``, which setup.py and
   MANIFEST.in name) stay where they are.
2. ``git mv`` the test files of TEST_MOVES, and every fixture folder named
   ``c/`` to ``fixtures/`` (FIXTURE_FOLDERS).
3. Rewrites every reference in the tracked text files of SCAN_DIRS and
   SCAN_FILES: imports (``from ._x import``, ``from . import _x``,
   ``from memhook import _x``, relative imports of a moved module re-based),
   dotted names (``memhook._x`` in code, strings, mock paths, ``python -m``),
   paths (``memhook/_x.py``, a package-relative ``_x.py``, moved tests and
   fixture folders, ``/ "c"`` in a test folder's paths), then the
   EXACT_EDITS that no rule covers, pyproject's package list, the layering
   test's LAYERS names and docs/architecture.md's file map.
4. Fails (exit 1, naming file and line) on whatever it finds left that it
   does not understand: an old name in any form, a flat private module
   that MODULES does not place, an exact edit whose text is gone, an import
   it cannot rewrite without losing a comment.

After a run: rebuild (``pip install -e '.[test]' --no-deps``: the editable
install's package list comes from pyproject) and run the architecture tests.
"""

from __future__ import annotations

import argparse
import ast
import posixpath
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "memhook"


@dataclass(frozen=True)
class Group:
    folder: str   # the subpackage, relative to memhook/
    title: str    # architecture.md's heading after the folder
    about: str    # the group's idea, for its __init__ docstring and the doc


GROUPS: tuple[Group, ...] = (
    Group("_values", "the plain values every layer shares",
          "The values every layer shares and imports nothing of memhook for: "
          "MemoryType and Region, HookMode and its grammar, a program's names "
          "made printable."),
    Group("_binding", "the bridge to native code",
          "The bridge to native code: memhook's core (libmemhook.so and the cffi "
          "extension), its long control calls, its hook table, CUDA's driver "
          "asked directly, and the names of CUDA's error codes."),
    Group("_objects", "the process's loaded objects",
          "The process's loaded objects, read from outside the core: the one "
          "/proc/PID/maps reader, the driver's soname, ELF symbols and where a "
          "stripped object's debug information went."),
    Group("_events", "events out of the core",
          "Events out of the core: the event's layout, the drain and its "
          "background feeder, what events do to a MemtypeCache, and the steps "
          "an exception from a signal handler cannot split."),
    Group("_queries", "the queries a user makes",
          "The queries a user makes of the core's process cache: the argument "
          "forms, the process cache as a MemtypeCache, searches over a "
          "snapshot, and what was reserved before the hooks."),
)

# old module (relative to memhook.) -> new module (relative to memhook.)
MODULES: dict[str, str] = {
    "_types": "_values.types",
    "_modes": "_values.modes",
    "_printable": "_values.printable",
    "_core": "_binding.core",
    "_control": "_binding.control",
    "_hook_table": "_binding.hook_table",
    "_driver": "_binding.driver",
    "_cuda_errors": "_binding.cuda_errors",
    "_procmaps": "_objects.procmaps",
    "_sonames": "_objects.sonames",
    "_symbolize": "_objects.symbolize",
    "_debuginfo": "_objects.debuginfo",
    "_event_layout": "_events.layout",
    "_drain": "_events.drain",
    "_feeder": "_events.feeder",
    "_apply": "_events.apply",
    "_atomic": "_events.atomic",
    "_query": "_queries.query",
    "_inputs": "_queries.inputs",
    "_search": "_queries.search",
    "_process_cache": "_queries.process_cache",
    "_preexisting": "_queries.preexisting",
}

# Private modules that stay flat in memhook/, and why.
FLAT_PRIVATE = {
    "_version": "pyproject.toml reads the version from memhook._version",
    "_ffi_build": "setup.py's cffi_modules, its build_py and MANIFEST.in name it here; "
                  "it is not installed",
}

# Tests that move to the folder that mirrors the source they test (the
# fixtures they alone use move with them).
TEST_MOVES: dict[str, str] = {
    # csrc/queue/: the causal drain and the lanes' order
    "tests/hooks/test_causal_merge.py": "tests/queue/test_causal_merge.py",
    "tests/hooks/fixtures/causal_merge.c": "tests/queue/fixtures/causal_merge.c",
    "tests/hooks/test_event_order.py": "tests/queue/test_event_order.py",
    "tests/hooks/fixtures/handoff_order.c": "tests/queue/fixtures/handoff_order.c",
    "tests/hooks/fixtures/pending_wakeup.c": "tests/queue/fixtures/pending_wakeup.c",
    "tests/hooks/fixtures/drain_behind.c": "tests/queue/fixtures/drain_behind.c",
    # shared by the hooks' and the queue's fixtures now: with the shared ones
    "tests/hooks/fixtures/hooked_sim.h": "tests/fixtures/hooked_sim.h",
    # tests/core/'s C programs, into the folder every test folder calls fixtures/
    "tests/core/maps_walk.c": "tests/core/fixtures/maps_walk.c",
    "tests/core/resume_pc.c": "tests/core/fixtures/resume_pc.c",
}

# Files the codemod writes when missing (a moved test's folder helper).
NEW_FILES: dict[str, str] = {
    "tests/queue/queue_testing.py": '''"""What the event queue's tests (csrc/queue/) share: their C fixtures."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FIXTURES"]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
''',
}

# One name for a test folder's C fixtures: fixtures/.
FIXTURE_FOLDERS: dict[str, str] = {
    "tests/attrib/c": "tests/attrib/fixtures",
    "tests/cli/c": "tests/cli/fixtures",
    "tests/pyframes/c": "tests/pyframes/fixtures",
    "tests/sim/c": "tests/sim/fixtures",
}

# What no rule covers: (file, old text, new text).  Applied when the old
# text is there and the new is not; a run fails when neither is.
EXACT_EDITS: tuple[tuple[str, str, str], ...] = (
    # The core's binding finds libmemhook.so beside the package, one folder up.
    ("memhook/_binding/core.py",
     "    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), _CORE_SONAME)",
     "    here = os.path.join(_package_dir(), _CORE_SONAME)"),
    ("memhook/_binding/core.py",
     "    package = os.path.dirname(os.path.abspath(__file__))\n",
     "    package = _package_dir()\n"),
    ("memhook/_binding/core.py",
     "def _bind_core() -> ctypes.CDLL:",
     "def _package_dir() -> str:\n"
     "    \"\"\"The memhook/ folder: libmemhook.so, the extension and the build\n"
     "    script sit there, one level above this group.\"\"\"\n"
     "    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))\n\n\n"
     "def _bind_core() -> ctypes.CDLL:"),
    ("memhook/_binding/core.py",
     "    The build script ``_ffi_build.py`` sits beside this file only there",
     "    The build script ``_ffi_build.py`` sits in the package folder only there"),
    ("memhook/_binding/core.py",
     "    import loaded it), that copy is used; loading ours by path as well would\n"
     "    put a second copy of the hook state in the process.  Otherwise the file\n"
     "    beside this module is loaded",
     "    import loaded it), that copy is used; loading ours by path as well would\n"
     "    put a second copy of the hook state in the process.  Otherwise the file\n"
     "    in the package folder is loaded"),
    ("tests/core/test_procfs.py",
     '        native.compile([HERE / "maps_walk.c", CSRC / "core" / "procfs.c"], exe, '
     'extra=extra)\n',
     '        native.compile([HERE / "fixtures" / "maps_walk.c", CSRC / "core" / "procfs.c"], '
     'exe,\n                       extra=extra)\n'),
    ("tests/core/test_procfs.py", 'native.compile([HERE / "resume_pc.c", ',
     'native.compile([HERE / "fixtures" / "resume_pc.c", '),
    # The layers' drawing: the Python side's row keeps its columns.
    ("docs/architecture.md",
     "  memhook/hooks.py, _binding/control.py          memhook/_events/drain.py, "
     "_events/feeder.py\n",
     "  memhook/hooks.py, _binding/control.py  memhook/_events/drain.py, feeder.py\n"),
    # The queue's tests find their fixtures in their own folder.
    ("tests/queue/test_causal_merge.py", "from hooks_testing import FIXTURES",
     "from queue_testing import FIXTURES"),
    ("tests/queue/test_event_order.py", "from hooks_testing import FIXTURES",
     "from queue_testing import FIXTURES"),
    # The sanitized hook tests run the queue's handoff fixture on their build.
    ("tests/hooks/test_sanitized_hooks.py", 'str(FIXTURES / "handoff_order.c")',
     'str(QUEUE_FIXTURES / "handoff_order.c")'),
    ("tests/hooks/test_sanitized_hooks.py", "from hooks_testing import FIXTURES\n",
     "from hooks_testing import FIXTURES\n\n"
     "QUEUE_FIXTURES = FIXTURES.parents[1] / \"queue\" / \"fixtures\"\n"),
    ("tests/hooks/test_sanitized_hooks.py",
     "fixtures/handoff_order.c runs on the same build.",
     "tests/queue/fixtures/handoff_order.c runs on the same build."),
    # A module's file named alone: a path relative to memhook/ here.
    ("tests/test_layering.py", '                             "_procmaps.py"),',
     '                             "_objects/procmaps.py"),'),
    ("tests/test_layering.py", '    "parses a maps line": (_splits_a_maps_line, "_procmaps.py"),',
     '    "parses a maps line": (_splits_a_maps_line, "_objects/procmaps.py"),'),
    ("tests/test_layering.py",
     '        lambda tree: any("libcuda.so.1" in t for t in _py_strings(tree)), "_sonames.py"),',
     '        lambda tree: any("libcuda.so.1" in t for t in _py_strings(tree)),\n'
     '        "_objects/sonames.py"),'),
    # ... and a basename there, compared with the path relative to memhook/ now.
    ("tests/hooks/test_hook_table.py",
     '                     and p.name not in ("_ffi_build.py", "_control.py"))\n'
     '    assert readers == ["_hook_table.py"], readers',
     '                     and str(p.relative_to(PACKAGE)) not in ("_ffi_build.py",\n'
     '                                                             "_binding/control.py"))\n'
     '    assert readers == ["_binding/hook_table.py"], readers'),
    # The layering test plants imports into sonames.py, now a folder down
    # (the one into _late() is with the rewrapped lines below).
    ("tests/test_import_layers.py",
     '    _plant(copy / "_sonames.py", "from typing import TYPE_CHECKING\\nif TYPE_CHECKING:\\n"\n'
     '                                 "    from .hooks import HookReport\\n")',
     '    _plant(copy / "_objects" / "sonames.py",\n'
     '           "from typing import TYPE_CHECKING\\nif TYPE_CHECKING:\\n"\n'
     '           "    from ..hooks import HookReport\\n")'),
    # Lines the longer names took past 100 characters, rewrapped.
    ("tests/hooks/scripts/fork_churn.py",
     "        lib.memhook_hooks_install(_MODE_BITS[modes[i % len(modes)]], "
     "memhook._binding.core.ffi.NULL, 0)\n",
     "        lib.memhook_hooks_install(_MODE_BITS[modes[i % len(modes)]],\n"
     "                                  memhook._binding.core.ffi.NULL, 0)\n"),
    ("tests/pyframes/test_layouts.py",
     """    build = subprocess.run(["cc", f"-I{inc}", f"-I{inc / 'internal'}", """
     """str(HERE / "fixtures" / "layout_probe.c"),\n""",
     """    build = subprocess.run(["cc", f"-I{inc}", f"-I{inc / 'internal'}",\n"""
     """                            str(HERE / "fixtures" / "layout_probe.c"),\n"""),
    ("tests/pyframes/test_records.py",
     """    subprocess.run(["cc", "-std=c11", f"-I{CSRC / 'trace'}", """
     """str(HERE / "fixtures" / "proto_probe.c"),\n""",
     """    subprocess.run(["cc", "-std=c11", f"-I{CSRC / 'trace'}",\n"""
     """                    str(HERE / "fixtures" / "proto_probe.c"),\n"""),
    ("tests/test_doctests.py",
     'MODULES = ("memhook/__init__.py", "memhook/_binding/core.py", "memhook/_events/drain.py", '
     '"memhook/cache.py",\n           "memhook/events.py", "memhook/hooks.py")',
     'MODULES = ("memhook/__init__.py", "memhook/_binding/core.py", "memhook/_events/drain.py",\n'
     '           "memhook/cache.py", "memhook/events.py", "memhook/hooks.py")'),
    ("tests/test_import_layers.py",
     '    _plant(copy / "_sonames.py", "def _late():\\n    from . import hooks\\n'
     '    return hooks\\n")',
     '    _plant(copy / "_objects" / "sonames.py",\n'
     '           "def _late():\\n    from .. import hooks\\n    return hooks\\n")'),
    ("tests/test_import_layers.py",
     '    assert any("memhook._objects.sonames" in c and "memhook.hooks" in c for c in '
     'import_cycles(copy))',
     '    assert any("memhook._objects.sonames" in c and "memhook.hooks" in c\n'
     '               for c in import_cycles(copy))'),
    ("tests/test_import_layers.py",
     '    assert len(problems) == 1 and "memhook.cache imports memhook._queries.query" in '
     'problems[0], problems',
     '    assert len(problems) == 1, problems\n'
     '    assert "memhook.cache imports memhook._queries.query" in problems[0], problems'),
    ("tests/test_layering.py",
     '        "memhook/cli/second.py reads /proc/PID/maps; only memhook/_objects/procmaps.py may '
     '(use it)",\n'
     '        "memhook/cli/second.py parses a maps line; only memhook/_objects/procmaps.py may '
     '(use it)",\n'
     '        "memhook/cli/second.py spells the driver\'s soname; only memhook/_objects/sonames.py '
     'may (use it)",\n',
     '        "memhook/cli/second.py reads /proc/PID/maps; "\n'
     '        "only memhook/_objects/procmaps.py may (use it)",\n'
     '        "memhook/cli/second.py parses a maps line; "\n'
     '        "only memhook/_objects/procmaps.py may (use it)",\n'
     '        "memhook/cli/second.py spells the driver\'s soname; "\n'
     '        "only memhook/_objects/sonames.py may (use it)",\n'),
    ("tests/test_import_layers.py",
     '    "from memhook import _drain",         # absolute, a module by name\n',
     '    "from memhook._events import drain",  # absolute, a module by name\n'),
    # The layering test plants an import of the query module into cache.py.
    ("tests/test_import_layers.py",
     '"def _helper():\\n    from . import _query\\n    return _query\\n"',
     '"def _helper():\\n    from ._queries import query\\n    return query\\n"'),
)

SCAN_DIRS = ("memhook", "tests", "bench", "tools", "examples", "docs", "csrc")
SCAN_FILES = ("README.md", "setup.py", "pyproject.toml", "MANIFEST.in")
TEXT_SUFFIXES = {".py", ".md", ".c", ".h", ".S", ".def", ".sh", ".toml", ".in", ".txt",
                 ".cfg", ".ini", ".json", ".pyi", ".js", ""}
SELF = "tools/regroup_package.py"
LINE_LIMIT = 100

ARCH = "docs/architecture.md"
ARCH_TABLE_HEADING = "### memhook/: the Python package"
BEGIN = "<!-- regroup_package.py: the private groups, begin -->"
END = "<!-- regroup_package.py: the private groups, end -->"
LAYERS_FILE = "tests/test_import_layers.py"


class Failure(Exception):
    """Something the codemod cannot rewrite: a person must look."""


def full(rel: str) -> str:
    return f"{PACKAGE}.{rel}" if rel else PACKAGE


OLD_FULL = {full(o): full(n) for o, n in MODULES.items()}


def module_path(rel_module: str) -> str:
    return f"{PACKAGE}/{rel_module.replace('.', '/')}.py"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


# ----------------------------------------------------------------- moves

def check_flat_modules() -> None:
    """Every flat private module is placed by MODULES or kept by FLAT_PRIVATE."""
    unknown = sorted(p.stem for p in (ROOT / PACKAGE).glob("_*.py")
                     if p.stem not in MODULES and p.stem not in FLAT_PRIVATE
                     and p.name != "__init__.py" and p.name != "__main__.py")
    if unknown:
        raise Failure("flat private modules that MODULES does not place (add each to a "
                      f"group, or to FLAT_PRIVATE with the reason): {unknown}")
    groups = {g.folder for g in GROUPS}
    bad = sorted(n for n in MODULES.values() if n.split(".")[0] not in groups)
    if bad:
        raise Failure(f"MODULES names folders that GROUPS does not: {bad}")


def move(old: str, new: str, moved: dict[str, str]) -> None:
    src, dst = ROOT / old, ROOT / new
    if src.exists() and dst.exists():
        raise Failure(f"both {old} and {new} exist: merge them by hand")
    if src.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        git("mv", old, new)
        moved[new] = old
    elif not dst.exists():
        raise Failure(f"neither {old} nor {new} exists: update the mapping")


def do_moves() -> dict[str, str]:
    """Move everything; returns new path -> old path for what moved now."""
    moved: dict[str, str] = {}
    for old, new in MODULES.items():
        move(module_path(old), module_path(new), moved)
    for group in GROUPS:
        init = ROOT / PACKAGE / group.folder / "__init__.py"
        text = group_init(group)
        if not init.exists() or init.read_text() != text:
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(text)
            git("add", str(init.relative_to(ROOT)))
    for old, new in TEST_MOVES.items():
        move(old, new, moved)
    for old_dir, new_dir in FIXTURE_FOLDERS.items():
        if (ROOT / old_dir).is_dir():
            for path in sorted(p for p in (ROOT / old_dir).rglob("*") if p.is_file()):
                rel = path.relative_to(ROOT / old_dir).as_posix()
                if "__pycache__" not in rel:
                    move(f"{old_dir}/{rel}", f"{new_dir}/{rel}", moved)
    for rel, text in NEW_FILES.items():
        path = ROOT / rel
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            git("add", rel)
    return moved


def group_init(group: Group) -> str:
    members = [n.split(".", 1)[1] for n in MODULES.values() if n.split(".")[0] == group.folder]
    lines = [f'"""{group.about}', "", "Modules: " + ", ".join(f"``{m}``" for m in members) + "."]
    body = "\n".join(wrap_words(lines)) + '\n"""\n'
    return body


def wrap_words(lines: list[str], width: int = 76) -> list[str]:
    out: list[str] = []
    for line in lines:
        cur = ""
        for word in line.split():
            if cur and len(cur) + 1 + len(word) > width:
                out.append(cur)
                cur = word
            else:
                cur = f"{cur} {word}" if cur else word
        out.append(cur)
    return out


# ---------------------------------------------------------- the rewrites

def scanned_files() -> list[str]:
    tracked = git("ls-files", "-z", *SCAN_DIRS, *SCAN_FILES).split("\0")
    out = []
    for rel in tracked:
        path = ROOT / rel
        if not rel or rel == SELF or not path.is_file():
            continue
        if path.suffix not in TEXT_SUFFIXES:
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        out.append(rel)
    return sorted(out)


def module_of(rel: str) -> tuple[str, bool] | None:
    """(dotted module, is a package's __init__) of a file under memhook/."""
    if not rel.startswith(PACKAGE + "/") or not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def package_of(module: str, is_package: bool) -> list[str]:
    parts = module.split(".")
    return parts if is_package else parts[:-1]


def renamed(module: str) -> str:
    """A dotted module's new name (unchanged if not under a moved one)."""
    for old, new in OLD_FULL.items():
        if module == old or module.startswith(old + "."):
            return new + module[len(old):]
    return module


def relative(target: str, package: list[str]) -> str:
    """``target`` spelled relative to a module whose package is ``package``."""
    parts = target.split(".")
    common = 0
    while common < min(len(parts), len(package)) and parts[common] == package[common]:
        common += 1
    level = len(package) - common + 1
    return "." * level + ".".join(parts[common:])


_FROM = re.compile(r"from(\s+)(\.*[\w.]*)(\s+)import\b")


def rewrite_imports(rel: str, text: str, old_rel: str) -> str:
    """Rewrite the import statements of one .py file, now at ``rel``,
    before this run at ``old_rel``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text  # not Python (a script template): the text rules apply
    here_new = module_of(rel)
    here_old = module_of(old_rel)
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if here_old is None or here_new is None:
                raise Failure(f"{rel}:{node.lineno}: a relative import outside {PACKAGE}/")
            base = package_of(*here_old)[:len(package_of(*here_old)) - (node.level - 1)]
            mod = ".".join(base + ([node.module] if node.module else []))
            new_pkg = package_of(*here_new)
            moved_file = here_old[0] != here_new[0]
        elif node.module == PACKAGE or (node.module or "").startswith(PACKAGE + "."):
            mod = node.module or ""
            new_pkg = []
            moved_file = False
        else:
            continue
        as_modules = [a for a in node.names if f"{mod}.{a.name}" in OLD_FULL]
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset  # type: ignore[operator]
        stmt = text[start:end]

        def spell(target: str) -> str:
            return relative(target, new_pkg) if node.level else target

        if not as_modules:
            new_mod = renamed(mod)
            if new_mod == mod and not moved_file:
                continue
            m = _FROM.match(stmt)
            if not m:
                raise Failure(f"{rel}:{node.lineno}: cannot read this import: {stmt!r}")
            new_stmt = stmt[:m.start(2)] + spell(new_mod) + stmt[m.end(2):]
            if new_stmt != stmt:
                edits.append((start, end, new_stmt))
            continue
        # ``from P import _x, y``: each moved module gets its own statement.
        if "#" in stmt:
            raise Failure(f"{rel}:{node.lineno}: an import with a comment inside; split it by "
                          f"hand: {stmt!r}")
        line_start = offsets[node.lineno - 1]
        if text[line_start:start].strip():
            raise Failure(f"{rel}:{node.lineno}: an import after other code on its line")
        indent = text[line_start:start]
        out = []
        rest = [a for a in node.names if a not in as_modules]
        if rest:
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in rest)
            out.append(f"from {spell(renamed(mod))} import {names}")
        for a in as_modules:
            target = OLD_FULL[f"{mod}.{a.name}"]
            parent, leaf = target.rsplit(".", 1)
            local = a.asname or a.name
            out.append(f"from {spell(parent)} import {leaf}"
                       + (f" as {local}" if local != leaf else ""))
        edits.append((start, end, ("\n" + indent).join(out)))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def text_rules() -> list[tuple[re.Pattern[str], str]]:
    rules: list[tuple[re.Pattern[str], str]] = []
    for old, new in MODULES.items():
        o = re.escape(old)
        rules.append((re.compile(rf"\b{PACKAGE}\.{o}(?![\w])"), f"{PACKAGE}.{new}"))
        rules.append((re.compile(rf"\b{PACKAGE}/{o}\.py\b"), module_path(new)))
        # A path relative to memhook/, in prose.  Not a string that is the
        # name alone: that may be a path or a file's basename (EXACT_EDITS).
        rules.append((re.compile(rf"(?<![\w/.\"'-]){o}\.py\b(?![\"'])"),
                      new.replace(".", "/") + ".py"))
    for old, new in TEST_MOVES.items():
        rules.append((re.compile(rf"(?<![\w/.-]){re.escape(old)}(?![\w])"), new))
    for old, new in FIXTURE_FOLDERS.items():
        rules.append((re.compile(rf"(?<![\w/.-]){re.escape(old)}/"), new + "/"))
    return rules


# ``HERE / "c"``, ``Path(__file__).parent / "c" / "x.c"``: a test folder's
# fixture folder, in the folders whose c/ is renamed.
_SLASH_C = re.compile(r'(/\s*)"c"(?=\s*[/)\],\n])')


# ``from memhook import a, _x`` on a line of its own, in a script held in a
# string or a doc (the statements themselves are rewritten from the syntax
# tree): each moved module gets a line of its own.
_FROM_PACKAGE_LINE = re.compile(
    rf"^([ \t]*)from {PACKAGE} import ([\w ,]+?)[ \t]*$", re.M)


def split_package_imports(m: re.Match[str]) -> str:
    indent, names = m.group(1), [n.strip() for n in m.group(2).split(",")]
    if not any(n.split(" as ")[0] in MODULES for n in names):
        return m.group(0)
    rest = [n for n in names if n.split(" as ")[0] not in MODULES]
    lines = [f"from {PACKAGE} import {', '.join(rest)}"] if rest else []
    for n in names:
        name, _, alias = n.partition(" as ")
        if name in MODULES:
            parent, leaf = MODULES[name].rsplit(".", 1)
            local = alias.strip() or name
            lines.append(f"from {PACKAGE}.{parent} import {leaf}"
                         + (f" as {local}" if local != leaf else ""))
    return "\n".join(indent + line for line in lines)


def rewrite_text(rel: str, text: str) -> str:
    text = _FROM_PACKAGE_LINE.sub(split_package_imports, text)
    for pattern, new in text_rules():
        text = pattern.sub(new, text)
    folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
    if rel.endswith(".py") and any(folder == d.rsplit("/", 1)[0] for d in FIXTURE_FOLDERS):
        text = _SLASH_C.sub(r'\1"fixtures"', text)
    return text


_INCLUDE = re.compile(r'^(\s*#\s*include\s+")([^"]+)(")', re.M)
C_SUFFIXES = (".c", ".h", ".S")


def rebase_includes(rel: str, text: str, old_rel: str, new_of_old: dict[str, str]) -> str:
    """A C file's ``#include "x"`` that named a file beside it (or a path
    from its folder) names the same file after either of them moved."""
    old_dir, new_dir = posixpath.dirname(old_rel), posixpath.dirname(rel)

    def rebase(m: re.Match[str]) -> str:
        was = posixpath.normpath(posixpath.join(old_dir, m.group(2)))
        now = new_of_old.get(was, was)
        if not (ROOT / now).is_file():
            return m.group(0)  # found through -I, not beside the file
        if posixpath.normpath(posixpath.join(new_dir, m.group(2))) == now:
            return m.group(0)
        return m.group(1) + posixpath.relpath(now, new_dir) + m.group(3)

    return _INCLUDE.sub(rebase, text)


def apply_exact_edits(contents: dict[str, str]) -> None:
    for rel, old, new in EXACT_EDITS:
        if rel not in contents:
            raise Failure(f"EXACT_EDITS names {rel}, which is not in the tree")
        text = contents[rel]
        if new in text:
            continue  # applied by an earlier run
        if old in text:
            contents[rel] = text.replace(old, new, 1)
        else:
            raise Failure(f"{rel}: neither the text to replace nor its replacement is there "
                          f"(the file changed; redo this edit by hand): {old[:70]!r}")


def update_pyproject(text: str) -> str:
    m = re.search(r"^packages = \[(.*?)\]", text, re.M | re.S)
    if not m:
        raise Failure("pyproject.toml: no [tool.setuptools] packages list")
    have = re.findall(r'"([\w.]+)"', m.group(1))
    want = have + [full(g.folder) for g in GROUPS if full(g.folder) not in have]
    if want == have:
        return text
    items = ", ".join(f'"{p}"' for p in want)
    lines = wrap_words([items], 88)
    body = "packages = [" + "\n            ".join(lines) + "]"
    return text[:m.start()] + body + text[m.end():]


def update_layers(text: str) -> str:
    """test_import_layers.py ranks modules by name relative to memhook.:
    rename them, and rank the groups' folders (each imports nothing) with
    the leaves."""
    for old, new in MODULES.items():
        text = re.sub(rf'"{re.escape(old)}"', f'"{new}"', text)
    anchor = '("_version", '
    if text.count(anchor) != 1:
        raise Failure(f"{LAYERS_FILE}: no one leaves layer starting with _version to rank "
                      "the groups' folders in")
    start = text.index(anchor)
    end = text.index(")),", start)
    items = re.findall(r'"([\w.]+)"', text[start:end])
    items[1:1] = [g.folder for g in GROUPS if g.folder not in items]
    # Rewrapped: the new names are longer.
    body = wrap_words([", ".join(f'"{i}"' for i in items)], 90)
    return text[:start] + "(" + "\n      ".join(body) + text[end:]


_ROW = re.compile(r"^\| `(memhook/[\w/]+\.py)` \| (.*) \|$")


def update_architecture(text: str) -> str:
    """Move the groups' rows out of the package's table into one table per
    group, between the markers (regenerated whole on every run)."""
    new_paths = {module_path(n): n for n in MODULES.values()}
    rows: dict[str, str] = {}
    kept: list[str] = []
    inside = False
    for line in text.splitlines():
        if line == BEGIN:
            inside = True
        if not inside:
            m = _ROW.match(line)
            if m and m.group(1) in new_paths:
                rows[m.group(1)] = m.group(2)
                continue
            kept.append(line)
        else:
            m = _ROW.match(line)
            if m and m.group(1) in new_paths:
                rows[m.group(1)] = m.group(2)
        if line == END:
            inside = False
    missing = sorted(set(new_paths) - set(rows))
    if missing:
        raise Failure(f"{ARCH}: no row for {missing}: add a line on what each holds")
    block = [BEGIN]
    for group in GROUPS:
        block += ["", f"### memhook/{group.folder}/: {group.title}", "",
                  *wrap_words([group.about], 76), "", "| file | what it holds |",
                  "| --- | --- |",
                  f"| `memhook/{group.folder}/__init__.py` | the group's package: its docstring, "
                  f"no imports |"]
        for path, new in new_paths.items():
            if new.split(".")[0] == group.folder:
                block.append(f"| `{path}` | {rows[path]} |")
    block += ["", END]
    try:
        at = kept.index(ARCH_TABLE_HEADING)
    except ValueError:
        raise Failure(f"{ARCH}: no heading {ARCH_TABLE_HEADING!r}") from None
    end = at + 1
    while end < len(kept) and not kept[end].startswith("| "):
        end += 1
    while end < len(kept) and kept[end].startswith("| "):
        end += 1
    out = kept[:end] + [""] + block + kept[end:]
    # One blank line around the block, however often it is regenerated.
    result = "\n".join(out) + ("\n" if text.endswith("\n") else "")
    return re.sub(r"\n{3,}", "\n\n", result)


# ------------------------------------------------------------ what is left

def residue(contents: dict[str, str]) -> list[str]:
    """Every old name left, in a form no rule rewrote: for a person."""
    problems: list[str] = []
    forms = []
    for old in MODULES:
        o = re.escape(old)
        forms.append(re.compile(rf"\b{PACKAGE}[./]{o}(?![\w])"))
        forms.append(re.compile(rf"(?<![\w]){o}\.py\b"))
        forms.append(re.compile(rf"\bimport\b[^#\n]*(?<![\w.])(?<!as ){o}\b|from\s+\.+{o}\b"))
    for old in TEST_MOVES:
        forms.append(re.compile(rf"(?<![\w/.-]){re.escape(old)}(?![\w])"))
    for old in FIXTURE_FOLDERS:
        forms.append(re.compile(rf"(?<![\w/.-]){re.escape(old)}/"))
    for rel, text in sorted(contents.items()):
        for n, line in enumerate(text.splitlines(), 1):
            for form in forms:
                if form.search(line):
                    problems.append(f"{rel}:{n}: {line.strip()[:100]}")
                    break
        if rel.endswith(".py"):
            problems += py_residue(rel, text)
    # A moved test names its fixtures by file name: each must be where the
    # test now looks, in its folder's fixtures/ or the shared tests/fixtures/.
    for rel in TEST_MOVES.values():
        if not rel.endswith(".py") or rel not in contents:
            continue
        folder = posixpath.dirname(rel)
        for node in ast.walk(ast.parse(contents[rel])):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"[\w-]+\.(?:c|h|S)", node.value) \
                    and not (ROOT / folder / "fixtures" / node.value).is_file() \
                    and not (ROOT / "tests" / "fixtures" / node.value).is_file():
                problems.append(f"{rel}:{node.lineno}: the fixture {node.value!r} is not in "
                                f"{folder}/fixtures/: move it with the test")
    return problems


def py_residue(rel: str, text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    old = set(MODULES)
    out = []
    folder = rel.rsplit("/", 1)[0]
    renamed_c = any(folder == d.rsplit("/", 1)[0] for d in FIXTURE_FOLDERS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in old:
            base = ast.unparse(node.value)
            if base not in ("self", "cls"):
                out.append(f"{rel}:{node.lineno}: attribute {base}.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in old:
            out.append(f"{rel}:{node.lineno}: the string {node.value!r}")
        elif renamed_c and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) \
                and isinstance(node.right, ast.Constant) and node.right.value == "c":
            out.append(f"{rel}:{node.lineno}: a path through a c/ folder")
    return out


# ------------------------------------------------------------------ main

def run(check_only: bool) -> int:
    check_flat_modules()
    moved = {} if check_only else do_moves()
    files = scanned_files()
    contents = {rel: (ROOT / rel).read_text(encoding="utf-8") for rel in files}
    new = dict(contents)
    new_of_old = {old: new_path for new_path, old in moved.items()}
    if not check_only:
        for rel in files:
            text = new[rel]
            if rel.endswith(".py"):
                text = rewrite_imports(rel, text, moved.get(rel, rel))
            elif rel.endswith(C_SUFFIXES) and rel.startswith("tests/"):
                text = rebase_includes(rel, text, moved.get(rel, rel), new_of_old)
            new[rel] = rewrite_text(rel, text)
        apply_exact_edits(new)
        new["pyproject.toml"] = update_pyproject(new["pyproject.toml"])
        new[LAYERS_FILE] = update_layers(new[LAYERS_FILE])
        new[ARCH] = update_architecture(new[ARCH])
        for rel in files:
            if new[rel] != contents[rel]:
                (ROOT / rel).write_text(new[rel], encoding="utf-8")
        changed = sorted(rel for rel in files if new[rel] != contents[rel])
        print(f"moved {len(moved)} files, rewrote {len(changed)}")
        for rel in changed:
            print(f"  rewrote {rel}")
        long = [f"{rel}:{n}" for rel in changed if rel.endswith(".py")
                for n, line in enumerate(new[rel].splitlines(), 1)
                if len(line) > LINE_LIMIT and line not in contents[rel].splitlines()]
        if long:
            print(f"lines the longer names took past {LINE_LIMIT} characters (rewrap them):")
            for where in long:
                print(f"  {where}")
    problems = residue(new)
    if problems:
        print("left for a person (no rule rewrote these):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; report what is left to rewrite")
    args = parser.parse_args(argv)
    try:
        return run(args.check)
    except Failure as exc:
        print(f"regroup_package: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
