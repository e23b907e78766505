"""Workloads for tools/gpu/pyframes_on_gpu.sh (issue 28's evidence), each
run under ``memhook trace --python --stacks``:

    python3 tools/gpu/pyframes_workloads.py torch   # a training step, DataLoader(2 workers)
    python3 tools/gpu/pyframes_workloads.py jax     # a jitted step and its grad
    python3 tools/gpu/pyframes_workloads.py cupy    # the default pool, pinned, async pool

Each allocating line of the user's code ends with ``# SITE: name``; the
checker (pyframes_check.py) looks for those lines in the outputs.
"""

from __future__ import annotations

import sys


def torch_step() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    data = TensorDataset(torch.randn(4096, 1024), torch.randn(4096, 1024))
    # Two worker processes (fork) make the batches; pin_memory's thread in
    # this process copies them into pinned host memory (cudaHostAlloc).
    loader = DataLoader(data, batch_size=512, num_workers=2, pin_memory=True)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(dev)  # SITE: model_to_device
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in loader:
        x = x.to(dev, non_blocking=True)  # SITE: batch_to_device
        y = y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)  # SITE: forward
        loss.backward()  # SITE: backward
        opt.step()  # SITE: optimizer_step
    a = torch.randn(2048, 2048, device=dev)
    (a @ a).sum().item()  # SITE: matmul
    torch.cuda.synchronize()
    print(f"torch step done: loss {loss.item():.4f}")


def jax_step() -> None:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    w = jnp.ones((1024, 1024), jnp.float32)  # SITE: jax_weights
    x = jnp.ones((256, 1024), jnp.float32)
    g = jax.grad(loss)(w, x)  # SITE: jax_grad
    print(f"jax step done on {jax.devices()[0]}: {float(g.sum()):.3f}")


def cupy_step() -> None:
    import cupy as cp

    a = cp.arange(1 << 24, dtype=cp.float32)  # SITE: cupy_arange
    total = float((a * 2).sum())
    pinned = cp.cuda.alloc_pinned_memory(8 << 20)  # SITE: cupy_pinned
    del a, pinned
    cp.get_default_memory_pool().free_all_blocks()
    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    c = cp.ones((2048, 2048), dtype=cp.float32)  # SITE: cupy_async
    d = c @ c
    cp.cuda.Device().synchronize()
    print(f"cupy step done: {total:.0f} {float(d[0, 0]):.0f}")


if __name__ == "__main__":
    {"torch": torch_step, "jax": jax_step, "cupy": cupy_step}[sys.argv[1]]()
