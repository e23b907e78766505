"""What tests/pyframes traces: ``python pyframes_program.py CASE [ARGS]``.

Each case allocates with a size of its own per call site (pyframes_cases), so the
test knows which site each ALLOC came from, and prints ``ready: {json}``
with what the test cannot know otherwise (ids of code objects, pids).

  sites C_THREAD_LIB   every site once: ctypes with the GIL released and
                       held, cuda-python (where installed), a threading
                       thread, a C thread with no Python (the library)
  exec N               N functions defined with exec, called and deleted
  fork                 an os.fork child and Pool(fork) workers allocate
  churn T N            T threads at once, each defining N functions with
                       exec, calling (allocating) and deleting each
  loop N DEPTH         N allocations DEPTH Python frames deep (bench/)
"""

from __future__ import annotations

import ctypes
import gc
import json
import multiprocessing
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from alloc_ctypes import alloc_ctypes, ensure_context, free_ctypes  # noqa: E402
from pyframes_cases import EXEC_FILE, SHAPES, SIZES  # noqa: E402


def have_cudapy() -> bool:
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return False
    return True


def sites(c_thread_lib: str) -> None:
    ctx = ensure_context()
    alloc_ctypes(SIZES["ctypes"])  # CALL: ctypes
    alloc_ctypes(SIZES["ctypes_gil"], hold_gil=True)  # CALL: ctypes_gil
    cudapy = have_cudapy()
    if cudapy:
        from alloc_cudapy import alloc_cudapy
        alloc_cudapy(SIZES["cudapy"])  # CALL: cudapy
    worker = threading.Thread(target=alloc_ctypes, args=(SIZES["thread"],))
    worker.start()
    worker.join()
    lib = ctypes.CDLL(c_thread_lib)
    lib.alloc_in_c_thread.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    assert lib.alloc_in_c_thread(ctx, SIZES["c_thread"]) == 0
    print("ready: " + json.dumps({"cudapy": cudapy}), flush=True)


def exec_case(n: int) -> None:
    ensure_context()
    ids = []
    for k in range(n):
        name, src = SHAPES[k % len(SHAPES)]
        space = {"alloc_ctypes": alloc_ctypes}
        exec(compile(src.format(size=0x200000 + k * 4096), EXEC_FILE, "exec"), space)
        fn = space.pop(name)
        ids.append(id(fn.__code__))
        free_ctypes(fn())
        del fn, space
        gc.collect()
    print("ready: " + json.dumps({"code_ids": ids}), flush=True)


def churn_size(thread: int, k: int) -> int:
    return 0x1000000 + (thread * 1000 + k) * 4096


def _churn(thread: int, n: int, start: threading.Barrier) -> None:
    ensure_context()
    start.wait()
    for k in range(n):
        name = f"churn_{thread}_{k}"
        space = {"alloc_ctypes": alloc_ctypes}
        src = f"def {name}():\n" + "\n" * (k % 3) + f"    return alloc_ctypes({churn_size(thread, k)})\n"
        exec(compile(src, EXEC_FILE, "exec"), space)
        free_ctypes(space.pop(name)())
        del space


def churn_case(threads: int, n: int) -> None:
    start = threading.Barrier(threads)
    workers = [threading.Thread(target=_churn, args=(t, n, start)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print("ready: {}", flush=True)


def _pool_task(i: int) -> int:
    alloc_ctypes(SIZES["pool"])  # CALL: pool
    return os.getpid()


def fork_case() -> None:
    # The parent loads the driver and libffi (importing alloc_ctypes did)
    # but initialises nothing: a child may not use its parent's CUDA.
    kid = os.fork()
    if kid == 0:
        alloc_ctypes(SIZES["fork"])  # CALL: fork
        os._exit(0)
    os.waitpid(kid, 0)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        workers = sorted(set(pool.map(_pool_task, range(4), chunksize=1)))
    print("ready: " + json.dumps({"fork": kid, "pool": workers}), flush=True)


def _nest(depth: int, n: int, size: int) -> float:
    if depth > 1:
        return _nest(depth - 1, n, size)
    ptrs = []
    t0 = time.perf_counter()
    for _ in range(n):
        ptrs.append(alloc_ctypes(size))
    elapsed = time.perf_counter() - t0
    for p in ptrs:
        free_ctypes(p)
    return elapsed


def loop(n: int, depth: int) -> None:
    ensure_context()
    _nest(depth, min(n, 1000), 4096)  # warm: code records written, caches filled
    elapsed = min(_nest(depth, n, 4096) for _ in range(3))
    print("ready: " + json.dumps({"ns_per_alloc": elapsed / n * 1e9}), flush=True)


if __name__ == "__main__":
    case = sys.argv[1]
    if case == "sites":
        sites(sys.argv[2])
    elif case == "exec":
        exec_case(int(sys.argv[2]))
    elif case == "fork":
        fork_case()
    elif case == "churn":
        churn_case(int(sys.argv[2]), int(sys.argv[3]))
    elif case == "loop":
        loop(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(f"unknown case {case!r}")
