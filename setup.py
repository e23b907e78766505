"""Build glue: the native tree (csrc/build_native.py) before the cffi module.

Everything declarative lives in pyproject.toml.  This file exists because the
core library and the simulator are plain shared libraries (not Python
extensions) that must be built first and land inside the package, for both
``pip install .`` and ``pip install -e .``.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "csrc"))
import build_native  # noqa: E402  (csrc/build_native.py)


class BuildNativeThenExt(build_ext):
    """Build libmemhook.so and the simulator, then the cffi extension."""

    def run(self) -> None:
        out_root = Path(self.build_lib).resolve()
        written = build_native.build_all(
            out_root, obj_root=Path(self.build_temp).resolve() / "native",
            verbose=self.verbose > 1,
        )
        self._native_outputs = written
        core_dir = str(out_root / "memhook")
        for ext in self.extensions:
            if core_dir not in ext.library_dirs:
                ext.library_dirs.append(core_dir)
        super().run()
        if self.inplace or getattr(self, "editable_mode", False):
            # Editable installs import from the source tree: put the native
            # files there too, next to the extension that needs them.
            for path in written:
                dest = ROOT / path.relative_to(out_root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = dest.with_name(dest.name + ".tmp")
                shutil.copy2(path, tmp)
                os.replace(tmp, dest)

    def get_outputs(self) -> list[str]:
        outputs = list(super().get_outputs())
        outputs += [str(p) for p in getattr(self, "_native_outputs", [])]
        return outputs


setup(
    cffi_modules=["memhook/_ffi_build.py:ffibuilder"],
    cmdclass={"build_ext": BuildNativeThenExt},
)
