"""Real clients of the driver's pointer-attribute calls, with and without
memhook's answers (issue 35): each client in three fresh processes -
plain, under `memhook run`, and under `memhook run --pointer-attributes` -
whose answers must be identical, with the time per call of each.

    python3 tools/gpu/pointer_attr_clients.py

Clients (each skipped, saying so, where its package is missing):
* torch.as_tensor of a __cuda_array_interface__ object (PyTorch asks
  cudaPointerGetAttributes for the pointer's device), and of a CPU numpy
  array's interface-free copy for contrast is not needed;
* numba.cuda.as_cuda_array of a foreign device array (numba asks
  cuPointerGetAttribute for the device pointer);
* cupy.cuda.runtime.pointerGetAttributes on device and pinned/host memory
  (what CuPy asks per array to know pinned memory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable

N = 20_000


class Foreign:
    """A device buffer known only by its __cuda_array_interface__."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False),
                                         "version": 3, "strides": None}


def per_call_ns(fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(N):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / N)
    return best


def child() -> dict[str, Any]:
    out: dict[str, Any] = {}
    import numpy as np
    try:
        import torch
        base = torch.empty(1 << 20, device="cuda")
        objs = [Foreign(base.data_ptr() + 4096 * i, 256) for i in range(8)]
        t = [torch.as_tensor(o, device="cuda") for o in objs]
        out["torch.as_tensor"] = {"answer": [(str(x.device), x.data_ptr() - base.data_ptr())
                                             for x in t],
                                  "ns": per_call_ns(lambda: torch.as_tensor(objs[3], device="cuda"))}
    except ImportError as exc:
        out["torch.as_tensor"] = {"skipped": str(exc)}
    try:
        from numba import cuda as ncuda
        import cupy
        arr = cupy.zeros(1 << 16, dtype=cupy.float32)
        f = Foreign(arr.data.ptr + 1024, 256)
        d = ncuda.as_cuda_array(f)
        out["numba.as_cuda_array"] = {
            "answer": [int(d.device_ctypes_pointer.value) - arr.data.ptr, d.shape[0]],
            "ns": per_call_ns(lambda: ncuda.as_cuda_array(f))}
    except ImportError as exc:
        out["numba.as_cuda_array"] = {"skipped": str(exc)}
    try:
        import cupy
        dev = cupy.zeros(1 << 16, dtype=cupy.uint8)
        pinned = cupy.cuda.alloc_pinned_memory(1 << 16)
        host = np.zeros(1 << 16, dtype=np.uint8)
        ptrs = {"device": dev.data.ptr + 100, "pinned": pinned.ptr, "host": host.ctypes.data}
        rt = cupy.cuda.runtime

        def attrs(p: int) -> list[Any]:
            a = rt.pointerGetAttributes(p)
            return [a.type, a.device, a.devicePointer - p if a.devicePointer else 0,
                    a.hostPointer - p if a.hostPointer else 0]
        out["cupy.pointerGetAttributes"] = {
            "answer": {k: attrs(p) for k, p in ptrs.items()},
            "ns": {k: per_call_ns(lambda p=p: rt.pointerGetAttributes(p)) for k, p in ptrs.items()}}
    except ImportError as exc:
        out["cupy.pointerGetAttributes"] = {"skipped": str(exc)}
    return out


def main() -> int:
    if sys.argv[1:] == ["--child"]:
        print("RESULT " + json.dumps(child()))
        return 0
    me = os.path.abspath(__file__)
    runs = {"plain": [sys.executable, me, "--child"],
            "memhook run": [sys.executable, "-m", "memhook", "run", "--", sys.executable, me,
                            "--child"],
            "run --pointer-attributes": [sys.executable, "-m", "memhook", "run",
                                         "--pointer-attributes", "--", sys.executable, me,
                                         "--child"]}
    results = {}
    for name, cmd in runs.items():
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        if p.returncode != 0 or not line:
            print(f"{name}: failed (status {p.returncode})\n{p.stderr[-2000:]}")
            return 1
        results[name] = json.loads(line[0][7:])
    rc = 0
    for client in results["plain"]:
        rows = {name: r[client] for name, r in results.items()}
        if "skipped" in rows["plain"]:
            print(f"{client:28} skipped: {rows['plain']['skipped']}")
            continue
        same = all(r["answer"] == rows["plain"]["answer"] for r in rows.values())
        rc |= 0 if same else 1
        print(f"{client:28} answers {'identical' if same else 'DIFFER'} in all three; ns per call: "
              + "; ".join(f"{n} {r['ns'] if not isinstance(r['ns'], float) else round(r['ns'])}"
                          for n, r in rows.items()))
        if not same:
            print(json.dumps({n: r["answer"] for n, r in rows.items()}))
    return rc


if __name__ == "__main__":
    sys.exit(main())
