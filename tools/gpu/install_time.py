#!/usr/bin/env python3
"""memhook.install(mode) wall time per mode, each in fresh processes.

    . tools/gpu/device_setup.sh && python3 tools/gpu/install_time.py [RUNS]

Each run: a new Python process imports memhook, loads libcuda.so.1 (cuInit,
a context) and NVIDIA's libcudart.so.13, then times install(mode) and
uninstall() with perf_counter.  Prints min / median / max over RUNS per mode.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

MODES = {"bistro": ("bistro", {}), "reloc": ("reloc", {}),
         "bistro+reloc": ("bistro,reloc", {}),
         "bistro-far": ("bistro", {"MEMHOOK_BISTRO_FAR_JUMP": "1"})}

CHILD = r"""
import ctypes, glob, json, os, site, sys, time
import memhook
cuda = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
hits = sorted(h for b in site.getsitepackages()
              for h in glob.glob(b + "/nvidia/**/libcudart.so.13", recursive=True))
ctypes.CDLL(hits[0] if hits else "libcudart.so.13")
t0 = time.perf_counter(); rep = memhook.install(sys.argv[1]); t1 = time.perf_counter()
memhook.uninstall(); t2 = time.perf_counter()
hooked = sum(1 for h in rep.hooks if h.installed)
print(json.dumps({"install_ms": (t1 - t0) * 1e3, "uninstall_ms": (t2 - t1) * 1e3,
                  "hooks": hooked}))
"""


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    rows = {}
    for label, (mode, extra) in MODES.items():
        env = dict(os.environ, **extra)
        got = []
        for _ in range(runs):
            out = subprocess.run([sys.executable, "-c", CHILD, mode], env=env,
                                 capture_output=True, text=True, check=True, timeout=120)
            got.append(json.loads(out.stdout.strip().splitlines()[-1]))
        ins = [g["install_ms"] for g in got]
        uns = [g["uninstall_ms"] for g in got]
        rows[label] = {"install_ms_median": statistics.median(ins), "install_ms_min": min(ins),
                       "install_ms_max": max(ins), "uninstall_ms_median": statistics.median(uns),
                       "hooks": got[0]["hooks"]}
        print(f"install {label:<13} median {statistics.median(ins):8.2f} ms  "
              f"(min {min(ins):.2f}, max {max(ins):.2f}; {runs} processes)  "
              f"uninstall median {statistics.median(uns):.2f} ms  hooks installed "
              f"{got[0]['hooks']}", flush=True)
    print("INSTALL-JSON " + json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
