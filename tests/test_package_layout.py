"""memhook/ is grouped by idea: the public modules and the subpackages at
the top, every private module in a private group (``memhook/_values/``,
``memhook/_binding/``, ...), each group a folder that docs/architecture.md
describes under its own heading.  Only the build-time files stay flat.

A new private module dropped flat into memhook/, or a group the doc does not
describe, fails here with what to do about it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "memhook"
DOC = ROOT / "docs" / "architecture.md"

# The private modules that stay flat, and why.
FLAT_PRIVATE = {
    "_version.py": "pyproject.toml reads the version from memhook._version",
    "_ffi_build.py": "setup.py's cffi_modules and build_py, and MANIFEST.in, name it there",
}

_GROUP_HEADING = re.compile(r"^### memhook/(_\w+)/: \S", re.M)


def layout_problems(package: Path, doc: str) -> list[str]:
    problems = []
    for path in sorted(package.glob("_*.py")):
        if path.name not in FLAT_PRIVATE and path.name not in ("__init__.py", "__main__.py"):
            problems.append(
                f"memhook/{path.name} is a private module flat in memhook/: put it in the "
                f"group whose idea it holds (a memhook/_<group>/ folder; "
                f"tools/regroup_package.py's GROUPS lists them), or start a group")
    described = set(_GROUP_HEADING.findall(doc))
    groups = sorted(p.name for p in package.iterdir()
                    if p.is_dir() and p.name.startswith("_") and p.name != "__pycache__")
    for name in groups:
        if not (package / name / "__init__.py").is_file():
            problems.append(f"memhook/{name}/ has no __init__.py: a group is a package")
        if name not in described:
            problems.append(f"memhook/{name}/ is not described in docs/architecture.md: add a "
                            f"heading '### memhook/{name}/: <its idea>' and its files' table")
    for name in sorted(described - set(groups)):
        problems.append(f"docs/architecture.md describes memhook/{name}/, which does not exist")
    return problems


def test_private_modules_are_grouped() -> None:
    problems = layout_problems(PACKAGE, DOC.read_text())
    assert not problems, "\n".join(problems)


def test_the_flat_exceptions_exist() -> None:
    """An exception whose file is gone is stale."""
    assert [n for n in FLAT_PRIVATE if not (PACKAGE / n).is_file()] == []


@pytest.fixture()
def copy(tmp_path: Path) -> Path:
    dest = tmp_path / "memhook"
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns(
        "*.so", "*.so.*", "*.a", "__pycache__", "lib", "include"))
    assert layout_problems(dest, DOC.read_text()) == []
    return dest


def test_catches_a_flat_private_module(copy: Path) -> None:
    (copy / "_newcomer.py").write_text("")
    assert layout_problems(copy, DOC.read_text()) == [
        "memhook/_newcomer.py is a private module flat in memhook/: put it in the group whose "
        "idea it holds (a memhook/_<group>/ folder; tools/regroup_package.py's GROUPS lists "
        "them), or start a group"]


def test_catches_a_group_the_doc_does_not_describe(copy: Path) -> None:
    (copy / "_misc").mkdir()
    (copy / "_misc" / "helpers.py").write_text("")
    problems = layout_problems(copy, DOC.read_text())
    assert problems == [
        "memhook/_misc/ has no __init__.py: a group is a package",
        "memhook/_misc/ is not described in docs/architecture.md: add a heading "
        "'### memhook/_misc/: <its idea>' and its files' table"], problems


def test_catches_a_described_group_that_is_gone(copy: Path) -> None:
    shutil.rmtree(copy / "_objects")
    assert layout_problems(copy, DOC.read_text()) == [
        "docs/architecture.md describes memhook/_objects/, which does not exist"]
