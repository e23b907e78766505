"""The Python modules import in layers, the way tests/test_layering.py holds
the C sources to theirs: every module of memhook/ (its subpackages too) has
a rank in LAYERS below, and a module imports only modules of a lower rank -
at its top or inside a function, ``import memhook.x``, ``from . import x``,
``from ..x import y`` alike.  So no import cycle can form, not even one that
only shows when a function first runs.

The graph is read from the source (every import statement, at any depth,
``if TYPE_CHECKING:`` blocks excepted: they never run).  Python runs a
package's ``__init__`` before any module in it; that implicit step is not an
edge (``memhook/__init__.py`` is the API at the top, which imports nearly
everything): the table ranks what each module's own statements name.

The fresh-interpreter checks stay: an import cycle that the static view
misses (a name looked up through ``importlib``) still shows in the order
modules are first imported, which the suite's own process has long since
fixed."""

from __future__ import annotations

import ast
import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memhook"

# Bottom up; names are relative to ``memhook.`` ("" is the package itself,
# a subpackage's name is its __init__).  A module's rank is its layer's
# index: it may import only modules of earlier layers.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("leaves: values, layouts, names and parsers that import nothing of memhook",
     ("_version", "_values", "_binding", "_objects", "_events", "_queries", "_values.types",
      "_values.modes", "_queries.inputs", "_events.layout", "_objects.procmaps",
      "_objects.sonames", "_binding.cuda_errors", "_values.printable", "_events.atomic",
      "_objects.debuginfo")),
    ("the native core's binding, and symbolizing addresses from maps",
     ("_binding.core", "_objects.symbolize")),
    # The trace's machinery (memhook trace's collector side) needs nothing of
    # the library but the leaves above; ranking it here holds it to that.
    ("trace: the wire, the peer, Python frames",
     ("tracing", "tracing.peers", "tracing.pyframes", "tracing.protocol", "tracing.sockdir",
      "tracing.runinfo", "tracing.progress", "tracing.bindings")),
    ("trace: a process's trace area and its loaded objects; a jsonl trace read back; "
     "the OOM report",
     ("tracing.area", "tracing.escape", "tracing.modules", "tracing.tracefile", "tracing.oom",
      "tracing.sites")),
    ("trace: the ledger (the summary's figures)",
     ("tracing.ledger",)),
    ("trace: the reorder window, the writers' interface",
     ("tracing.reorder", "tracing.writers.base", "tracing.writers.pickle_stream")),
    ("trace: one writer per format",
     ("tracing.writers.text", "tracing.writers.jsonl", "tracing.writers.chrome",
      "tracing.writers.memviz")),
    ("trace: the formats' registry",
     ("tracing.writers",)),
    ("trace: the collector",
     ("tracing.collector",)),
    ("traces read back: diff's figures",
     ("tracing.diff",)),
    ("traces read back: merge's alignment and summary",
     ("tracing.merge",)),
    ("traces read back: merge's outputs",
     ("tracing.merge_writers",)),
    ("traces read back: memhook report's figures and its page",
     ("report", "report.model", "report.page")),
    ("traces read back: which ranks each of memhook report's inputs holds",
     ("report.inputs",)),
    # The library proper.
    ("the core's control calls, the driver's answers, the simulator",
     ("_binding.control", "_binding.driver", "sim", "_queries.search")),
    ("the hook table, the memory-type cache, events and subscriptions",
     ("_binding.hook_table", "cache", "events")),
    ("applying events to a MemtypeCache; what was allocated before the hooks; the core's "
     "process cache as a MemtypeCache",
     ("_events.apply", "_queries.preexisting", "_queries.process_cache")),
    ("the queries a user makes of the process cache",
     ("_queries.query",)),
    ("the drain",
     ("_events.drain",)),
    ("the background feeder (drives the drain)",
     ("_events.feeder",)),
    ("install / uninstall / status",
     ("hooks",)),
    ("the API (memhook/__init__.py)",
     ("",)),
    # The command line: front ends over the API and the trace's machinery.
    ("the subcommands' package, the demo's workload (a script run under trace), the "
     "launcher trace and run share",
     ("cli", "cli.demo_workload", "cli.launch")),
    ("memhook trace, memhook info, memhook diff, memhook config",
     ("cli.trace", "cli.info", "cli.diff", "cli.config")),
    ("memhook demo (runs trace), memhook merge (shares diff's checks), memhook run "
     "(trace's mode check)",
     ("cli.demo", "cli.merge", "cli.run")),
    ("memhook report (merge's inputs, diff's checks)",
     ("cli.report",)),
    ("python -m memhook / the console script",
     ("__main__",)),
]

# Not modules of the library: the build script runs at build time only.
UNRANKED = {"memhook._ffi_build"}

# Edges that go up the layers today and are known: (importer, imported).
# Each entry says why and what ends it; none is left today.
ALLOWED_PENDING: dict[tuple[str, str], str] = {}

# Lazy re-exports: a module that keeps public names whose code moved above
# it, looking them up in a module-level __getattr__ at first access (never
# at import, so the import order holds).  An edge listed here may appear
# only inside that __getattr__ or under TYPE_CHECKING
# (test_facade_edges_are_lazy_reexports_only holds it there).
FACADES: dict[tuple[str, str], str] = {
    ("memhook.cache", "memhook._queries.query"):
        "memhook.cache's public process-wide names (process_cache, set_hook_layer, "
        "memory_type, lookup, memory_types: its __all__) moved to memhook._queries.query with "
        "the query path (issue 27 item 5), which sits above the cache it queries",
}
_SKIPPED_EDGES = set(ALLOWED_PENDING) | set(FACADES)


def _full(name: str) -> str:
    return f"memhook.{name}" if name else "memhook"


RANK: dict[str, int] = {_full(n): i for i, (_, names) in enumerate(LAYERS) for n in names}


def module_files(package: Path) -> dict[str, Path]:
    """Every module under ``package`` (a ``memhook/`` folder), by dotted name."""
    out: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The memhook modules ``path`` (module ``name``) imports, at any depth."""
    source = path.read_text()
    try:
        return set(_imports_of(source, name, path.name == "__init__.py", frozenset(known)))
    except SyntaxError:
        ast.parse(source, str(path))  # (raised again, naming the file)
        raise


@functools.lru_cache(maxsize=None)
def _imports_of(source: str, name: str, is_package: bool, known: frozenset[str]) -> frozenset[str]:
    """_imports of a module's source: the same source, name and modules give
    the same edges, so a copy of the package with one file planted parses
    only that file again."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()

    def add(mod: str, attr: str | None) -> None:
        # ``from X import Y``: Y is a module where X.Y is one, else a name in
        # X.  A module with no source here is the compiled extension
        # (``_native``, what _core loads): below every layer, not ranked.
        if attr is not None and f"{mod}.{attr}" in known:
            found.add(f"{mod}.{attr}")
        elif mod in known:
            found.add(mod)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "memhook" or mod.startswith("memhook."):
                for alias in node.names:
                    add(mod, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "memhook" or alias.name.startswith("memhook."):
                    add(alias.name, None)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source, name))
    found.discard(name)
    return frozenset(found)


def import_graph(package: Path) -> dict[str, set[str]]:
    files = module_files(package)
    known = set(files)
    return {name: _imports(path, name, known) for name, path in files.items()
            if name not in UNRANKED}


def unranked_modules(package: Path) -> list[str]:
    """What has no rank, each with what to do about it."""
    graph = import_graph(package)
    problems = []
    for name in sorted(set(graph) - set(RANK)):
        below = sorted(graph[name] & set(RANK), key=RANK.__getitem__)
        floor = (f"a layer above {below[-1]!r} (layer {RANK[below[-1]]}), the highest it "
                 f"imports" if below else "the layer that fits it (it imports nothing of memhook)")
        problems.append(f"{name} ({graph_path(package, name)}) has no rank: add it to LAYERS in "
                        f"tests/test_import_layers.py, in {floor}")
    for name in sorted(set(RANK) - set(graph)):
        problems.append(f"{name} is ranked in LAYERS but no such module exists: remove it")
    return problems


def graph_path(package: Path, name: str) -> str:
    return str(module_files(package)[name].relative_to(package.parent))


def upward_imports(package: Path) -> list[str]:
    """Every import of a module ranked at or above the importer's layer."""
    graph = import_graph(package)
    problems = []
    for name, imported in sorted(graph.items()):
        if name not in RANK:
            continue
        for other in sorted(imported):
            if other not in RANK or (name, other) in _SKIPPED_EDGES:
                continue
            if RANK[other] >= RANK[name]:
                problems.append(
                    f"{name} (layer {RANK[name]}: {LAYERS[RANK[name]][0]}) imports {other} "
                    f"(layer {RANK[other]}: {LAYERS[RANK[other]][0]}): a module imports only "
                    f"lower layers; move what both need down, or pass it in")
    return problems


def import_cycles(package: Path) -> list[list[str]]:
    """The graph's cycles (one per strongly connected component of more
    than one module), ALLOWED_PENDING and FACADES edges left out."""
    graph = {name: {o for o in imported if (name, o) not in _SKIPPED_EDGES}
             for name, imported in import_graph(package).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


# ------------------------------------------------------------ the package

def test_every_module_has_a_rank() -> None:
    problems = unranked_modules(PACKAGE)
    assert not problems, "\n".join(problems)


def test_imports_go_down_the_layers() -> None:
    problems = upward_imports(PACKAGE)
    assert not problems, "\n".join(problems)


def test_no_import_cycle() -> None:
    cycles = import_cycles(PACKAGE)
    assert not cycles, "import cycles (a function-level import counts):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_allowed_pending_edges_still_exist() -> None:
    """An entry whose edge is gone is stale: remove it, so the exception
    does not outlive its reason."""
    graph = import_graph(PACKAGE)
    stale = [f"{a} -> {b}" for a, b in ALLOWED_PENDING if b not in graph.get(a, set())]
    assert not stale, f"ALLOWED_PENDING names edges that no longer exist (remove them): {stale}"


# ----------------------------------------------- the check, on planted faults

@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    dest = tmp_path / "memhook"
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns(
        "*.so", "*.so.*", "*.a", "__pycache__", "lib"))
    assert not (upward_imports(dest) or import_cycles(dest) or unranked_modules(dest))
    return dest


def _plant(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code + "\n")


def test_catches_an_upward_import_inside_a_function(copy: Path) -> None:
    _plant(copy / "_objects" / "sonames.py",
           "def _late():\n    from .. import hooks\n    return hooks\n")
    problems = upward_imports(copy)
    assert any(p.startswith("memhook._objects.sonames (layer 0") and "imports memhook.hooks" in p
               for p in problems), problems
    assert any("memhook._objects.sonames" in c and "memhook.hooks" in c
               for c in import_cycles(copy))


@pytest.mark.parametrize("statement", [
    "from ..cli import trace",            # relative, two levels, a module by name
    "from ..cli.trace import run_trace",  # relative, a name inside a module
    "import memhook.cli.trace",           # absolute
    "from memhook._events import drain",  # absolute, a module by name
    "from .. import hooks",               # the parent package's module
])
def test_catches_every_import_form(copy: Path, statement: str) -> None:
    _plant(copy / "tracing" / "ledger.py", f"def _late():\n    {statement}\n")
    problems = upward_imports(copy)
    assert any(p.startswith("memhook.tracing.ledger (") for p in problems), (statement, problems)


def test_catches_a_planted_cycle(copy: Path) -> None:
    """area imports protocol; protocol importing area back, inside a
    function, closes a cycle."""
    _plant(copy / "tracing" / "protocol.py",
           "def _late():\n    from .area import TraceArea\n    return TraceArea\n")
    assert ["memhook.tracing.area", "memhook.tracing.protocol"] in import_cycles(copy)
    assert any(p.startswith("memhook.tracing.protocol (") and "imports memhook.tracing.area" in p
               for p in upward_imports(copy))


def test_type_checking_imports_are_not_edges(copy: Path) -> None:
    _plant(copy / "_objects" / "sonames.py",
           "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
           "    from ..hooks import HookReport\n")
    assert not upward_imports(copy)


def test_names_a_module_missing_from_the_table(copy: Path) -> None:
    (copy / "tracing" / "newcomer.py").write_text("from .ledger import Ledger\n")
    problems = unranked_modules(copy)
    assert len(problems) == 1, problems
    assert problems[0].startswith("memhook.tracing.newcomer (memhook/tracing/newcomer.py) "
                                  "has no rank: add it to LAYERS"), problems
    assert "'memhook.tracing.ledger'" in problems[0], problems


def test_names_a_ranked_module_that_is_gone(copy: Path) -> None:
    (copy / "tracing" / "reorder.py").unlink()
    assert unranked_modules(copy) == [
        "memhook.tracing.reorder is ranked in LAYERS but no such module exists: remove it"]


# -------------------------------------------------- the interpreter's view

# Every module the library imports (the build script, the entry point and
# the demo's workload - a script needing cuda-python - are run, not imported).
MODULES = sorted(set(module_files(PACKAGE)) - UNRANKED
                 - {"memhook.__main__", "memhook.cli.demo_workload"})


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT / "tests", capture_output=True,
                          text=True, timeout=120)


# One interpreter that has imported memhook's third-party dependencies and
# nothing of memhook forks a child per module, which imports it and exits as
# `python -c "import M"` would (its status, and what it wrote).  The order in
# which memhook's own modules are first imported - where a cycle shows - is
# a fresh interpreter's; the dependencies' import is paid once, not per module.
_FORK_SERVER = r"""
import json, os, sys
import cffi, numpy, sortedcontainers
for name in map(str.strip, sys.stdin):
    assert not [m for m in sys.modules if m.split(".")[0] == "memhook"], "memhook loaded"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 1)
        os.dup2(w, 2)
        sys.argv = ["-c"]
        exec(compile(f"import {name}", "<string>", "exec"), {"__name__": "__main__"})
        sys.exit(0)
    os.close(w)
    with os.fdopen(r, encoding="utf-8", errors="replace") as out:
        text = out.read()
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps({"rc": status, "output": text}), flush=True)
"""


@pytest.fixture(scope="module")
def first_importer() -> Iterator[Callable[[str], tuple[int, str]]]:
    """import_first(module) -> (exit status, output) of a child that imports it."""
    server = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], cwd=ROOT / "tests",
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    stdin, stdout = server.stdin, server.stdout

    def import_first(module: str) -> tuple[int, str]:
        stdin.write(module + "\n")
        stdin.flush()
        line = stdout.readline()
        assert line, f"the fork server died (exit {server.wait(10)})"
        got = json.loads(line)
        return got["rc"], got["output"]
    try:
        yield import_first
    finally:
        stdin.close()
        server.wait(60)


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_first_in_a_fresh_interpreter(first_importer, module: str) -> None:
    rc, output = first_importer(module)
    assert rc == 0, f"import {module} first:\n{output}"


def test_events_loads_without_the_drain() -> None:
    """Load memhook.events under a bare package (memhook/__init__.py, which
    imports everything, not run) and see what it pulled in."""
    code = f"""
import importlib, sys, types
pkg = types.ModuleType("memhook")
pkg.__path__ = [{str(PACKAGE)!r}]
sys.modules["memhook"] = pkg
importlib.import_module("memhook.events")
print(sorted(m for m in sys.modules if m.startswith("memhook.")))
"""
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr
    loaded = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert "memhook.events" in loaded
    assert "memhook._events.drain" not in loaded, f"memhook.events imported the drain: {loaded}"


def facade_violations(package: Path) -> list[str]:
    """Imports along a FACADES edge outside the importer's lazy re-export."""
    files = module_files(package)
    problems = []
    for importer, imported in FACADES:
        tree = ast.parse(files[importer].read_text())
        allowed: set[int] = set()
        for node in tree.body:
            lazy = (isinstance(node, ast.FunctionDef) and node.name == "__getattr__") or (
                isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
            if lazy:
                allowed |= {id(n) for n in ast.walk(node)}
        target = imported.rsplit(".", 1)[-1]
        for node in ast.walk(tree):
            names = ([node.module or ""] + [a.name for a in node.names]
                     if isinstance(node, ast.ImportFrom) else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(n == imported or n.endswith("." + target) or n == target for n in names) \
                    and id(node) not in allowed:
                problems.append(f"{importer} imports {imported} at line {node.lineno}, outside "
                                f"its __getattr__: only the lazy re-export may")
    return problems


def test_facade_edges_are_lazy_reexports_only() -> None:
    """A FACADES edge is an import inside the importer's module-level
    ``__getattr__`` (or a TYPE_CHECKING block), nowhere else: a real import
    there would be a cycle the table hides."""
    problems = facade_violations(PACKAGE)
    assert not problems, "\n".join(problems)


def test_catches_a_real_import_along_a_facade_edge(copy: Path) -> None:
    _plant(copy / "cache.py", "def _helper():\n    from ._queries import query\n    return query\n")
    problems = facade_violations(copy)
    assert len(problems) == 1, problems
    assert "memhook.cache imports memhook._queries.query" in problems[0], problems
