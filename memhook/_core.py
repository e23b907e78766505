"""The bridge to libmemhook.so, the native core that holds all hook state."""

from __future__ import annotations

import logging
import os

from ._version import __version__

__all__ = ["ffi", "lib", "library_path", "native_version"]

_log = logging.getLogger("memhook")

try:
    from ._native import ffi, lib  # type: ignore[import-not-found]
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        "memhook's native extension is missing or cannot load libmemhook.so "
        f"({exc}); reinstall with `pip install .` (or `pip install -e .`) "
        "on a machine with a C compiler"
    ) from exc


def library_path() -> str:
    """Absolute path of the core ``libmemhook.so`` loaded in this process.

    This is the file to ``LD_PRELOAD`` so that a child process shares the
    same core (and so the same hook state layout) as this one."""
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
