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

``--callgrind`` counts instead of timing: instructions per call under
valgrind's callgrind (the simulator only, its device memory made small
enough for valgrind), per core, for each call and pointer, the driver's
beside memhook's - a figure the box's load does not move.  Its ``-held``
rows ask while another thread holds the drain and a third's events wait
unfed elsewhere (what a busy allocating thread leaves); its ``-rot`` rows,
and the timed "8 in turn" rows, ask the four attributes of 8 buffers in
turn, as a transport's ring of buffers does, not one pointer again and
again.
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


_COUNTED = [f"{call}:{where}" for call in ("get", "gets", "runtime6", "cuda")
            for where in ("host", "device")]
# ... and the first two while another thread holds the drain, with other
# threads' events waiting unfed (none about the pointer asked).
_COUNTED += [f"{call}:{where}-held" for call in ("get", "gets") for where in ("host", "device")]
# ... and the four over 8 buffers asked in turn (a transport's ring; host
# buffers all lie in memory no allocation holds, device ones are 8 regions).
_COUNTED += [f"gets:{where}-rot" for where in ("host", "device")]


def callgrind(exe: Path, lib: Path, mode: str, calls: int = 20000) -> None:
    """Instructions per call of each case, driver and memhook, under callgrind."""
    print(f"{'instructions per call (callgrind)':44s} {'driver':>10s} {'memhook':>10s}")
    with tempfile.TemporaryDirectory() as tmp:
        for case in _COUNTED:
            row = []
            for who in ("driver", "memhook"):
                env = memhook.sim.environ()
                env.update(LD_PRELOAD=str(lib), MEMHOOK_INSTALL_AT_LOAD="1",
                           MEMHOOK_POINTER_ATTRIBUTES="1", MEMHOOK_CUDA_MODE=mode,
                           MEMHOOK_SIM_DEVICE_MEMORY="64M",
                           LD_LIBRARY_PATH=":".join([str(lib.parent), str(lib.parent / "sim" / "lib"),
                                                     env.get("LD_LIBRARY_PATH", "")]))
                out = Path(tmp) / f"cg.{who}.{case.replace(':', '.')}"
                proc = subprocess.run(
                    ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                     "--toggle-collect=count_calls", "--toggle-collect=count_rot", str(exe), str(calls), "count",
                     f"{who}:{case}"], env=env, capture_output=True, text=True)
                total = None
                if proc.returncode == 0 and out.is_file():
                    for line in out.read_text().splitlines():
                        if line.startswith("totals:") or line.startswith("summary:"):
                            total = int(line.split()[1])
                row.append(f"{total / calls:10.1f}" if total else f"{'-':>10s}")
            print(f"{case.replace(':', ' '):44s} {row[0]} {row[1]}", flush=True)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("calls", nargs="?", default="200000")
    ap.add_argument("mode", nargs="?", default="bistro,reloc")
    ap.add_argument("--core", action="append", default=[],
                    help="folder of the core to run (repeatable; default: this tree's)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each core, interleaved")
    ap.add_argument("--callgrind", action="store_true",
                    help="instructions per call under callgrind (the simulator), not ns")
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
                        "-o", str(exe), f"-L{lib.parent}", "-lmemhook", "-ldl", "-lpthread"],
                       check=True)
        for turn in range(args.repeat):
            for core in cores:
                load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                print(f"== core {core} (run {turn + 1} of {args.repeat}); driver: "
                      f"{'real' if real else 'simulator'}; mode {args.mode}; load average {load}",
                      flush=True)
                if args.callgrind:
                    callgrind(exe, core, args.mode)
                else:
                    rc |= run_one(exe, core, args.calls, args.mode, real)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
