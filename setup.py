"""Build glue: the native tree (csrc/build_native.py) before the cffi module.

Everything declarative lives in pyproject.toml.  This file exists because the
core library and the simulator are plain shared libraries (not Python
extensions) that must be built first and land inside the package, for both
``pip install .`` and ``pip install -e .``; because the build script
memhook/_ffi_build.py sits in the package folder but must not be installed;
and because the wheel's tag must say the extension is abi3 (docs/wheels.md).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1, run directly (`setup.py build_ext --inplace`)
    bdist_wheel = None

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "csrc"))
import build_native  # noqa: E402  (csrc/build_native.py)


def _without_search_paths(args: list[str]) -> list[str]:
    """A link command without the rpath flags it came with: the build
    Python's LDSHARED names its own lib folder (-Wl,-rpath,/…/lib), which
    would be searched before $ORIGIN on every machine the wheel goes to."""
    out: list[str] = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
        elif arg in ("-Wl,-rpath", "-Wl,--rpath", "-Wl,-R"):
            skip_next = True  # (its folder comes as the next -Wl, argument)
        elif not arg.startswith(("-Wl,-rpath,", "-Wl,-rpath=", "-Wl,--rpath,", "-Wl,--rpath=",
                                 "-Wl,-R,", "-Wl,-R/")):
            out.append(arg)
    return out


class BuildNativeThenExt(build_ext):
    """Build libmemhook.so and the simulator, then the cffi extension.

    The extension searches $ORIGIN only (memhook/_ffi_build.py), whatever
    the build Python's own link flags say.  An in-place or editable build
    (a developer's) keeps debug info; any other (a wheel) leaves it out of
    every native file, unless MEMHOOK_DEBUG=1 asks for a debug build."""

    def _develop(self) -> bool:
        return bool(self.inplace or getattr(self, "editable_mode", False))

    def run(self) -> None:
        out_root = Path(self.build_lib).resolve()
        debug_info = self._develop() or os.environ.get("MEMHOOK_DEBUG") == "1"
        written = build_native.build_all(
            out_root, obj_root=Path(self.build_temp).resolve() / "native",
            verbose=self.verbose > 1, debug_info=debug_info,
        )
        self._native_outputs = written
        core_dir = str(out_root / "memhook")
        for ext in self.extensions:
            if core_dir not in ext.library_dirs:
                ext.library_dirs.append(core_dir)
            if not debug_info and build_native.STRIP_DEBUG not in ext.extra_link_args:
                ext.extra_link_args.append(build_native.STRIP_DEBUG)
        # Always relink the extension (one small file): build_ext skips one
        # newer than its source, and pip builds in the tree, so a wheel
        # would otherwise ship an extension an earlier build linked with
        # other flags (debug info, the host's rpath).
        self.force = True
        super().run()
        if self._develop():
            # Editable installs import from the source tree: put the native
            # files there too, next to the extension that needs them.
            for path in written:
                dest = ROOT / path.relative_to(out_root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = dest.with_name(dest.name + ".tmp")
                shutil.copy2(path, tmp)
                os.replace(tmp, dest)

    def build_extensions(self) -> None:
        # self.compiler exists from here on (build_ext.run made it).
        for attr in ("linker_so", "linker_so_cxx"):
            if hasattr(self.compiler, attr):
                setattr(self.compiler, attr, _without_search_paths(getattr(self.compiler, attr)))
        super().build_extensions()

    def get_outputs(self) -> list[str]:
        outputs = list(super().get_outputs())
        outputs += [str(p) for p in getattr(self, "_native_outputs", [])]
        return outputs


class BuildPyWithoutBuildScript(build_py):
    """Install every module of the package but its cffi build script."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        return [m for m in super().find_package_modules(package, package_dir)
                if (m[0], m[1]) != ("memhook", "_ffi_build")]

    def run(self) -> None:
        super().run()
        # pip builds in the tree: a build folder from before this rule (or
        # from a plain `setup.py build`) may still hold a copy, which the
        # wheel would pick up with the rest of build_lib.
        (Path(self.build_lib) / "memhook" / "_ffi_build.py").unlink(missing_ok=True)


# The oldest Python the stable-ABI extension runs on: pyproject's requires-python.
LIMITED_API_TAG = "cp39"


if bdist_wheel is not None:  # (pyproject's build requires a setuptools that has it)
    class BdistWheelAbi3(bdist_wheel):
        """Tag the wheel cp39-abi3-<platform> when the extension is built for the
        stable ABI, as cffi does by default on CPython (``_native.abi3.so``).

        Nothing else in the wheel depends on the Python version: libmemhook.so and
        the simulator are plain C libraries.  Where cffi cannot use the limited API
        (a debug or free-threaded CPython) the extension is version-specific, and
        so is the tag bdist_wheel picks by itself."""

        def get_tag(self) -> tuple[str, str, str]:
            ext_cmd = self.get_finalized_command("build_ext")
            if any(out.endswith(".abi3.so") for out in ext_cmd.get_outputs()):
                self.py_limited_api = LIMITED_API_TAG
            return tuple(super().get_tag())  # type: ignore[return-value]


commands = {"build_ext": BuildNativeThenExt, "build_py": BuildPyWithoutBuildScript}
if bdist_wheel is not None:
    commands["bdist_wheel"] = BdistWheelAbi3

setup(
    cffi_modules=["memhook/_ffi_build.py:ffibuilder"],
    cmdclass=commands,
)
