"""Build memhook's native parts: the core library and the CUDA simulator.

setup.py calls :func:`build_all` from its ``build_ext`` step; the tests call it
too, to build sanitizer flavours into a scratch folder.  The build is plain
``cc`` invocations (no make, no cmake) because the whole native tree is a
handful of small C files with the same flags, and this keeps ``pip install``
free of build tools other than a C compiler.

Outputs, relative to ``out_root`` (the folder that holds the ``memhook``
package)::

    memhook/libmemhook.so                  the core: all hook state
    memhook/sim/lib/libcuda.so.1           simulated driver
    memhook/sim/lib/libcudart.so.13        simulated runtime (soname)
    memhook/sim/lib/libcudart.so           dev-name shim that needs .so.13
    memhook/sim/lib/libcudart_static.a     simulated runtime, static
    memhook/sim/lib/cudart_sim.h           the runtime's prototypes
    memhook/include/memhook/*.h            the C API's headers (memhook.h, cuda_abi.h)
    memhook/pkgconfig/memhook.pc           pkg-config's file, paths relative to itself

Environment:
    CC                   compiler (default ``cc``)
    MEMHOOK_SANITIZE     e.g. ``address,undefined``: build with sanitizers
    MEMHOOK_DEBUG=1      -O0 instead of -O2 (and setup.py keeps debug info)

Debug info (``-g``) is on by default, for the in-place build a developer
debugs and the tests' scratch builds (sanitizer reports name lines);
setup.py turns it off (``debug_info=False``) for a wheel, whose files must
not carry the build machine's source paths, and are a quarter to two
fifths of the size without it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["STRIP_DEBUG", "Target", "TARGETS", "build_all", "compile_flags", "link_flags"]

CSRC = Path(__file__).resolve().parent
INCLUDE = CSRC / "include"

WARNINGS = ["-Wall", "-Wextra", "-Werror"]
# The linker's "leave out debug info" (GNU ld, gold and lld all take it).
STRIP_DEBUG = "-Wl,--strip-debug"


@dataclasses.dataclass(frozen=True)
class Target:
    """One native artefact: a shared library or a static archive."""

    name: str                 # output path relative to out_root
    sources: tuple[str, ...]  # globs relative to csrc/
    kind: str = "shared"      # "shared" | "static"
    soname: str | None = None
    libs: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ()
    rpath_origin: bool = False
    needed: tuple[str, ...] = ()  # extra sonames to record (shim libraries)


# The simulator's exported entry points are mostly thin wrappers; with tail
# calls GCC turns them into a lone 5-byte `jmp`, which no real NVIDIA entry
# point is and which bistro's 12-byte form cannot patch.  Without sibling-call
# optimisation every wrapper is a real call frame of at least 12 bytes, so the
# simulator is as patchable as libcuda/libcudart are (see the census).
# Without the second scheduling pass every entry opens with the classic frame
# setup, `push %rbp; mov %rsp,%rbp`, as NVIDIA's do (tests/data/
# nvidia-prologues.json); with it GCC moves argument set-up between the two
# (`push %rbp; xor %edx,%edx; mov %rsp,%rbp`), a shape no libcuda entry has
# and which UCX's entry patcher refuses, so UCX's bistro could not be tested
# beside memhook's on the simulator.
SIM_ENTRY_CFLAGS = ("-fno-optimize-sibling-calls", "-fno-omit-frame-pointer", "-fstack-protector-all",
                    "-fno-schedule-insns2")

TARGETS: tuple[Target, ...] = (
    Target(
        name="memhook/libmemhook.so",
        # What runs at load, and in which order, is csrc/cuda/startup_order.c's
        # one constructor: the link order carries no meaning.
        sources=("core/*.c", "queue/*.c", "bistro/*.c", "bistro/arch/x86_64/*.c", "reloc/*.c", "reloc/*.S", "cache/*.c",
                 "cuda/*.c", "trace/*.c"),
        soname="libmemhook.so",
        # nodelete: patched entry points, GOT slots and each thread's lane
        # destructor (csrc/queue/event_lane.c) point into it; a dlclose must
        # never unmap it.
        libs=("-ldl", "-lpthread", "-Wl,-z,nodelete"),
        includes=("core", "queue", "bistro", "reloc", "cache", "cuda", "trace"),
    ),
    Target(
        name="memhook/sim/lib/libcuda.so.1",
        sources=("sim/driver/*.c",),
        soname="libcuda.so.1",
        cflags=SIM_ENTRY_CFLAGS,
        libs=("-ldl", "-lpthread"),
        includes=("sim/driver",),
    ),
    Target(
        name="memhook/sim/lib/libcudart.so.13",
        sources=("sim/runtime/*.c",),
        soname="libcudart.so.13",
        cflags=SIM_ENTRY_CFLAGS,
        libs=("-ldl", "-lpthread"),
        includes=("sim/runtime",),
    ),
    Target(
        name="memhook/sim/lib/libcudart_static.a",
        sources=("sim/runtime/*.c",),
        kind="static",
        includes=("sim/runtime",),
        cflags=SIM_ENTRY_CFLAGS,
        defines=("MEMHOOK_CUDART_STATIC=1",),
    ),
)

# Files copied verbatim next to the built libraries: the simulator's header,
# and the C API's, where `memhook config --cflags` and memhook.pc point
# (`#include <memhook/memhook.h>`).
HEADERS = (("sim/runtime/include/cudart_sim.h", "memhook/sim/lib/cudart_sim.h"),
           ("include/memhook/memhook.h", "memhook/include/memhook/memhook.h"),
           ("include/memhook/cuda_abi.h", "memhook/include/memhook/cuda_abi.h"))

# pkg-config's file for the C API.  Every path is relative to the file's own
# folder (${pcfiledir}, which pkg-config and pkgconf both define), so the
# installed package may sit anywhere and move: a wheel cannot know its
# prefix.  memhook/pkgconfig/memhook.pc -> memhook/ (the library) and
# memhook/include/ (the headers).
PC_FILE = "memhook/pkgconfig/memhook.pc"
PC_TEXT = """\
prefix=${{pcfiledir}}/..
includedir=${{prefix}}/include
libdir=${{prefix}}

Name: memhook
Description: memory-type answers for CUDA pointers from memhook's hooks (libmemhook.so)
Version: {version}
Cflags: -I${{includedir}}
Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lmemhook
Libs.private: -ldl -lpthread
"""


def _write_pc(out_root: Path) -> Path:
    """memhook.pc, its Version the C API's own (memhook.h)."""
    header = (CSRC / "include" / "memhook" / "memhook.h").read_text(encoding="utf-8")
    found = re.search(r'#define MEMHOOK_VERSION_STRING "([^"]+)"', header)
    if found is None:
        raise RuntimeError("memhook.h defines no MEMHOOK_VERSION_STRING")
    dest = out_root / PC_FILE
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(PC_TEXT.format(version=found.group(1)), encoding="utf-8")
    return dest


def _cc() -> list[str]:
    return shlex.split(os.environ.get("CC", "cc"))


def _sanitize(sanitize: str | None) -> list[str]:
    value = sanitize if sanitize is not None else os.environ.get("MEMHOOK_SANITIZE", "")
    if not value:
        return []
    valid = {"address", "undefined", "thread", "leak"}
    parts = [p.strip() for p in value.split(",") if p.strip()]
    bad = [p for p in parts if p not in valid]
    if bad:
        raise ValueError(
            f"MEMHOOK_SANITIZE: unknown sanitizer(s) {bad!r}; valid: {sorted(valid)}"
        )
    return [f"-fsanitize={','.join(parts)}", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]


def compile_flags(target: Target | None = None, sanitize: str | None = None,
                  debug_info: bool = True) -> list[str]:
    """The C flags every native file is compiled with."""
    debug = os.environ.get("MEMHOOK_DEBUG") == "1"
    flags = [
        "-std=c11",
        "-D_GNU_SOURCE",
        "-fPIC",
        "-fvisibility=hidden",
        *(["-g"] if debug_info else []),
        "-O0" if debug else "-O2",
        *WARNINGS,
        f"-I{INCLUDE}",
    ]
    if target is not None:
        flags += [f"-I{CSRC / inc}" for inc in target.includes]
        flags += [f"-D{d}" for d in target.defines]
        flags += list(target.cflags)
    return flags + _sanitize(sanitize)


def link_flags(sanitize: str | None = None, debug_info: bool = True) -> list[str]:
    """The flags every shared library is linked with.  Without debug info
    the linker also drops any an input brought (a toolchain's start files)."""
    strip = [] if debug_info else [STRIP_DEBUG]
    return ["-Wl,-z,defs", "-Wl,-z,relro", "-Wl,-z,now", *strip] + _sanitize(sanitize)


def _sources(target: Target) -> list[Path]:
    found: list[Path] = []
    for pattern in target.sources:
        found.extend(sorted(CSRC.glob(pattern)))
    if not found:
        raise FileNotFoundError(f"{target.name}: no sources match {target.sources}")
    return found


def _run(cmd: list[str], verbose: bool) -> None:
    if verbose:
        print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"native build step failed ({proc.returncode}):\n  {' '.join(cmd)}\n"
            f"{proc.stdout}{proc.stderr}"
        )
    if proc.stderr.strip() and verbose:
        print(proc.stderr, file=sys.stderr)


def _build_target(target: Target, out_root: Path, obj_root: Path,
                  sanitize: str | None, pool: concurrent.futures.Executor,
                  verbose: bool, debug_info: bool) -> Path:
    out = out_root / target.name
    out.parent.mkdir(parents=True, exist_ok=True)
    obj_dir = obj_root / target.name.replace("/", "_")
    obj_dir.mkdir(parents=True, exist_ok=True)
    cflags = compile_flags(target, sanitize, debug_info)
    jobs = []
    objects = []
    for src in _sources(target):
        obj = obj_dir / (src.relative_to(CSRC).as_posix().replace("/", "_") + ".o")
        objects.append(obj)
        jobs.append(pool.submit(_run, [*_cc(), *cflags, "-c", str(src), "-o", str(obj)], verbose))
    for job in jobs:
        job.result()
    tmp = out.with_name(out.name + ".tmp")
    if target.kind == "static":
        if tmp.exists():
            tmp.unlink()
        _run(["ar", "rcs", str(tmp), *map(str, objects)], verbose)
    else:
        cmd = [*_cc(), "-shared", *cflags, *map(str, objects), "-o", str(tmp)]
        if target.soname:
            cmd.append(f"-Wl,-soname,{target.soname}")
        if target.rpath_origin:
            cmd.append("-Wl,-rpath,$ORIGIN")
        cmd += link_flags(sanitize, debug_info) + list(target.libs)
        _run(cmd, verbose)
    # Atomic replace: a process that has the old file mapped keeps it intact.
    os.replace(tmp, out)
    return out


def _build_cudart_shim(out_root: Path, obj_root: Path, sanitize: str | None,
                       verbose: bool, debug_info: bool) -> Path:
    """libcudart.so: the development name, as a shim that needs libcudart.so.13.

    A copy would be a second runtime with its own state whenever a process
    opens both names; a shim makes both names one runtime, the way NVIDIA's
    symlink does (wheels cannot carry symlinks)."""
    lib_dir = out_root / "memhook/sim/lib"
    stub = obj_root / "cudart_shim.c"
    stub.write_text("/* libcudart.so -> libcudart.so.13 (see build_native.py) */\n"
                    "typedef int memhook_cudart_shim;\n")
    tmp = lib_dir / "libcudart.so.tmp"
    _run([*_cc(), "-shared", "-fPIC", str(stub), "-o", str(tmp),
          "-Wl,-soname,libcudart.so", "-Wl,--no-as-needed",
          f"-L{lib_dir}", "-l:libcudart.so.13", "-Wl,-rpath,$ORIGIN",
          *([] if debug_info else [STRIP_DEBUG]), *_sanitize(sanitize)], verbose)
    out = lib_dir / "libcudart.so"
    os.replace(tmp, out)
    return out


def build_all(out_root: str | os.PathLike[str], obj_root: str | os.PathLike[str] | None = None,
              sanitize: str | None = None, verbose: bool = False,
              only: tuple[str, ...] | None = None, debug_info: bool = True) -> list[Path]:
    """Build every target into ``out_root``; returns the files written.

    ``only`` restricts the build to targets whose output name contains one of
    the given strings (e.g. ``("libmemhook",)``); the default builds all.
    ``debug_info=False``: no debug info in any file (a wheel's build)."""
    out_root = Path(out_root)
    obj_root = Path(obj_root) if obj_root else out_root / ".memhook-obj"
    obj_root.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for target in TARGETS:
            if only is None or any(key in target.name for key in only):
                written.append(_build_target(target, out_root, obj_root, sanitize, pool, verbose,
                                             debug_info))
    if only is not None and not any("cudart" in key for key in only):
        return written
    written.append(_build_cudart_shim(out_root, obj_root, sanitize, verbose, debug_info))
    for src, dst in HEADERS:
        dest = out_root / dst
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CSRC / src, dest)
        written.append(dest)
    written.append(_write_pc(out_root))
    return written


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_root", help="folder that will hold memhook/...")
    parser.add_argument("--sanitize", default=None)
    parser.add_argument("--only", action="append", help="build only targets matching this")
    parser.add_argument("--no-debug-info", action="store_true",
                        help="leave debug info out, as a wheel's build does")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    only = tuple(args.only) if args.only else None
    for path in build_all(args.out_root, sanitize=args.sanitize, verbose=args.verbose, only=only,
                          debug_info=not args.no_debug_info):
        print(path)
