#!/usr/bin/env python3
"""What caller attribution adds to an event (issue 18's goal: <= 2 ns where
the return address is enough), beside the same event without it, in one
run: builds bench/hooks/caller_bench.c with csrc/cuda/caller.c and runs it.

    python bench/hooks/caller_bench.py            # 20M events a round
    python bench/hooks/caller_bench.py --quick    # 2M
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "csrc"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cc", default="cc")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "caller_bench"
        subprocess.run([args.cc, "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        "-fno-omit-frame-pointer", f"-I{CSRC / 'include'}", f"-I{CSRC / 'core'}", f"-I{CSRC / 'cuda'}",
                        str(HERE / "caller_bench.c"), str(CSRC / "cuda" / "caller.c"),
                        str(CSRC / "core" / "mh_frames.c"),
                        str(CSRC / "core" / "mh_hook_thread.c"),
                        "-o", str(exe), "-lpthread"], check=True)
        n = "2000000" if args.quick else "20000000"
        return subprocess.run([str(exe), n]).returncode


if __name__ == "__main__":
    sys.exit(main())
