"""Run the GPU out of memory from PyTorch while cuBLAS and a CuPy array also
hold memory, for `memhook trace` (tools/gpu/trace_questions_on_gpu.sh).

A CuPy array of 2 GiB and cuBLAS's workspace (one matmul) are live; then
PyTorch allocates 4 GiB tensors until the device says no.  The program
catches the OOM and exits 0, so the trace's OOM report - not an exit
status - is what shows who held the memory.
"""

from __future__ import annotations

import cupy
import torch


def fill_device() -> list[torch.Tensor]:
    held = []
    try:
        while True:
            held.append(torch.empty(4 << 30, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError:
        return held


def main() -> None:
    cupy_block = cupy.zeros(2 << 30, dtype=cupy.uint8)
    a = torch.randn(2048, 2048, device="cuda")
    b = a @ a  # cuBLAS: handle + workspace
    torch.cuda.synchronize()
    held = fill_device()
    print(f"oom after {len(held)} x 4 GiB from torch; cupy holds {cupy_block.nbytes >> 20} MiB;"
          f" matmul sum {float(b.sum()):.1f}")


if __name__ == "__main__":
    main()
