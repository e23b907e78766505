"""Worker processes under `memhook trace` on a real GPU (issue 14's evidence).

    python3 tools/gpu/trace_workers.py run PIDFILE        # traced: the workload
    python3 tools/gpu/trace_workers.py check PIDFILE TRACE.jsonl

`run` makes two kinds of workers and writes, per worker, its pid and what it
allocated to PIDFILE (one JSON line each):

* a PyTorch DataLoader with num_workers=2 (spawn context: a worker may not
  use a CUDA context its parent made) whose dataset allocates, in the
  worker, CUDA memory (``cudaMalloc`` through the caching allocator, with
  ``empty_cache()`` after each item so every item is one alloc and one
  free) and pinned host memory (``cudaHostAlloc``); workers end as
  multiprocessing workers do, with ``os._exit``;
* a ``torch.multiprocessing.spawn`` job of 2 processes doing the same.

`check` reads the jsonl trace and says, per worker, how many ALLOC/FREE of
the CUDA device and of pinned memory it holds: every worker must appear,
with at least what it said it allocated.  Exit status 0 only then.
"""

from __future__ import annotations

import collections
import json
import os
import sys

ITEMS = 6               # DataLoader items, over its 2 workers
SPAWN_ROUNDS = 5        # per spawned process
SIZE = 3 << 20          # 3 MiB a CUDA block, 1 MiB pinned


def _note(pidfile: str, role: str, cuda: int, pinned: int) -> None:
    with open(pidfile, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "role": role, "cuda": cuda,
                            "pinned": pinned}) + "\n")


def _touch_gpu(rounds: int) -> tuple[int, int]:
    import torch
    cuda = pinned = 0
    for i in range(rounds):
        x = torch.empty(SIZE + i * 4096, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        del x
        torch.cuda.empty_cache()  # the block goes back: cudaFree
        cuda += 1
        h = torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True)
        del h
        # PyTorch caches pinned blocks too: without giving them back, three
        # pin_memory tensors are one cudaHostAlloc (the first GPU run's
        # check counted 3 said against 1 traced, a wrong expectation).
        torch.cuda.synchronize()
        torch._C._host_emptyCache()  # the block goes back: cudaFreeHost
        pinned += 1
    torch.cuda.synchronize()
    return cuda, pinned


class _Items:
    def __init__(self, pidfile: str) -> None:
        self.pidfile = pidfile
        self.done = collections.Counter()

    def __len__(self) -> int:
        return ITEMS

    def __getitem__(self, i: int) -> int:
        cuda, pinned = _touch_gpu(1)
        _note(self.pidfile, "dataloader", cuda, pinned)
        return i


def _spawned(rank: int, pidfile: str) -> None:
    cuda, pinned = _touch_gpu(SPAWN_ROUNDS)
    _note(pidfile, f"spawn rank {rank}", cuda, pinned)


def run(pidfile: str) -> int:
    import torch
    import torch.multiprocessing as tmp
    from torch.utils.data import DataLoader
    open(pidfile, "w").close()
    loader = DataLoader(_Items(pidfile), batch_size=1, num_workers=2,
                        multiprocessing_context="spawn")
    assert sorted(int(b) for b in loader) == list(range(ITEMS))
    tmp.spawn(_spawned, args=(pidfile,), nprocs=2, join=True)
    print("trace_workers: done", flush=True)
    return 0


def check(pidfile: str, trace: str) -> int:
    said: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    roles: dict[int, str] = {}
    for line in open(pidfile):
        rec = json.loads(line)
        said[rec["pid"]]["cuda"] += rec["cuda"]
        said[rec["pid"]]["pinned"] += rec["pinned"]
        roles[rec["pid"]] = rec["role"]
    seen: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in open(trace):
        e = json.loads(line)
        if e.get("result", 0) != 0:
            continue
        kind = "pinned" if e["mem_type"] == "CUDA_HOST" else "cuda"
        seen[e["pid"]][f"{kind} {e['kind']}"] += 1
    ok = True
    for pid in sorted(said):
        s, got = said[pid], seen.get(pid, collections.Counter())
        good = (got["cuda alloc"] >= s["cuda"] and got["cuda free"] >= s["cuda"]
                and got["pinned alloc"] >= s["pinned"] and got["pinned free"] >= s["pinned"])
        ok = ok and good
        print(f"pid {pid} ({roles[pid]}): said cuda {s['cuda']} pinned {s['pinned']}; trace has "
              f"{dict(sorted(got.items()))} -> {'OK' if good else 'MISSING EVENTS'}")
    workers = {r.split()[0] for r in roles.values()}
    ok = ok and len([p for p in roles if roles[p] == "dataloader"]) == 2 and len(said) == 4
    print(f"{len(said)} worker processes ({', '.join(sorted(workers))}): "
          f"{'every worker traced' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2]))
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    sys.exit(__doc__)
