"""csrc/include/memhook/cuda_abi.h is binary-compatible with NVIDIA's cuda.h.

The same C program is compiled twice, once against each header, and prints
sizes, field offsets and enum values; the outputs must be identical.  Skipped
only where no CUDA toolkit header is installed (the dev and CI machines have
one at /usr/local/cuda).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ROOT / "csrc" / "include" / "memhook" / "cuda_abi.h"
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"

STRUCTS = {
    "CUipcMemHandle": ["reserved"],
    "CUuuid": ["bytes"],
    "CUmemLocation": ["type", "id"],
    "CUmemAllocationProp": ["type", "requestedHandleTypes", "location", "win32HandleMetaData",
                            "allocFlags"],
    "CUmemAccessDesc": ["location", "flags"],
    "CUmemPoolProps": ["allocType", "handleTypes", "location", "win32SecurityAttributes",
                       "maxSize", "usage", "reserved"],
    "CUexecAffinityParam": ["type", "param"],
    "CUctxCreateParams": ["execAffinityParams", "numExecAffinityParams", "cigParams"],
    "CUDA_POINTER_ATTRIBUTE_P2P_TOKENS": ["p2pToken", "vaSpaceToken"],
}
SCALARS = ["CUdeviceptr", "CUdeviceptr_v2", "CUdevice", "CUcontext", "CUstream",
           "CUmemGenericAllocationHandle", "CUresult", "CUpointer_attribute",
           "CUdevice_attribute", "CUmemorytype", "cuuint64_t"]
MACROS = ["CU_IPC_HANDLE_SIZE", "CU_MEMHOSTALLOC_PORTABLE", "CU_MEMHOSTALLOC_DEVICEMAP",
          "CU_MEMHOSTALLOC_WRITECOMBINED", "CU_MEMHOSTREGISTER_PORTABLE",
          "CU_MEMHOSTREGISTER_DEVICEMAP", "CU_MEMHOSTREGISTER_IOMEMORY",
          "CU_MEMHOSTREGISTER_READ_ONLY", "(long)CU_STREAM_LEGACY", "(long)CU_STREAM_PER_THREAD",
          "CU_DEVICE_CPU", "CU_DEVICE_INVALID"]


def _enumerators() -> list[str]:
    """Every enumerator our header declares (each must exist in cuda.h too)."""
    text = OURS.read_text()
    names = []
    for body in re.findall(r"typedef enum \w+ \{(.*?)\}", text, re.S):
        names += re.findall(r"^\s*(CU\w+|CUDA_\w+)\s*(?:=|,)", body, re.M)
    return [n for n in names if n != "CU_DEVICE_ATTRIBUTE_MAX"]


def _program(include: str) -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>", f"#include {include}", "int main(void) {"]
    for name, fields in STRUCTS.items():
        lines.append(f'printf("sizeof {name} %zu\\n", sizeof({name}));')
        for field in fields:
            lines.append(f'printf("offsetof {name}.{field} %zu\\n", offsetof({name}, {field}));')
    for name in SCALARS:
        lines.append(f'printf("sizeof {name} %zu\\n", sizeof({name}));')
    for name in MACROS + _enumerators():
        lines.append(f'printf("value {name} %lld\\n", (long long)({name}));')
    lines += ["return 0;", "}"]
    return "\n".join(lines) + "\n"


def _run(tmp: Path, tag: str, include: str, flags: list[str]) -> str:
    src = tmp / f"{tag}.c"
    exe = tmp / tag
    src.write_text(_program(include))
    subprocess.run(["cc", "-std=c11", *flags, str(src), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(not (CUDA_INCLUDE / "cuda.h").exists(), reason="no CUDA toolkit headers here")
def test_abi_header_matches_cuda_h(tmp_path: Path) -> None:
    ours = _run(tmp_path, "ours", '"memhook/cuda_abi.h"', [f"-I{ROOT / 'csrc' / 'include'}"])
    theirs = _run(tmp_path, "theirs", "<cuda.h>", [f"-I{CUDA_INCLUDE}"])
    assert len(ours.splitlines()) > 250
    diff = [f"ours: {a}  cuda.h: {b}" for a, b in zip(ours.splitlines(), theirs.splitlines()) if a != b]
    assert not diff, "\n".join(diff)
