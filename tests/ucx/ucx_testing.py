"""Finding UCX's libraries (the libucx-cu13 wheel) for the UCX tests."""

from __future__ import annotations

import importlib.util
import os
import zipfile
from pathlib import Path

__all__ = ["find_ucx_lib", "NO_UCX"]

NO_UCX = ("UCX not found: install the test extra (libucx-cu13, Linux x86-64), or set "
          "MEMHOOK_UCX to an unzipped libucx-cu13 wheel, its libucx/lib folder or the .whl")


def _lib_of(path: Path, scratch: Path) -> Path | None:
    if path.is_file() and path.suffix == ".whl":
        out = scratch / "ucx-wheel"
        if not (out / "libucx" / "lib" / "libucm.so.0").exists():
            with zipfile.ZipFile(path) as z:
                z.extractall(out)
        path = out
    for cand in (path, path / "lib", path / "libucx" / "lib"):
        if (cand / "libucm.so.0").exists() and (cand / "ucx" / "libucm_cuda.so.0").exists():
            return cand
    return None


def find_ucx_lib(scratch: Path) -> Path | None:
    """The folder with libucs.so.0, libucm.so.0 and ucx/libucm_cuda.so.0:
    MEMHOOK_UCX first, else the installed libucx package."""
    given = os.environ.get("MEMHOOK_UCX")
    if given:
        return _lib_of(Path(given), scratch)
    spec = importlib.util.find_spec("libucx")
    if spec is None or not spec.submodule_search_locations:
        return None
    return _lib_of(Path(next(iter(spec.submodule_search_locations))), scratch)
