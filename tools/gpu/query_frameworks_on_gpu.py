"""memhook.memory_type of the objects PyTorch and CuPy users pass, on a GPU,
beside what reading each object's interface costs and beside asking the
driver through cuda-python, in one process (issue 34's goal: at most the
interface plus 200 ns).

    python3 tools/gpu/query_frameworks_on_gpu.py [MODE]     (default bistro,reloc)

64 distinct tensors/arrays of each kind, cycled; best of 7 rounds of
100,000 queries.  Each answer is checked (CUDA for device objects, HOST for
CPU tensors) before anything is timed.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from itertools import islice, cycle
from typing import Any, Callable

N = 100_000
ROUNDS = 7


def best_ns(fn: Callable[[Any], Any], objs: list[Any]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        seq = list(islice(cycle(objs), N))
        t0 = time.perf_counter_ns()
        deque(map(fn, seq), maxlen=0)
        best = min(best, (time.perf_counter_ns() - t0) / N)
    return best


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "bistro,reloc"
    import memhook
    from memhook import MemoryType
    memhook.install(mode)
    import cupy
    import torch
    from cuda.bindings import driver as cu

    torch.cuda.init()
    tensors = [torch.empty(1024 + i, device="cuda") for i in range(64)]
    cpu_tensors = [torch.empty(1024 + i) for i in range(64)]
    arrays = [cupy.empty(1024 + i, dtype=cupy.float32) for i in range(64)]
    memhook.flush()
    cases: dict[str, tuple[list[Any], Callable[[Any], Any], MemoryType]] = {
        "torch cuda tensor": (tensors, lambda t: t.__cuda_array_interface__, MemoryType.CUDA),
        "torch cpu tensor": (cpu_tensors, lambda t: t.__array_interface__
                             if hasattr(t, "__array_interface__") else t.__dlpack__(),
                             MemoryType.HOST),
        "cupy array": (arrays, lambda a: a.__cuda_array_interface__, MemoryType.CUDA),
    }
    attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    print(f"memhook {memhook.__version__}, mode {mode}, {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}, cupy {cupy.__version__}")
    print(f"{'object':22} {'memory_type':>12} {'interface':>10} {'iface+200':>10} "
          f"{'driver':>10}  goal")
    failed = False
    for name, (objs, iface, want) in cases.items():
        try:
            wrong = [got for got in map(memhook.memory_type, objs) if got != want]
        except Exception as exc:  # noqa: BLE001 - say it, go on with the next kind
            print(f"{name:22} memory_type raised {exc!r}")
            failed = True
            continue
        if wrong:
            print(f"{name:22} WRONG: {wrong[0]} for {len(wrong)} of {len(objs)} (want {want})")
            failed = True
            continue
        mt = best_ns(memhook.memory_type, objs)
        try:
            it = best_ns(iface, objs)
        except Exception:  # noqa: BLE001 - a CPU tensor may offer neither
            it = float("nan")
        ptrs = [o.data_ptr() if hasattr(o, "data_ptr") else o.data.ptr for o in objs]
        drv = best_ns(lambda p: cu.cuPointerGetAttribute(attr, p), ptrs)
        ok = mt <= it + 200 if it == it else mt <= 300
        print(f"{name:22} {mt:12.0f} {it:10.0f} {it + 200:10.0f} {drv:10.0f}  "
              f"{'met' if ok else 'MISSED'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
