#!/usr/bin/env python3
"""tools/bistro_census.py over the libraries loaded on a GPU machine.

    . tools/gpu/device_setup.sh && python3 tools/gpu/census_on_gpu.py [SUMMARY.json]

Loads libcuda.so.1 (cuInit) and NVIDIA's libcudart.so.13, and judges every
exported function from the bytes mapped in this process (the code bistro
would patch, at its real address; the trampoline 1 GiB above), in both patch
forms (5-byte jmp rel32, 12-byte movabs+jmp), with bistro_census.census().
Exit status 1 unless every entry point of csrc/cuda/hook_table.def present in
these libraries is patchable in both forms (and the driver's are present).
Needs memhook built (cffi), not pyelftools: the exports come from `nm -D`.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import bistro_census as bc


def _mapped(fragment: str) -> str:
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith(fragment):
                return os.path.realpath(fields[5].strip())
    raise RuntimeError(f"{fragment} is not mapped")


def _base(path: str) -> int:
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if (len(fields) == 6 and os.path.realpath(fields[5].strip()) == path
                    and int(fields[2], 16) == 0):
                return int(fields[0].split("-")[0], 16)
    raise RuntimeError(f"{path} is not mapped")


def live_functions(path: str) -> list[bc.Function]:
    base = _base(path)
    out = subprocess.run(["nm", "-D", "--defined-only", "-S", path], capture_output=True,
                         text=True, check=True).stdout
    fns, seen = [], set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[2] not in ("T", "t", "i"):
            continue
        name, value, size = parts[3].split("@")[0], int(parts[0], 16), int(parts[1], 16)
        if (name, value) in seen or size == 0:
            continue
        seen.add((name, value))
        addr = base + value
        fns.append(bc.Function(name, addr, size, ctypes.string_at(addr, size)))
    return sorted(fns, key=lambda f: f.address)


def main(argv: list[str]) -> int:
    import memhook  # noqa: F401  (the cffi core bistro_census uses)
    cuda = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_GLOBAL)
    if cuda.cuInit(0) != 0:
        print("cuInit failed")
        return 1
    hits = sorted(h for b in site.getsitepackages()
                  for h in glob.glob(b + "/nvidia/**/libcudart.so.13", recursive=True))
    ctypes.CDLL(hits[0] if hits else "libcudart.so.13")
    libs = {}
    for frag in ("libcuda.so", "libcudart.so"):
        path = _mapped(frag)
        libs[os.path.basename(path)] = live_functions(path)
    summary = bc.census(libs, examples=2)
    present = {n for fns in libs.values() for f in fns for n in [f.name]}
    driver_missing = [n for n in bc.DRIVER_ENTRY_POINTS if n not in present
                      and n + "_v2" not in present and n.removesuffix("_v2") not in present]
    runtime_missing = [n for n in bc.RUNTIME_ENTRY_POINTS if n not in present]
    refused = {lib: e["refused"] for lib, e in summary["entry_points"].items() if e["refused"]}
    summary["missing"] = {"driver": driver_missing, "runtime": runtime_missing}
    print("section-3 entry points present: "
          + ", ".join(f"{lib} {e['present']}" for lib, e in summary["entry_points"].items()))
    print(f"missing (neither spelling): driver {driver_missing or 'none'}, "
          f"runtime {runtime_missing or 'none'}")
    ok = not refused and not driver_missing
    print("CENSUS " + ("OK: every section-3 entry point present is patchable in both forms"
                       if ok else f"FAILED: refused {refused}, driver missing {driver_missing}"))
    if len(argv) > 1:
        Path(argv[1]).write_text(json.dumps(summary, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
