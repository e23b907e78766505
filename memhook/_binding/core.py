"""The bridge to libmemhook.so, the native core that holds all hook state."""

from __future__ import annotations

import ctypes
import logging
import os

from .._version import __version__

__all__ = ["ffi", "lib", "library_path", "native_version"]

_log = logging.getLogger("memhook")
_CORE_SONAME = "libmemhook.so"


def _package_dir() -> str:
    """The memhook/ folder: libmemhook.so, the extension and the build
    script sit there, one level above this group."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bind_core() -> ctypes.CDLL:
    """Make sure exactly one libmemhook.so is in the process before the
    extension loads, so its DT_NEEDED entry binds to that one by soname.

    If the core is already there (``memhook trace`` LD_PRELOADs it, or another
    import loaded it), that copy is used; loading ours by path as well would
    put a second copy of the hook state in the process.  Otherwise the file
    in the package folder is loaded - not whatever a RUNPATH search finds."""
    try:
        return ctypes.CDLL(_CORE_SONAME, mode=os.RTLD_NOW | os.RTLD_GLOBAL | os.RTLD_NOLOAD)
    except OSError:
        pass
    here = os.path.join(_package_dir(), _CORE_SONAME)
    return ctypes.CDLL(here, mode=os.RTLD_NOW | os.RTLD_GLOBAL)


def _source_tree() -> str | None:
    """The repository root when this package is imported from the source tree
    rather than from an installed copy, else None.

    The build script ``_ffi_build.py`` sits in the package folder only there (the
    wheel leaves it out), and the root holds ``setup.py`` and ``csrc/``."""
    package = _package_dir()
    root = os.path.dirname(package)
    if (os.path.isfile(os.path.join(package, "_ffi_build.py"))
            and os.path.isfile(os.path.join(root, "setup.py"))
            and os.path.isdir(os.path.join(root, "csrc"))):
        return root
    return None


def _load_error(exc: BaseException) -> ImportError:
    root = _source_tree()
    if root is not None:
        # Like numpy's "importing numpy from its source directory": the usual
        # cause is a shell in the repository root after `pip install .` -
        # Python puts the current folder first on sys.path, so the source
        # tree hides the installed package, and reinstalling changes nothing.
        return ImportError(
            f"memhook is being imported from its source tree ({root}), whose native parts "
            f"(libmemhook.so, the _native extension) are not built: {exc}.  Python looks in "
            "the current folder (or the script's) first, so this copy hides any installed "
            "memhook.  Either run from another folder (cd elsewhere, then start Python "
            "again), or build the source tree in place with `pip install -e .` (needs a C "
            "compiler).")
    return ImportError(
        "memhook's native extension or its core libmemhook.so is missing or cannot load "
        f"({exc}); reinstall with `pip install .` (or `pip install -e .`) "
        "on a machine with a C compiler")


try:
    _core_handle = _bind_core()
    from .._native import ffi, lib  # type: ignore[import-not-found]
except (ImportError, OSError) as exc:  # a source tree not built in place, or a broken install
    raise _load_error(exc) from exc


def library_path() -> str:
    """Absolute path of the core ``libmemhook.so`` loaded in this process.

    This is the file to ``LD_PRELOAD`` so that a child process shares the
    same core (and so the same hook state layout) as this one.

    Runtime complexity: O(1) (one ``dladdr``).

    >>> import os, memhook
    >>> os.path.basename(memhook.library_path())
    'libmemhook.so'
    """
    raw = lib.memhook_library_path()
    if raw == ffi.NULL:  # pragma: no cover - dladdr cannot fail on ourselves
        raise RuntimeError("libmemhook.so could not report its own path")
    return os.fsdecode(ffi.string(raw))


def native_version() -> str:
    """Version of the loaded core library."""
    return ffi.string(lib.memhook_version()).decode()


if native_version() != __version__:  # pragma: no cover - mixed installs
    _log.warning(
        "memhook %s is using libmemhook.so %s from %s; reinstall to match",
        __version__, native_version(), library_path(),
    )
