"""A PyTorch training step on the GPU, for `memhook trace` (tools/gpu/trace_on_gpu.sh).

Two steps of a small MLP with AdamW, then empty_cache() so the caching
allocator hands its segments back: the trace shows PyTorch's cudaMalloc'd
segments (through the driver), cuBLAS's workspace and what stays until exit.
"""

from __future__ import annotations

import torch


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device="cuda")
    y = torch.randn(256, 1024, device="cuda")
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    print(f"pytorch step: loss {loss.item():.4f}, torch had {reserved >> 20} MiB reserved")


if __name__ == "__main__":
    main()
