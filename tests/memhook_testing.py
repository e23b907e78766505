"""Shared test helpers: where the native libraries are, and how to compile C.

Imported by tests as ``from memhook_testing import ...`` (a unique module
name: several test folders have a conftest.py of their own).

By default the tests use the libraries of the installed package (the README's
install command builds them).  With ``MEMHOOK_TEST_SANITIZE=address,undefined``
the session instead builds the whole native tree with those sanitizers into a
scratch folder, and every C test program is compiled with them too, so the
same tests run under ASan/UBSan:

    MEMHOOK_TEST_SANITIZE=address,undefined pytest tests/sim

Native builds the tests make themselves (a sanitizer build of the tree, the
objects of the core compiled into a test harness) are made once per session
and kept in a scratch folder under a hash of what went into them (the
sources and headers, the flags, the compiler), so a test that needs the same
build again, or a copy of csrc/ with one file changed, compiles only what
differs.  A pytest the suite starts itself is handed that folder in
MEMHOOK_TEST_BUILD_CACHE and shares it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fcntl
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from memhook import HookReport

__all__ = ["BUILD_CACHE_ENV", "CSRC", "HAVE_CC", "NativeBuild", "ObjectCache", "ROOT", "SANITIZE",
           "build_native", "cached_native_build", "core_objects", "hooks_installed",
           "hooks_installed_module", "run_checked", "sanitized_core",
           "skip_unless_traced_programs_build"]

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
sys.path.insert(0, str(CSRC))
import build_native  # noqa: E402

SANITIZE = os.environ.get("MEMHOOK_TEST_SANITIZE", "")
BUILD_CACHE_ENV = "MEMHOOK_TEST_BUILD_CACHE"


@dataclasses.dataclass(frozen=True)
class NativeBuild:
    """Where one build of the native tree lives, and how to use it."""

    root: Path                 # folder holding memhook/...
    sanitize: str              # "" or e.g. "address,undefined"

    @property
    def core(self) -> Path:
        return self.root / "memhook" / "libmemhook.so"

    @property
    def sim_dir(self) -> Path:
        return self.root / "memhook" / "sim" / "lib"

    @property
    def libcuda(self) -> Path:
        return self.sim_dir / "libcuda.so.1"

    def cflags(self) -> list[str]:
        flags = ["-std=c11", "-D_GNU_SOURCE", "-g", "-O1", "-Wall", "-Wextra", "-Werror",
                 f"-I{CSRC / 'include'}", f"-I{self.sim_dir}"]
        if self.sanitize:
            flags += [f"-fsanitize={self.sanitize}", "-fno-omit-frame-pointer",
                      "-fno-sanitize-recover=all"]
        return flags

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a child that runs on this build's simulator."""
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(self.sim_dir), *[p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]])
        if self.sanitize:
            # Children that fork+exec and the forked-child checks would
            # otherwise report the deliberately leaked parent state.
            env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
            env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        env.update(extra)
        preload = env.get("LD_PRELOAD", "")
        if "address" in self.sanitize and preload:
            # ASan's runtime must come first in the initial library list,
            # before a preloaded (sanitized) core.
            runtime = _asan_runtime()
            if runtime and not preload.startswith(runtime):
                env["LD_PRELOAD"] = f"{runtime}:{preload}"
        return env

    def compile(self, sources: list[Path] | Path, out: Path, *, cc: str = "cc",
                extra: list[str] | None = None, std: str | None = None) -> Path:
        """Compile and link a C (or C++) test program; fails the test on error."""
        srcs = [sources] if isinstance(sources, Path) else list(sources)
        flags = self.cflags()
        if std is not None:
            flags = [f for f in flags if not f.startswith("-std=")] + [f"-std={std}"]
        cmd = [cc, *flags, *map(str, srcs), "-o", str(out), *(extra or [])]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"compile failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        return out

    def run(self, cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 120,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run a test program on this build's simulator; fail with its output
        when it exits non-zero."""
        return run_checked(cmd, env=self.env() if env is None else env, timeout=timeout, cwd=cwd)


@functools.lru_cache(maxsize=None)
def _asan_runtime() -> str:
    """The compiler's ASan runtime (its path, or "" where it has none)."""
    proc = subprocess.run(["cc", "-print-file-name=libasan.so"], capture_output=True, text=True)
    path = proc.stdout.strip()
    return path if proc.returncode == 0 and os.path.isabs(path) else ""


def run_checked(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 120,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a test program; fail with its whole output when it exits non-zero."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} exited {proc.returncode}\n"
                    f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc


HAVE_CC = shutil.which("cc") is not None


def skip_unless_traced_programs_build(native: NativeBuild) -> None:
    """Skip a fixture that builds C programs for `memhook trace` to run,
    where that cannot work here."""
    import pytest

    if not HAVE_CC:
        pytest.skip("no C compiler")
    if native.sanitize:
        pytest.skip("memhook trace preloads the installed core, and a sanitizer build's "
                    "programs need their runtime first in the library list")


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(repr(part).encode() if not isinstance(part, bytes) else part)
        h.update(b"\0")
    return h.hexdigest()


def _tree_digest(folder: Path, suffixes: tuple[str, ...]) -> str:
    """Every file under ``folder`` with one of the suffixes: names and bytes."""
    files = sorted(p for p in folder.rglob("*")
                   if p.suffix in suffixes and p.is_file() and "__pycache__" not in p.parts)
    return _digest(*(x for p in files for x in (p.relative_to(folder).as_posix(), p.read_bytes())))


def _compiler_env() -> tuple[str, ...]:
    """What build_native reads from the environment besides its arguments."""
    return tuple(os.environ.get(k, "") for k in ("CC", "MEMHOOK_DEBUG", "MEMHOOK_SANITIZE"))


def cached_native_build(cache: Path, sanitize: str, only: tuple[str, ...] | None = None
                        ) -> NativeBuild:
    """build_native.build_all(sanitize, only) of csrc/ as it is now, made once:
    a later call with the same sources, arguments and compiler settings gets
    the same folder (the build writes only $ORIGIN-relative paths, so it is
    made aside and moved into place whole)."""
    key = _digest(_tree_digest(CSRC, (".c", ".h", ".S", ".py")), sanitize, only, _compiler_env())
    root = cache / f"native-{key[:20]}"
    if (root / ".complete").exists():
        return NativeBuild(root, sanitize)
    # Another pytest sharing the cache (an xdist worker, or a child pytest
    # started while this one builds) waits for the build under way instead
    # of making a second one in the same scratch folder.
    with open(cache / f"native-{key[:20]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".complete").exists():
            scratch = cache / f"native-{key[:20]}.partial"
            shutil.rmtree(scratch, ignore_errors=True)
            build_native.build_all(scratch, sanitize=sanitize, only=only)
            (scratch / ".complete").write_text(f"sanitize={sanitize!r} only={only!r}\n")
            shutil.rmtree(root, ignore_errors=True)
            os.replace(scratch, root)
    return NativeBuild(root, sanitize)


def sanitized_core(cache: Path, sanitize: str) -> NativeBuild:
    """The session's build of the core under ``sanitize``: for ASan+UBSan the
    whole tree (tests/sim/test_sanitized.py's pytest runs on it too), for
    another sanitizer the core alone."""
    return cached_native_build(cache, sanitize,
                               None if sanitize == "address,undefined" else ("libmemhook",))


def core_objects(build: NativeBuild) -> list[Path]:
    """The objects libmemhook.so of a cached_native_build was linked from
    (build_native keeps them under <root>/.memhook-obj/<target name>)."""
    core = build_native.TARGETS[0]
    objects = sorted((build.root / ".memhook-obj" / core.name.replace("/", "_")).glob("*.o"))
    assert objects, f"no objects of {core.name} under {build.root}"
    return objects


class ObjectCache:
    """C objects compiled once per session: ``compile`` returns one object per
    source, compiling (in parallel, one job per CPU) only those whose source,
    flags or visible headers (those under the -I folders and beside the
    source) it has not seen.  A copy of a source tree shares the objects of
    the files it did not change: the tree's own path is left out of the key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def compile(self, sources: list[Path], flags: list[str], *, tree: Path) -> list[Path]:
        """Objects of ``sources`` compiled with ``cc flags -c``; ``tree`` is the
        source tree, whose path in the flags and names is a placeholder in
        the key."""
        def generic(text: str) -> str:
            return text.replace(str(tree), "<tree>")

        seen: dict[tuple[Path, bool], str] = {}

        def headers(folder: Path, deep: bool) -> str:
            if (folder, deep) not in seen:
                files = sorted(folder.rglob("*.h") if deep else folder.glob("*.h"))
                seen[folder, deep] = _digest(*(x for f in files
                                               for x in (generic(str(f)), f.read_bytes())))
            return seen[folder, deep]

        visible = _digest(*(headers(Path(f[2:]), True) for f in flags if f.startswith("-I")))
        jobs: list[tuple[Path, Path]] = []
        objects = []
        for src in sources:
            key = _digest(generic(str(src)), src.read_bytes(), list(map(generic, flags)), visible,
                          headers(src.parent, False), os.environ.get("CC", "cc"))
            obj = self.folder / f"{src.stem}-{key[:20]}.o"
            objects.append(obj)
            if not obj.exists():
                jobs.append((src, obj))
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for failed in filter(None, pool.map(lambda job: self._cc(flags, *job), jobs)):
                pytest.fail(failed)
        return objects

    @staticmethod
    def _cc(flags: list[str], src: Path, obj: Path) -> str | None:
        tmp = obj.with_name(f"{obj.name}.{os.getpid()}.tmp")  # (xdist workers share the folder)
        cmd = [*shlex.split(os.environ.get("CC", "cc")), *flags, "-c", str(src),
               "-o", str(tmp)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            return f"compile failed: {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
        os.replace(tmp, obj)
        return None


def _feeder_parked() -> bool:
    """Whether memhook's background feeder thread, if it runs, waits in its
    park (memhook._events.feeder._park) for an install or a query's wake:
    events recorded now stay pending until a query or flush() takes them."""
    from memhook._events import feeder

    thread = feeder._thread
    if thread is None or not thread.is_alive():
        return True
    if feeder._wake.is_set():  # woken (by an install), if not yet scheduled
        return False
    frame = sys._current_frames().get(thread.ident or 0)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return bool(names) and names[0] == "wait" and "_park" in names


def _hooks_installed() -> Iterator[HookReport]:
    """The hooks installed in this process, as the field runs memhook;
    yields install()'s HookReport.  (The fixtures hooks_installed, for one
    test, and hooks_installed_module, for a module whose tests all run
    with them: each install leaves behind a wait for the feeder to park.)

    A test that records regions in the process cache by hand and expects the
    queries to answer from them depends on the hooks vouching for them: with
    no hooks in, a query asks the driver wherever one is loaded and
    initialised (DESIGN.md section 4), and an earlier test in the same
    process (a CUDA tensor, the simulator's cuInit) may have initialised one.
    Record the regions after this fixture has run: one recorded in an
    earlier install period is not vouched for.  Uninstalled after the test
    unless the hooks were in before it, and the process is left as the test
    found it: the UNKNOWN marks an install over an initialised driver puts
    on the ranges CUDA has reserved are removed from the process cache, and
    the background feeder has parked again (until it notices the uninstall
    it drains what a later test records, which counts its own drains)."""
    import memhook
    from memhook.cache import process_cache

    was_installed = bool(memhook.status().mode)
    if was_installed:
        report, marks = memhook.status(), []
    else:
        cache = process_cache()
        before = set(cache.regions())
        report = memhook.install()
        marks = [r for r in cache.regions() if r not in before]
    assert report.mode, f"install() installed no hooks (MEMHOOK_CUDA_MODE=none?): {report}"
    try:
        yield report
    finally:
        if not was_installed:
            memhook.uninstall()
            for r in marks:
                cache.remove(r.start, r.size)
            deadline = time.monotonic() + 60
            while not _feeder_parked():
                assert time.monotonic() < deadline, "the feeder did not park after uninstall()"
                time.sleep(0.001)


hooks_installed = pytest.fixture(_hooks_installed, name="hooks_installed")
hooks_installed_module = pytest.fixture(_hooks_installed, scope="module",
                                        name="hooks_installed_module")
