"""Session fixtures shared by every test folder: the native build the tests
run against, a scratch folder for compiled C programs, and the session's
cache of native builds and objects.  The helpers they
use live in tests/memhook_testing.py; see its docstring for the sanitizer mode
(MEMHOOK_TEST_SANITIZE=address,undefined).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from memhook_testing import (BUILD_CACHE_ENV, SANITIZE, NativeBuild, ObjectCache,
                             cached_native_build)


def pytest_configure(config: pytest.Config) -> None:
    """Give the programs the tests start a SIGINT they can act on.

    A suite started as a background job of a non-interactive shell (``cmd &``,
    as CI runners and nohup'd scripts do) inherits SIGINT and SIGQUIT
    ignored, and an ignored signal stays ignored across fork and exec, so
    every ^C test would see its program ignore the ^C; nohup adds SIGHUP.
    A handled signal is reset to its default at exec instead: with Python's
    own handler here, each child starts with SIGINT at its default, as from
    a terminal (and SIGQUIT and SIGHUP at theirs)."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                          else signal.SIG_DFL)


def _installed_root() -> Path | None:
    try:
        import memhook.sim
    except ImportError:
        return None
    return Path(memhook.sim.__file__).resolve().parent.parent.parent


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this session keeps the native builds it makes (memhook_testing's
    cached_native_build); a pytest started by the suite gets the suite's, and
    pytest-xdist's workers share one (beside their own base folders)."""
    given = os.environ.get(BUILD_CACHE_ENV)
    if given:
        return Path(given)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "native-builds"
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("native-builds")


@pytest.fixture(scope="session")
def object_cache(build_cache: Path) -> ObjectCache:
    """C objects compiled once per session (memhook_testing.ObjectCache)."""
    return ObjectCache(build_cache / "objects")


@pytest.fixture(scope="session")
def native(build_cache: Path) -> NativeBuild:
    """The native build the tests run against (installed, or a sanitizer build)."""
    if SANITIZE:
        return cached_native_build(build_cache, SANITIZE)
    root = _installed_root()
    if root is None or not (root / "memhook" / "sim" / "lib" / "libcuda.so.1").exists():
        pytest.fail("memhook is not installed with its native parts; run the README's "
                    "install command (pip install -e '.[test]') first")
    return NativeBuild(root, "")


@pytest.fixture(scope="session")
def c_test_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch folder for compiled C test programs."""
    return tmp_path_factory.mktemp("ctests")


