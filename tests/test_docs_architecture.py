"""docs/architecture.md names every source file, and only files that exist.

Every source file under csrc/ (outside csrc/sim/, a product of its own,
described as a whole) and under memhook/ (outside the built simulator in
memhook/sim/lib/, the headers the build copies to memhook/include/, and
__pycache__) must be named in the doc by its
path from the repository root; every path-looking name in the doc (a token
under one of the repository's folders, or a bare file name with a source
extension) must exist. A file moved or added without the doc following
fails here, with the file named: the message says which to add or remove.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

SOURCE_SUFFIXES = (".py", ".c", ".h", ".S", ".def")
TOP_FOLDERS = ("csrc", "memhook", "tests", "tools", "bench", "docs", "examples")

# A path under one of the repository's folders: csrc/core/log.c,
# memhook/cli/, tests/test_layering.py.  Globs (tests/data/h200-*.json) are
# patterns, not names, and are skipped by _names below.
_PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./*-]*)" % "|".join(TOP_FOLDERS))
# A bare file name with a source extension: plan.c, reorder.py, x86.h.
_BARE = re.compile(r"(?<![\w./-])([A-Za-z_][\w-]*\.(?:py|c|h|S|def))(?![\w/])")


def source_files(root: Path) -> list[str]:
    """The source files the doc must name, as paths from ``root``."""
    found = []
    for top in ("csrc", "memhook"):
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or path.suffix not in SOURCE_SUFFIXES:
                continue
            if "__pycache__" in rel.parts or rel.parts[:2] == ("csrc", "sim"):
                continue
            if rel.parts[:3] == ("memhook", "sim", "lib"):  # the built simulator
                continue
            if rel.parts[:2] == ("memhook", "include"):  # csrc/include's, copied by the build
                continue
            found.append(rel.as_posix())
    return found


def _names(doc: str) -> tuple[set[str], set[str]]:
    paths = {m.rstrip(".,:;)") for m in _PATH.findall(doc) if "*" not in m}
    bare = set(_BARE.findall(doc))
    return paths, bare


def missing_from_doc(doc: str, files: list[str]) -> list[str]:
    """Files of ``files`` the doc does not name by their full path."""
    paths, _ = _names(doc)
    return [f for f in files if f not in paths]


def stale_in_doc(doc: str, root: Path) -> list[str]:
    """Names in the doc that are no file or folder of the tree at ``root``."""
    paths, bare = _names(doc)
    stale = [p for p in sorted(paths) if not (root / p).exists()]
    basenames = {p.name for top in TOP_FOLDERS if (root / top).is_dir()
                 for p in (root / top).rglob("*") if "__pycache__" not in p.parts}
    basenames |= {p.name for p in root.iterdir()}
    stale += [b for b in sorted(bare) if b not in basenames]
    return stale


def test_every_source_file_is_named() -> None:
    missing = missing_from_doc(DOC.read_text(), source_files(ROOT))
    assert not missing, (
        "docs/architecture.md does not name these source files (add each, by its path from "
        "the repository root, with a line on what it holds): " + ", ".join(missing))


def test_every_named_file_exists() -> None:
    stale = stale_in_doc(DOC.read_text(), ROOT)
    assert not stale, (
        "docs/architecture.md names files that do not exist (moved or deleted: "
        "rename or remove them in the doc): " + ", ".join(stale))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small repository: two named sources, one simulator file, a cache."""
    for rel in ("csrc/core/log.c", "csrc/core/log.h", "csrc/sim/driver/api.c",
                "memhook/sim/lib/cudart_sim.h",
                "memhook/__init__.py", "memhook/__pycache__/x.cpython-311.pyc",
                "memhook/py.typed", "memhook/_native.abi3.so"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    return tmp_path


def test_checks_see_what_the_tree_holds(tree: Path) -> None:
    assert source_files(tree) == ["csrc/core/log.c", "csrc/core/log.h", "memhook/__init__.py"]
    doc = "`csrc/core/log.c`, `csrc/core/log.h` (log.c) and `memhook/__init__.py`; csrc/sim/.\n"
    assert missing_from_doc(doc, source_files(tree)) == []
    assert stale_in_doc(doc, tree) == []


def test_catches_a_planted_missing_file(tree: Path) -> None:
    (tree / "csrc" / "core" / "new_helper.c").write_text("")
    doc = "`csrc/core/log.c`, `csrc/core/log.h` and `memhook/__init__.py`.\n"
    assert missing_from_doc(doc, source_files(tree)) == ["csrc/core/new_helper.c"]
    # Named by its bare name only is not enough: the path says which folder.
    assert missing_from_doc(doc + "new_helper.c\n", source_files(tree)) == [
        "csrc/core/new_helper.c"]


def test_catches_a_planted_stale_name(tree: Path) -> None:
    doc = ("`csrc/core/log.c`, `csrc/core/log.h`, `memhook/__init__.py`, "
           "`memhook/cli/reorder.py` and the writer (formats.py).\n")
    assert stale_in_doc(doc, tree) == ["memhook/cli/reorder.py", "formats.py"]
