"""A CuPy script on the GPU, for `memhook trace` (tools/gpu/trace_on_gpu.sh):
the default memory pool, pinned host memory, then cupy.cuda.MemoryAsyncPool
(stream-ordered cudaMallocAsync)."""

from __future__ import annotations

import cupy as cp


def main() -> None:
    a = cp.arange(1 << 24, dtype=cp.float32)          # 64 MiB from the default pool
    total = float((a * 2).sum())
    pinned = cp.cuda.alloc_pinned_memory(8 << 20)     # page-locked host memory
    del a, pinned
    cp.get_default_memory_pool().free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()
    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    c = cp.ones((2048, 2048), dtype=cp.float32)       # stream-ordered allocations
    d = c @ c
    cp.cuda.Device().synchronize()
    print(f"cupy: sum {total:.0f}, d[0,0] {float(d[0, 0]):.0f}")
    del c, d


if __name__ == "__main__":
    main()
