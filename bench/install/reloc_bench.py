#!/usr/bin/env python3
"""Build and run the reloc benchmark against the in-tree libmemhook.so.

    python bench/install/reloc_bench.py [COUNT]      # after `pip install -e .`; COUNT=200

Generates COUNT small shared libraries (each calls bench_target and dlsym,
so every one has JUMP_SLOT/GLOB_DAT slots to rewrite), loads them all, and
prints the install time beside a bare dl_iterate_phdr walk, and dlopen+dlclose
with memhook installed beside without, all measured in the same run.
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
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    if not (CORE / "libmemhook.so").exists():
        print("build first: pip install -e .", file=sys.stderr)
        return 1
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "target.c").write_text("int bench_target(int x) { return x + 1; }\n")
        subprocess.run([cc, "-shared", "-fPIC", "-O2", str(d / "target.c"), "-o",
                        str(d / "libbench_target.so")], check=True)
        for i in range(count):
            src = d / f"b{i}.c"
            src.write_text("#include <dlfcn.h>\nint bench_target(int);\n"
                           f"int bench_{i}(int x) {{ return bench_target(x) + (dlsym(0, \"x\") != 0); }}\n")
            subprocess.run([cc, "-shared", "-fPIC", "-O2", str(src), "-o",
                            str(d / f"libbench_{i}.so"), f"-L{d}", "-lbench_target",
                            f"-Wl,-rpath,{d}", "-ldl"], check=True)
        (d / "extra.c").write_text("int bench_target(int);\nint extra(int x) { return bench_target(x); }\n")
        subprocess.run([cc, "-shared", "-fPIC", "-O2", str(d / "extra.c"), "-o",
                        str(d / "libbench_extra.so"), f"-L{d}", "-lbench_target",
                        f"-Wl,-rpath,{d}"], check=True)
        exe = d / "reloc_install"
        subprocess.run([cc, "-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
                        f"-I{ROOT / 'csrc' / 'include'}", str(HERE / "reloc_install.c"), "-o",
                        str(exe), f"-L{d}", "-lbench_target", f"-Wl,-rpath,{d}",
                        f"-L{CORE}", "-lmemhook", f"-Wl,-rpath,{CORE}", "-ldl"], check=True)
        subprocess.run([*os.environ.get("MEMHOOK_BENCH_WRAP", "").split(), str(exe), str(d), str(count), str(d / "libbench_extra.so")], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
