#!/usr/bin/env python3
"""The driver's pointer-attribute calls: the driver alone beside memhook's
answers (``MEMHOOK_POINTER_ATTRIBUTES=1``), in one process.

    python bench/queries/pointer_attr_bench.py [CALLS] [MODE]   # after `pip install -e .`
    python bench/queries/pointer_attr_bench.py [CALLS] [MODE] --core DIR --core . --repeat 3

Builds bench/queries/pointer_attr_bench.c against the tree's header and
libmemhook.so and runs it as ``memhook run --pointer-attributes`` would:
the core in LD_PRELOAD, the hooks installed at load in MODE (default
bistro,reloc), the simulator as the driver (memhook.sim.environ()), or the
real driver with MEMHOOK_BENCH_REAL_DRIVER=1.  It prints, per call and
pointer (malloc'd host memory, a device allocation), the ns of
cuPointerGetAttribute(MEMORY_TYPE), of cuPointerGetAttributes(MEMORY_TYPE,
DEVICE_ORDINAL, RANGE_START_ADDR, RANGE_SIZE), of the six attributes
libcudart 13 asks, and of cudaPointerGetAttributes, through the real entry
(memhook_hooks_original) and through memhook.  CALLS (200,000) per round.

``--core DIR`` runs the core in DIR instead (a ``csrc/build_native.py OUT``
build: OUT/memhook, or the folder holding libmemhook.so and sim/lib/; ``.``
is this tree's package); given several times, the cores take turns, each
``--repeat`` times (interleaved: A B A B ...), the load average printed
before each run, so an older build is compared with this one on the same
box at the same time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import memhook
import memhook.sim

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def core_lib(folder: str) -> Path:
    """libmemhook.so of a --core argument (its simulator beside it in sim/lib/)."""
    if folder == ".":
        return Path(memhook.library_path())
    base = Path(folder)
    for cand in (base / "libmemhook.so", base / "memhook" / "libmemhook.so"):
        if cand.is_file():
            return cand.resolve()
    raise SystemExit(f"--core {folder}: no libmemhook.so there or in {folder}/memhook")


def run_one(exe: Path, lib: Path, calls: str, mode: str, real: bool) -> int:
    env = dict(os.environ) if real else memhook.sim.environ()
    sim_lib = lib.parent / "sim" / "lib"
    paths = [str(lib.parent)]
    if not real and sim_lib.is_dir():
        paths.append(str(sim_lib))  # (the core's own simulator first)
    paths += [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    env.update(LD_PRELOAD=str(lib), LD_LIBRARY_PATH=":".join(paths),
               MEMHOOK_INSTALL_AT_LOAD="1", MEMHOOK_POINTER_ATTRIBUTES="1", MEMHOOK_CUDA_MODE=mode)
    return subprocess.run([str(exe), calls], env=env).returncode


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("calls", nargs="?", default="200000")
    ap.add_argument("mode", nargs="?", default="bistro,reloc")
    ap.add_argument("--core", action="append", default=[],
                    help="folder of the core to run (repeatable; default: this tree's)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each core, interleaved")
    args = ap.parse_args(argv)
    cores = [core_lib(c) for c in (args.core or ["."])]
    real = bool(os.environ.get("MEMHOOK_BENCH_REAL_DRIVER"))
    rc = 0
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "pointer_attr_bench"
        # (linked to this tree's core for the header's testing symbols; the
        # core in LD_PRELOAD is the one that runs)
        lib = Path(memhook.library_path())
        subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        f"-I{ROOT / 'csrc' / 'include'}", str(HERE / "pointer_attr_bench.c"),
                        "-o", str(exe), f"-L{lib.parent}", "-lmemhook", "-ldl"],
                       check=True)
        for turn in range(args.repeat):
            for core in cores:
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                print(f"== core {core} (run {turn + 1} of {args.repeat}); driver: "
                      f"{'real' if real else 'simulator'}; mode {args.mode}; load average {load}",
                      flush=True)
                rc |= run_one(exe, core, args.calls, args.mode, real)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
