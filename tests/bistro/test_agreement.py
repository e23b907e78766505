"""One planner (issue 13): memhook_bistro_analyze's verdict - what the
census tool and `memhook info` print - is the verdict install honours, for
every fixture prologue and every real NVIDIA prologue, in both jump forms.

The NVIDIA vectors are bytes (the first 32 of each export, with its symbol
size); each becomes a function of a generated library (its bytes, then
int3 padding up to its size, capped at 4 KiB) so install has a symbol with
a size, and analyze is given the very bytes install sees.  A child process
installs them all in one batch per form (agreement_child.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
VECTORS = Path(os.environ.get("MEMHOOK_PROLOGUES",
                              ROOT / "tests" / "data" / "nvidia-prologues.json"))
CAP = 4096


def run_child(native, lib: Path) -> str:
    proc = subprocess.run([sys.executable, str(HERE / "agreement_child.py"), str(native.core),
                           str(lib)], capture_output=True, text=True, timeout=300,
                          env=native.env())
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


def test_fixture_prologues_agree(native, fixture_lib: Path) -> None:
    out = run_child(native, fixture_lib)
    assert "AGREE" in out


def test_nvidia_vectors_agree(native, c_test_dir: Path) -> None:
    data = json.loads(VECTORS.read_text())["libraries"]
    asm = [".text"]
    n = 0
    for lib, funcs in data.items():
        for name, (size, hexbytes) in funcs.items():
            raw = bytes.fromhex(hexbytes)
            size = max(1, min(size, CAP))
            body = (raw + b"\xcc" * size)[:size]
            sym = f"v{n}"
            n += 1
            asm += [f".globl {sym}", f".type {sym},@function", ".p2align 4", f"{sym}:",
                    ".byte " + ",".join(str(b) for b in body), f".size {sym},{size}"]
    src = c_test_dir / "nvidia_vectors.S"
    src.write_text("\n".join(asm) + "\n.section .note.GNU-stack,\"\",@progbits\n")
    lib = c_test_dir / "libnvidia_vectors.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib), "-Wl,-z,now"],
                   check=True)
    out = run_child(native, lib)
    assert f"AGREE {2 * n} of {2 * n}" in out
