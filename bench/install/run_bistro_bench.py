#!/usr/bin/env python3
"""Build and run the bistro benchmarks against the in-tree libmemhook.so.

    python bench/install/run_bistro_bench.py          # after `pip install -e .`
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORE = ROOT / "memhook"


def main() -> int:
    if not (CORE / "libmemhook.so").exists():
        print("build first: pip install -e .", file=sys.stderr)
        return 1
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("bistro_call_overhead", "bistro_install"):
            exe = Path(tmp) / name
            subprocess.run([cc, "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                            f"-I{ROOT / 'csrc' / 'include'}", str(HERE / f"{name}.c"),
                            str(HERE / "bistro_bench_fixtures.S"), "-o", str(exe),
                            f"-L{CORE}", "-lmemhook", f"-Wl,-rpath,{CORE}", "-rdynamic"],
                           check=True)
            print(f"== {name}", flush=True)
            subprocess.run([str(exe), *sys.argv[1:2]], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
