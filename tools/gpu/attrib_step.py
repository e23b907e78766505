"""Workloads for tools/gpu/attrib_on_gpu.sh (issue 18's evidence), each run
under ``memhook trace --stacks``:

    python3 tools/gpu/attrib_step.py torch   # an MLP training step on cuda:0
    python3 tools/gpu/attrib_step.py jax     # a jitted matmul + grad, if jax imports
"""

from __future__ import annotations

import sys


def torch_step() -> None:
    import torch

    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(512, 1024, device=dev)
    y = torch.randn(512, 1024, device=dev)
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    a = torch.randn(2048, 2048, device=dev)
    (a @ a).sum().item()  # a cuBLAS matmul (its workspace comes from cuBLAS/cuBLASLt)
    torch.cuda.synchronize()
    print(f"torch step done: loss {loss.item():.4f}")


def jax_step() -> None:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    w = jnp.ones((1024, 1024), jnp.float32)
    x = jnp.ones((256, 1024), jnp.float32)
    g = jax.grad(loss)(w, x)
    print(f"jax step done on {jax.devices()[0]}: {float(g.sum()):.3f}")


if __name__ == "__main__":
    {"torch": torch_step, "jax": jax_step}[sys.argv[1]]()
