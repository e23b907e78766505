"""A C program finds memhook's header and library the way C projects expect:
``memhook config --cflags --libs`` and pkg-config (memhook.pc), from the
install (the headers ship in the package: memhook/include/memhook/), not
from the source tree.  examples/c/regcache.c built both ways runs on the
simulator with no LD_PRELOAD and no LD_LIBRARY_PATH for the core: the
rpath of ``--libs`` finds it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from memhook_testing import HAVE_CC, ROOT

import memhook
import memhook.sim

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler")

REGCACHE = ROOT / "examples" / "c" / "regcache.c"


def _config(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memhook", "config", *flags],
                          capture_output=True, text=True, timeout=120)


def _words(*flags: str) -> list[str]:
    proc = _config(*flags)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout)


def _build_and_run(cflags: list[str], libs: list[str], out: Path) -> str:
    # The source in a folder of its own: no -I of the checkout can help.
    src = out.parent / "regcache.c"
    shutil.copyfile(REGCACHE, src)
    cmd = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", *cflags, str(src), *libs,
           "-ldl", "-lpthread", "-o", str(out)]
    built = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent, timeout=300)
    assert built.returncode == 0, f"{shlex.join(cmd)}\n{built.stderr}"
    env = memhook.sim.environ()  # the simulator's folder: the driver, not the core
    env.pop("LD_PRELOAD", None)
    proc = subprocess.run([str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}{proc.stderr}"
    got = dict(re.findall(r"(\w+)=(\d+)", proc.stdout))
    assert got.get("ok") == "1", proc.stdout
    assert (got["registrations"], got["misses"], got["hits"], got["uncached"]) == \
        ("9", "9", "800", "1"), proc.stdout
    return proc.stdout


def test_folders_are_this_installs() -> None:
    lib = Path(memhook.library_path())
    includes, libdir, pcdir = (Path(p) for p in
                               _config("--includes", "--libdir", "--pkgconfigdir").stdout.split())
    assert libdir == lib.parent
    assert (includes / "memhook" / "memhook.h").is_file()
    assert (includes / "memhook" / "cuda_abi.h").is_file()
    assert (pcdir / "memhook.pc").is_file()
    # The shipped header is the source's, byte for byte.
    assert (includes / "memhook" / "memhook.h").read_bytes() == \
        (ROOT / "csrc" / "include" / "memhook" / "memhook.h").read_bytes()
    assert _words("--cflags", "--libs") == [
        f"-I{includes}", f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lmemhook"]


def test_regcache_builds_and_runs_with_memhook_config(tmp_path: Path) -> None:
    _build_and_run(_words("--cflags"), _words("--libs"), tmp_path / "regcache")


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="needs pkg-config")
def test_regcache_builds_and_runs_with_pkg_config(tmp_path: Path) -> None:
    env = dict(os.environ, PKG_CONFIG_PATH=_words("--pkgconfigdir")[0])
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "memhook"], capture_output=True,
                        text=True, env=env, timeout=60)
    assert pc.returncode == 0, pc.stderr
    version = subprocess.run(["pkg-config", "--modversion", "memhook"], capture_output=True,
                             text=True, env=env, timeout=60)
    assert version.stdout.strip() == memhook.__version__
    words = shlex.split(pc.stdout)
    _build_and_run([w for w in words if w.startswith("-I")],
                   [w for w in words if not w.startswith("-I")], tmp_path / "regcache")


@pytest.mark.parametrize("argv", [[], ["--cflag"], ["--libs", "--static"]])
def test_usage_errors_name_the_valid_flags(argv: list[str]) -> None:
    proc = _config(*argv)
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    for flag in ("--cflags", "--libs", "--includes", "--libdir", "--pkgconfigdir"):
        assert flag in proc.stderr, proc.stderr
