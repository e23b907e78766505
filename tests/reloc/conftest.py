"""Fixtures for the reloc (GOT/PLT rewriting) tests.

The session builds tests/reloc/fixtures/*.c into one folder:

    libmhtarget.so     mh_target (hooked), mh_target2, target_next()
    libmhtarget2.so    a second mh_target2, after libmhtarget in load order
    libmhplugindep.so  dependency of libmhplugin.so
    libmhplugin.so     dlopen'ed after install
    libmhloader.so     RUNPATH=$ORIGIN/runpath, dlopen's libmhonly.so by name
    runpath/libmhonly.so
    libmhcudahooks.so  installs cuMemAlloc_v2/cuMemFree_v2 hooks in a constructor

and the C drivers on top of them (`got_driver` in every link flavour,
`stress`, `gpa_driver`, `cuda_app_shared`, `cuda_app_static`).  The drivers
check and print; the tests read their output, so no Python interpreter GOT
is involved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reloc_testing import GOT_VARIANTS

FIXTURES = Path(__file__).resolve().parent / "fixtures"

class RelocBuild:
    def __init__(self, native, out: Path) -> None:
        self.native = native
        self.dir = out
        self.core_dir = native.core.parent

    def lib(self, name: str, src: str, *extra: str, where: Path | None = None) -> Path:
        out = (where or self.dir) / name
        self.native.compile(FIXTURES / src, out, extra=[
            "-shared", "-fPIC", f"-Wl,-soname,{name}", f"-L{self.dir}",
            "-Wl,-rpath,$ORIGIN", *extra])
        return out

    def exe(self, name: str, src: str, *extra: str) -> Path:
        out = self.dir / name
        self.native.compile(FIXTURES / src, out, extra=[
            *extra, f"-L{self.dir}", f"-Wl,-rpath,{self.dir}",
            f"-L{self.core_dir}", f"-Wl,-rpath,{self.core_dir}", "-ldl", "-lpthread"])
        return out


@pytest.fixture(scope="session")
def reloc_build(native, c_test_dir: Path) -> RelocBuild:
    out = c_test_dir / "reloc"
    (out / "runpath").mkdir(parents=True, exist_ok=True)
    b = RelocBuild(native, out)
    b.lib("libmhtarget.so", "target.c", "-ldl")
    b.lib("libmhtarget2.so", "target2.c")
    b.lib("libmhplugindep.so", "plugindep.c", "-lmhtarget")
    b.lib("libmhplugin.so", "plugin.c", "-lmhplugindep", "-lmhtarget")
    b.lib("libmhonly.so", "only.c", "-lmhtarget", where=out / "runpath")
    b.lib("libmhloader.so", "loader.c", "-ldl", "-Wl,--enable-new-dtags",
          "-Wl,-rpath,$ORIGIN/runpath")
    b.lib("libmhcudahooks.so", "cuda_hooks.c", f"-L{b.core_dir}", "-lmemhook",
          f"-Wl,-rpath,{b.core_dir}")
    return b


@pytest.fixture(scope="session")
def got_driver(reloc_build: RelocBuild):
    built: dict[str, Path] = {}

    def get(variant: str) -> Path:
        if variant not in built:
            # -lmemhook last: objects after libmhtarget in load order are
            # libmhtarget2, libmhloader, then memhook (RTLD_NEXT checks).
            built[variant] = reloc_build.exe(
                f"got_driver_{variant}", "got_driver.c", *GOT_VARIANTS[variant],
                "-Wl,--no-as-needed", "-lmhtarget", "-lmhtarget2", "-lmhloader", "-lmemhook")
        return built[variant]
    return get
