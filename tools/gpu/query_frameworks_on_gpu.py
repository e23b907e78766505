"""memhook.memory_type of the objects PyTorch and CuPy users pass, on a GPU,
beside what reading each object's interface costs and beside asking the
driver through cuda-python, in one process (issue 34's goal: at most the
interface plus 200 ns).

    python3 tools/gpu/query_frameworks_on_gpu.py [MODE]     (default bistro,reloc)

64 distinct tensors/arrays of each kind, cycled; best of 7 rounds of
100,000 queries.  Each answer is checked (CUDA for device objects, HOST for
CPU tensors) before anything is timed, and so is where it was read: the
"python" column counts the objects of the kind that went to Python's
normaliser (memhook._queries.inputs.byte_range) over 10 rounds after the first
object - 0 when C reads the kind.  A CPU tensor's interface is read in the
protocols' order, as memhook must: __cuda_array_interface__ (it raises),
then __dlpack_device__() and __dlpack__(max_version=(1, 0)); "dlpack()" is
PyTorch's own __dlpack__() alone, for reference.  "read as" is how C reads
the kind once learned (memhook/_queries/query.py's kinds): a torch tensor
through its methods, a CuPy array (and a strided view of one) through its
attributes, each checked to give the interface's extent on every object
(memhook._queries.inputs.byte_range) - a kind read otherwise fails the run.
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


def cpu_tensor_iface(t: Any) -> Any:
    try:
        return t.__cuda_array_interface__
    except AttributeError:
        return t.__dlpack_device__(), t.__dlpack__(max_version=(1, 0))


def python_reads(objs: list[Any]) -> int:
    """How many of 10 rounds over ``objs`` memory_type left to Python."""
    import memhook
    from memhook._queries import query as _query
    calls = []
    real = _query.byte_range

    def counting(obj: Any, size: Any = 1) -> Any:
        calls.append(obj)
        return real(obj, size)

    memhook.memory_type(objs[0])  # (the first object of a type teaches C)
    _query.byte_range = counting
    try:
        for _ in range(10):
            for o in objs:
                memhook.memory_type(o)
    finally:
        _query.byte_range = real
    return len(calls)


def read_as(objs: list[Any]) -> str:
    """How C reads objects of this kind, as learned from the first of them
    (after the first memory_type), and a check that its reading gives the
    interface's extent for each (``!=`` where it does not)."""
    from memhook._queries import query as _query
    from memhook._queries.inputs import byte_range
    kind = _query._kinds.get(type(objs[0]), 0)
    names = {v: k[len("_KIND_"):].lower() for k, v in vars(_query).items()
             if k.startswith("_KIND_") and isinstance(v, int)}
    wrong = sum(_query.query_extent(o, kind) != byte_range(o) for o in objs) if kind else 0
    return names.get(kind, "python") + (f" != {wrong}" if wrong else "")


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
    views = [cupy.empty((64, 32 + i), dtype=cupy.float64)[3:40:2, 1::3] for i in range(64)]
    memhook.flush()
    cases: dict[str, tuple[list[Any], Callable[[Any], Any], MemoryType]] = {
        "torch cuda tensor": (tensors, lambda t: t.__cuda_array_interface__, MemoryType.CUDA),
        "torch cpu tensor": (cpu_tensors, cpu_tensor_iface, MemoryType.HOST),
        "cupy array": (arrays, lambda a: a.__cuda_array_interface__, MemoryType.CUDA),
        "cupy array view": (views, lambda a: a.__cuda_array_interface__, MemoryType.CUDA),
    }
    # (the way C must read each, once learned)
    own = {"torch cuda tensor": "torch", "cupy array": "cupy", "cupy array view": "cupy"}
    attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    print(f"memhook {memhook.__version__}, mode {mode}, {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}, cupy {cupy.__version__}")
    print(f"{'object':22} {'memory_type':>12} {'interface':>10} {'iface+200':>10} "
          f"{'driver':>10} {'python':>7} {'read as':>14}  goal")
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
        slow = python_reads(objs)
        how = read_as(objs)
        if name in own and how != own[name]:
            failed = True
            how += f" (want {own[name]})"
        print(f"{name:22} {mt:12.0f} {it:10.0f} {it + 200:10.0f} {drv:10.0f} {slow:7d} "
              f"{how:>14}  {'met' if ok else 'MISSED'}")
    plain = best_ns(lambda t: t.__dlpack__(), cpu_tensors)
    print(f"torch cpu tensor: __dlpack__() alone {plain:.0f} ns")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
