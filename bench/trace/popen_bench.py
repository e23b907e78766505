#!/usr/bin/env python3
"""What ``memhook trace`` adds to ``popen()``: announcing the shell
(csrc/trace/trace_popen.c), beside glibc's ``_IO_popen`` in the same run.

    python bench/trace/popen_bench.py [--calls N] [--runs R]

Builds popen_bench.c and runs it R times each way: traced (``memhook trace
--sim``) and with the core preloaded but not tracing, calling ``popen``
(replaced by the core) and ``_IO_popen`` (the same glibc function under a
name the core does not replace).  Prints the median and minimum time for
popen to return, in microseconds.  Not tracing the two should not differ.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path(__file__).resolve().with_name("popen_bench.c")
CORE = ROOT / "memhook" / "libmemhook.so"


def run(cmd: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not CORE.exists():
        raise SystemExit(f"{CORE} is missing: build the tree first (pip install -e .)")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "popen_bench"
        subprocess.run(["cc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        str(SOURCE), "-o", str(exe)], check=True)
        print(f"load average {os.getloadavg()[0]:.1f}")
        traced = [sys.executable, "-m", "memhook", "trace", "--sim", "-f", "jsonl",
                  "-o", os.devnull, "--"]
        preload = {**os.environ, "LD_PRELOAD": str(CORE)}
        for run_no in range(1, args.runs + 1):
            for how, prefix, env in (("traced", traced, dict(os.environ)),
                                     ("preloaded, not tracing", [], preload)):
                for name in ("alias", "popen"):
                    said = run([*prefix, str(exe), str(args.calls), name], env)
                    label = "_IO_popen" if name == "alias" else "popen"
                    print(f"run {run_no} {how:24} {label:9} {said} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
