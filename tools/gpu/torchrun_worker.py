"""One rank of `torchrun --nproc-per-node 2` on one GPU (gloo), for
`memhook trace -o t-%r.jsonl` and `memhook merge` (tools/gpu/trace_questions_on_gpu.sh).

Each rank allocates a rank-sized tensor on cuda:0, all-reduces a CPU copy of
its sum over gloo, and frees; rank 1 keeps one extra tensor until exit.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones((rank + 1) << 20, device="cuda")
    total = torch.tensor([float(x.sum())])
    dist.all_reduce(total)
    kept = torch.empty(8 << 20, device="cuda") if rank == 1 else None
    del x
    torch.cuda.empty_cache()
    dist.barrier()
    print(f"rank {rank} pid {os.getpid()}: all_reduce {total.item():.0f}, kept {kept is not None}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
