"""libmemhook.so's two headers.

memhook/memhook.h is the C API: the one header a program includes, shipped
in the package and named by memhook.pc and `memhook config`.
memhook_internal/api.h declares what the core exports only for memhook's
own Python binding, tests and benches (the patch engines' entry points, a
cache fed by hand, a hook's bypass); it is never installed, the way UCX
installs ucm/api/ucm.h and keeps ucm/bistro/bistro.h among its noinst
headers.  Held here: every function the core exports is declared in exactly
one of the two (the exec family the trace interposes aside) and every one
they declare is exported; the public header declares none of the internal
families; the installed include folder holds the public header alone.  The
wheel's side of the last is in tests/test_packaging.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from elftools.elf.elffile import ELFFile

from memhook_testing import CSRC, NativeBuild, build_native

PUBLIC = CSRC / "include" / "memhook" / "memhook.h"
INTERNAL = CSRC / "include" / "memhook_internal" / "api.h"
# Families no program builds on: the engines under the hooks, and what
# exists for tests alone.
INTERNAL_FAMILIES = ("memhook_x86_", "memhook_bistro_", "memhook_reloc_", "memhook_testing_")
# csrc/trace/trace_exec.c and trace_popen.c: the core first in LD_PRELOAD, so
# its definitions win.
EXEC_FAMILY = {"execl", "execle", "execlp", "execv", "execve", "execveat", "execvp", "execvpe",
               "fexecve", "posix_spawn", "posix_spawnp", "popen"}
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DECLARED = re.compile(r"\bMEMHOOK_API\b[^;{]*?\b(\w+)\s*\(")


def declared(text: str) -> list[str]:
    """The functions a header's text declares with MEMHOOK_API."""
    return _DECLARED.findall(re.sub(r"^\s*#.*$", "", _COMMENT.sub("", text), flags=re.M))


def _exported(lib: Path) -> set[str]:
    with lib.open("rb") as f:
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        return {s.name for s in dynsym.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_shndx"] != "SHN_UNDEF"
                and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
                and s["st_other"]["visibility"] == "STV_DEFAULT"}


def public_header_violations(text: str) -> list[str]:
    return [f"memhook.h declares {name}, of an internal family ({family}*): declare it in "
            "memhook_internal/api.h" for name in declared(text)
            for family in INTERNAL_FAMILIES if name.startswith(family)]


def test_every_export_is_declared_in_exactly_one_header(native: NativeBuild) -> None:
    public, internal = declared(PUBLIC.read_text()), declared(INTERNAL.read_text())
    assert public and internal
    both = sorted(set(public) & set(internal))
    assert not both, f"declared in both headers: {both}"
    exported = _exported(native.core) - EXEC_FAMILY
    undeclared = sorted(exported - set(public) - set(internal))
    unexported = sorted((set(public) | set(internal)) - exported)
    assert not undeclared, f"{native.core} exports functions no header declares: {undeclared}"
    assert not unexported, f"declared but not exported (a definition that missed its " \
                           f"MEMHOOK_API declaration is hidden): {unexported}"


def test_the_public_header_declares_no_internal_family() -> None:
    assert public_header_violations(PUBLIC.read_text()) == []


def test_the_check_catches_an_engine_entry_in_the_public_header() -> None:
    text = PUBLIC.read_text().replace(
        "#ifdef __cplusplus\n}",
        "/* memhook_bistro_install in a comment is fine */\n"
        "MEMHOOK_API size_t memhook_reloc_patched_slots(void);\n#ifdef __cplusplus\n}")
    assert public_header_violations(text) == [
        "memhook.h declares memhook_reloc_patched_slots, of an internal family "
        "(memhook_reloc_*): declare it in memhook_internal/api.h"]


def test_the_installed_include_folder_holds_the_public_headers_only() -> None:
    """What `memhook config --includes` names: memhook.h and cuda_abi.h,
    from the build's own list, and no internal header."""
    proc = subprocess.run([sys.executable, "-m", "memhook", "config", "--includes"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    folder = Path(proc.stdout.strip())
    shipped = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.h"))
    assert shipped == ["memhook/cuda_abi.h", "memhook/memhook.h"], shipped
    assert not any("memhook_internal" in dest for _, dest in build_native.HEADERS)
