"""Session fixtures shared by every test folder: the native build the tests
run against, and a scratch folder for compiled C programs.  The helpers they
use live in tests/memhook_testing.py; see its docstring for the sanitizer mode
(MEMHOOK_TEST_SANITIZE=address,undefined).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from memhook_testing import SANITIZE, NativeBuild, build_native


def _installed_root() -> Path | None:
    try:
        import memhook.sim
    except ImportError:
        return None
    return Path(memhook.sim.__file__).resolve().parent.parent.parent


@pytest.fixture(scope="session")
def native(tmp_path_factory: pytest.TempPathFactory) -> NativeBuild:
    """The native build the tests run against (installed, or a sanitizer build)."""
    if SANITIZE:
        root = tmp_path_factory.mktemp("native-sanitized")
        build_native.build_all(root, sanitize=SANITIZE)
        return NativeBuild(root, SANITIZE)
    root = _installed_root()
    if root is None or not (root / "memhook" / "sim" / "lib" / "libcuda.so.1").exists():
        pytest.fail("memhook is not installed with its native parts; run the README's "
                    "install command (pip install -e '.[test]') first")
    return NativeBuild(root, "")


@pytest.fixture(scope="session")
def c_test_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch folder for compiled C test programs."""
    return tmp_path_factory.mktemp("ctests")


