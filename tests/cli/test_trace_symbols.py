"""Naming frames of stripped libraries (memhook/_objects/symbolize.py,
memhook/_objects/debuginfo.py): a local function that ``strip`` took out of the
library's ``.symtab`` is named from its separate debug file (by
debuglink, by build ID) or from its MiniDebugInfo, as --stacks and callers
show it; a debug file of another build, or a broken MiniDebugInfo, names
nothing rather than something wrong."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from memhook._objects import debuginfo as _debuginfo
from memhook._objects.symbolize import ElfSymbols, describe

SOURCE = """
__attribute__((noinline)) static int hidden_helper(int x)
{ __asm__ volatile(""); return x * 3 + 1; }
int exported_entry(int x) { return hidden_helper(x) + 2; }
"""

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("cc", "objcopy", "strip", "xz")),
                                reason="needs cc, objcopy, strip and xz (binutils)")


def _run(*cmd: str | Path) -> None:
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True)


@pytest.fixture()
def built(tmp_path: Path) -> tuple[Path, Path, int]:
    """(the library, its debug file, hidden_helper's address in it)."""
    (tmp_path / "lib.c").write_text(SOURCE)
    full = tmp_path / "full.so"
    _run("cc", "-O1", "-fPIC", "-shared", "-Wl,--build-id", "-o", full, tmp_path / "lib.c")
    debug = tmp_path / "full.debug"
    _run("objcopy", "--only-keep-debug", full, debug)
    nm = subprocess.run(["nm", str(full)], check=True, capture_output=True, text=True).stdout
    (address,) = [int(ln.split()[0], 16) for ln in nm.splitlines() if ln.endswith(" hidden_helper")]
    return full, debug, address


def _stripped(full: Path, name: str) -> Path:
    out = full.with_name(name)
    shutil.copy(full, out)
    _run("strip", "--strip-all", out)
    return out


def _named(lib: Path, address: int) -> str | None:
    hit = ElfSymbols(str(lib)).lookup(address + 2)
    return hit[0] if hit else None


def test_a_debug_file_by_debuglink_names_a_local_function(built) -> None:
    full, debug, address = built
    assert _named(full, address) == "hidden_helper"
    lib = _stripped(full, "linked.so")
    assert _named(lib, address) is None  # stripped: .dynsym alone has no local function
    _run("objcopy", f"--add-gnu-debuglink={debug}", lib)
    assert _named(lib, address) == "hidden_helper"
    assert ElfSymbols(str(lib)).source == "debug file"
    # As a caller: library!symbol+offset, not library+0x...
    assert describe(str(lib), 0x7F0000000000, 0x7F0000000000 + address + 3).short == \
        "linked.so!hidden_helper+0x3"


def test_a_debug_file_by_build_id_names_a_local_function(built, tmp_path: Path,
                                                         monkeypatch) -> None:
    full, debug, address = built
    lib = _stripped(full, "byid.so")
    notes = subprocess.run(["readelf", "-n", str(lib)], check=True, capture_output=True,
                           text=True).stdout
    bid = notes.split("Build ID: ", 1)[1].split()[0]
    root = tmp_path / "debugroot"
    (root / ".build-id" / bid[:2]).mkdir(parents=True)
    shutil.copy(debug, root / ".build-id" / bid[:2] / f"{bid[2:]}.debug")
    monkeypatch.setattr(_debuginfo, "DEBUG_DIRS", (str(root),))
    assert _named(lib, address) == "hidden_helper"


def test_a_debug_file_of_another_build_is_not_used(built, tmp_path: Path) -> None:
    full, _, address = built
    other = tmp_path / "other"
    other.mkdir()
    (other / "lib.c").write_text(SOURCE.replace("x * 3", "x * 5 + x"))
    other_so = other / "full.so"
    _run("cc", "-O1", "-fPIC", "-shared", "-Wl,--build-id", "-o", other_so, other / "lib.c")
    _run("objcopy", "--only-keep-debug", other_so, other / "wrong.debug")
    lib = _stripped(full, "mismatched.so")
    _run("objcopy", f"--add-gnu-debuglink={other / 'wrong.debug'}", lib)
    shutil.copy(other / "wrong.debug", tmp_path / "wrong.debug")  # (beside it, by its name)
    assert ElfSymbols(str(lib)).source == "dynsym"
    assert _named(lib, address) is None


def test_minidebuginfo_names_a_local_function(built, tmp_path: Path) -> None:
    full, debug, address = built
    lib = _stripped(full, "mini.so")
    packed = tmp_path / "mini.debug"
    shutil.copy(debug, packed)
    _run("xz", "-f", packed)
    _run("objcopy", f"--add-section=.gnu_debugdata={packed}.xz", lib)
    symbols = ElfSymbols(str(lib))
    assert symbols.source == "dynsym+minidebuginfo"
    assert _named(lib, address) == "hidden_helper"
    entry = int(subprocess.run(["nm", "-D", str(lib)], check=True, capture_output=True,
                               text=True).stdout.split(" T exported_entry")[0].split()[-1], 16)
    assert symbols.lookup(entry + 1) == ("exported_entry", 1)  # .dynsym's, still named


def test_broken_minidebuginfo_names_nothing(built, tmp_path: Path) -> None:
    full, _, address = built
    lib = _stripped(full, "broken.so")
    junk = tmp_path / "junk.xz"
    junk.write_bytes(b"\xfd7zXZ\x00" + os.urandom(256))
    _run("objcopy", f"--add-section=.gnu_debugdata={junk}", lib)
    assert ElfSymbols(str(lib)).source == "dynsym"
    assert _named(lib, address) is None
