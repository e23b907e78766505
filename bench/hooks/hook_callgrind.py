#!/usr/bin/env python3
"""Instructions the hooks add per alloc+free pair, counted by callgrind.

hook_bench.py times the stub pair; on a shared box with no hardware counters
those ns move with the neighbours' load.  An instruction count does not: this
runs hook_bench (the stub driver, one thread, no drainer: the queue is
drained after each round, outside the count) under
``valgrind --tool=callgrind``, collecting only inside hook_bench's pair loop
and cutting the profile at every install and uninstall, so that one part
holds the unhooked pairs and the next the hooked ones.  Each figure is the
part's instructions divided by its pairs (the round's and its warm-up's).

    python bench/hooks/hook_callgrind.py                     # this package's core
    python bench/hooks/hook_callgrind.py --core A --core B   # cores side by side

A core folder holds libmemhook.so (a build of another commit:
``python csrc/build_native.py OUT --only memhook`` gives OUT/memhook/).
Instruction counts say nothing of stalls (the locked instruction, a line
taken back from the drainer's core): read them beside hook_bench's timings.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hook_bench  # noqa: E402  (its build of the bench and the stub driver)

__all__ = ["count"]


def _parts(out_prefix: Path) -> list[int]:
    """The instruction totals of the profile's parts, in order (part 1 first)."""
    found: list[tuple[int, int]] = []
    for f in out_prefix.parent.glob(out_prefix.name + ".*"):
        m = re.fullmatch(re.escape(out_prefix.name) + r"\.(\d+)", f.name)
        if m is None:
            continue
        text = f.read_text(errors="replace")
        t = re.search(r"^totals:\s*(\d+)", text, re.M) or re.search(r"^summary:\s*(\d+)", text, re.M)
        found.append((int(m.group(1)), int(t.group(1)) if t else 0))
    return [v for _, v in sorted(found)]


def count(exe: Path, stub: Path, core: Path, api: str, mode: str, pairs: int,
          extra: list[str], tmp: Path) -> tuple[float, float]:
    """(unhooked, hooked) instructions per pair of `api` in `mode`."""
    prefix = tmp / f"cg.{abs(hash((str(core), api, mode, tuple(extra))))}"
    cmd = ["valgrind", "--tool=callgrind", "--smc-check=all", "--collect-atstart=no",
           "--toggle-collect=run_pairs_via", "--dump-before=memhook_hooks_install",
           "--dump-before=memhook_hooks_uninstall", f"--callgrind-out-file={prefix}",
           str(exe), "--libcuda", str(stub), "--libmemhook", str(core / "libmemhook.so"),
           "--api", api, "--modes", mode, "--threads", "1", "--rounds", "1",
           "--pairs", str(pairs), "--no-drain", "--no-profile", "--no-paired", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or "EVENTS MISMATCH" in proc.stdout:
        raise SystemExit(f"hook_bench under callgrind failed ({proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    parts = _parts(prefix)
    # Round 0 runs the unhooked side first: part 1 up to the install, part 2
    # the hooked round up to the uninstall.
    if len(parts) < 2:
        raise SystemExit(f"expected 2 parts, got {parts}")
    per_round = pairs + pairs // 20 + 1  # hook_bench's warm-up pairs first
    return parts[0] / per_round, parts[1] / per_round


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", action="append", type=Path,
                    help="folder with libmemhook.so (repeatable; default: the package)")
    ap.add_argument("--api", default="sync,async")
    ap.add_argument("--modes", default="bistro,reloc")
    ap.add_argument("--pairs", type=int, default=10000)
    ap.add_argument("--exact", action="store_true", help="exact sizes (hook_bench --exact)")
    ap.add_argument("--precise", action="store_true", help="precise stamps (hook_bench --precise)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    cores = args.core or [HERE.parent.parent / "memhook"]
    extra = (["--exact"] if args.exact else []) + (["--precise"] if args.precise else [])
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        exe, stub = hook_bench.build(os.environ.get("CC", "cc"), tmp)
        print(f"instructions per alloc+free pair, stub driver, 1 thread, {args.pairs} pairs "
              f"(+ warm-up){' ' + ' '.join(extra) if extra else ''}")
        print(f"{'core':40} {'pair':6} {'mode':7} {'unhooked':>9} {'hooked':>9} {'added':>8}")
        for core in cores:
            for api in args.api.split(","):
                for mode in args.modes.split(","):
                    un, ho = count(exe, stub, core.resolve(), api, mode, args.pairs, extra, tmp)
                    print(f"{str(core)[-40:]:40} {api:6} {mode:7} {un:9.1f} {ho:9.1f} "
                          f"{ho - un:8.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
