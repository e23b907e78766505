"""memhook's memory-type queries through the path a user takes, against
asking the CUDA driver through cuda-python, in the same process.

    python3 bench/queries/cache_vs_driver.py                      # GPU if present, else the simulator
    python3 bench/queries/cache_vs_driver.py --driver sim --mode reloc --regions 1000

For each hook mode (bistro, reloc, bistro,reloc), in a fresh process of its
own so that one mode's install cannot colour another's figures:

* ``memhook.install(mode)``, then cuda-python's ``cuMemAlloc(64 KiB)``
  2 x REGIONS times and ``cuMemFree`` of every other one, all recorded by
  the real hooks and ``memhook.flush()``-ed: REGIONS separate regions in the
  cache (allocations side by side would merge into one region; the frees
  keep them apart, as a long-running process's heap is);
* ``memhook.memory_type(p)`` over QUERIES random interior pointers of those
  regions ("dev cold"), over one pointer QUERIES times ("dev hot"), and over
  QUERIES random pointers inside a numpy array ("host");
* ``memhook.lookup(p)`` over the cold pointers, and ``memhook.memory_types``
  of the cold and of the host pointers as one uint64 array each (ns per
  pointer; the cold ones also sorted, which the core's search answers
  several times faster), and the core's ``memhook_query_types`` alone over
  the cold ones (what the batch costs without the Python around it);
* the baseline, measured in the same rounds: cuda-python's
  ``cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p)`` over the
  same pointers (for host memory it fails with CUDA_ERROR_INVALID_VALUE,
  which is its answer "not CUDA's");
* the objects users pass, through ``memory_type``: numpy arrays, bytes,
  memoryview, ctypes integers, ``c_void_p`` and arrays, cuda-python's
  ``CUdeviceptr``, ``__cuda_array_interface__`` objects (one with a
  literal dict, one that makes its dict as CuPy does), an array standing
  for CuPy's ndarray (its attributes, and that interface), DLPack-only
  objects, objects read as a PyTorch CPU tensor is (an interface that
  raises, then DLPack with an IntEnum device type) and, where torch is
  importable, torch's CPU tensors, with and without requires_grad (64
  distinct ones of each kind, cycled; a build that refuses a kind shows "-"),
  beside the cost of reading their interfaces alone (a tensor that requires
  grad: its data_ptr(), shape, stride() and element_size()), and
  ``cuPointerGetAttribute`` through ctypes;
* with ``--baseline-python PY``, every mode again with another interpreter
  - a build of another version of memhook in its own venv (e.g. main's) -
  run right after this one's, so that both sets of figures come from the
  same run on the same machine.

Each figure is the best of REPEAT rounds (all figures measured once per
round, interleaved), through ``deque(map(f, pointers), maxlen=0)`` so that
the harness adds the least it can, the same for memhook and cuda-python.
Before timing, the child checks every answer it is about to time (device
pointers CUDA, host pointers HOST, from every query), so a bench that runs
is a bench that measured right answers.

Goals: memhook >= 3x cuda-python for dev cold, dev hot and host; host no
dearer than dev cold; batch <= 20 ns a pointer (issue 25); memory_type(int)
<= 100 ns, the objects <= 300 ns, interface objects <= reading the interface
+ 200 ns, memory_types <= 8 ns a pointer on 10,000 regions (issue 34).  The
tables say "met" or "MISSED"; the exit status is 0 either way (1 only if a
child fails).

Needs cuda-python's driver bindings (``pip install cuda-bindings``; the test
extra has them) and memhook built with its native parts.  On the simulator
(``--driver sim``, or no GPU) the driver's own work is the simulator's.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from typing import Any

MODES = ("bistro", "reloc", "bistro,reloc")
ALLOC_BYTES = 64 << 10
HOST_BYTES = 64 << 20
RESULT = "RESULT "
SEED = 25


# ---------------------------------------------------------------- the child

class _CudaArray:
    """An object offering ``__cuda_array_interface__`` (as CuPy, Numba and
    PyTorch's CUDA tensors do): a 1-D float32 array at ``ptr``."""

    def __init__(self, ptr: int, n: int) -> None:
        self._ptr, self._n = ptr, n

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (self._ptr, False), "shape": (self._n,), "typestr": "<f4",
                "strides": None, "version": 3}


class _CupyLikeArray:
    """An object whose ``__cuda_array_interface__`` is made as CuPy makes its
    own (``cupy/_core/core.pyx``): a new dict for each read, its keys in
    CuPy's order - a new shape tuple, the dtype's ``str`` (a new string
    each time), ``descr``, the stream, the version, ``strides`` (None when
    contiguous) and ``data`` last."""

    def __init__(self, ptr: int, n: int) -> None:
        import numpy as np

        self._ptr, self._shape, self._dtype = ptr, [n], np.dtype(np.float32)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        desc: dict[str, Any] = {"shape": tuple(self._shape), "typestr": self._dtype.str,
                                "descr": self._dtype.descr}
        desc["stream"] = 1  # (the legacy stream, as CuPy names the default one)
        desc["version"] = 3
        desc["strides"] = None
        desc["data"] = (self._ptr, False)
        return desc


class _MemoryPointer:
    """As ``cupy.cuda.MemoryPointer``: ``ptr``, the address it points at."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class _CupyArray:
    """A 1-D float32 array standing for a CuPy one where CuPy is not
    imported (``cupy_stand_in`` names it ``sys.modules['cupy'].ndarray``,
    where memhook looks CuPy's class up): CuPy's attributes - ``data`` (a
    MemoryPointer), ``shape`` and ``strides`` (a new tuple each read),
    ``itemsize`` (the dtype's) - and its interface made as
    ``_CupyLikeArray`` makes it, with ``__dlpack__``, as CuPy has."""

    __slots__ = ("data", "dtype", "_shape", "_strides")

    def __init__(self, ptr: int, n: int) -> None:
        import numpy as np

        self.data, self.dtype = _MemoryPointer(ptr), np.dtype(np.float32)
        self._shape, self._strides = [n], [4]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._shape)

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(self._strides)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize  # type: ignore[no-any-return]

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        desc: dict[str, Any] = {"shape": self.shape, "typestr": self.dtype.str,
                                "descr": self.dtype.descr}
        desc["stream"] = 1
        desc["version"] = 3
        desc["strides"] = None  # (C-contiguous)
        desc["data"] = (self.data.ptr, False)
        return desc

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise BufferError("the stand-in for CuPy exports no DLPack capsule")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)  # kDLCUDA


def cupy_stand_in() -> bool:
    """Make ``_CupyArray`` what memhook takes for CuPy's ndarray, unless a
    real CuPy is imported; whether it is."""
    import types

    if "cupy" not in sys.modules:
        module = types.ModuleType("cupy")
        module.ndarray = _CupyArray  # type: ignore[attr-defined]
        sys.modules["cupy"] = module
    return getattr(sys.modules["cupy"], "ndarray", None) is _CupyArray


class _DLPackOnly:
    """An object offering DLPack alone (as a tensor of a framework with no
    array interface does): numpy's capsule for ``arr``."""

    def __init__(self, arr: Any) -> None:
        self._arr = arr

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self._arr.__dlpack_device__()


class _TensorLike:
    """An object read as a PyTorch tensor is: ``__cuda_array_interface__``
    raising AttributeError off the GPU, then DLPack, whose device type is an
    IntEnum (numpy's capsule for ``arr``); a length; no buffer protocol."""

    def __init__(self, arr: Any) -> None:
        self._arr = arr

    def __len__(self) -> int:
        return len(self._arr)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")

    def __dlpack__(self, **kwargs: Any) -> Any:
        kwargs.pop("stream", None)  # (-1 on the CPU means none, as PyTorch takes it)
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return (_DL_CPU, 0)


def cuda_ok(cu: Any, result: Any) -> Any:
    """A cuda-python call's result: its value(s), or RuntimeError for an
    error code (``cu``: ``cuda.bindings.driver``)."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"a CUDA call failed: {err!r}")
    return values[0] if len(values) == 1 else tuple(values)


def _dl_cpu() -> Any:
    import enum

    class DLDeviceType(enum.IntEnum):
        kDLCPU = 1

    return DLDeviceType.kDLCPU


_DL_CPU = _dl_cpu()


def _read_tensor_iface(t: Any) -> Any:
    """What reading a tensor's interfaces costs in the protocols' order: the
    CUDA array interface (raising off the GPU), the DLPack device, the
    versioned capsule."""
    try:
        return t.__cuda_array_interface__
    except AttributeError:
        return t.__dlpack_device__(), t.__dlpack__(max_version=(1, 0))


def _read_tensor_methods(t: Any) -> Any:
    """What reading a tensor's extent through its own methods costs (the
    reading where both protocols refuse: a tensor that requires grad)."""
    return t.data_ptr(), t.shape, t.stride(), t.element_size()


def _objects(cu: Any, dev_ptrs: list[int], queries: int) -> dict[str, tuple[list[Any], Any]]:
    """The objects users pass, each kind as a list of ``queries`` objects
    (cycled over 64 distinct ones), with the type memory_type must answer."""
    import ctypes

    import numpy as np

    from memhook import MemoryType

    cuda, host = MemoryType.CUDA, MemoryType.HOST
    arrays = [np.zeros(256 + i, dtype=np.float32) for i in range(64)]
    raw = [bytes(200 + i) for i in range(64)]
    kinds: dict[str, tuple[list[Any], Any]] = {
        "numpy": (arrays, host),
        "bytes": (raw, host),
        "memoryview": ([memoryview(b) for b in raw], host),
        "c_uint64 (dev)": ([ctypes.c_uint64(p) for p in dev_ptrs[:64]], cuda),
        "c_void_p (dev)": ([ctypes.c_void_p(p) for p in dev_ptrs[:64]], cuda),
        "ctypes array": ([(ctypes.c_char * (100 + i))() for i in range(64)], host),
        "CUdeviceptr (dev)": ([cu.CUdeviceptr(p) for p in dev_ptrs[:64]], cuda),
        "cuda_array_interface (dev)": ([_CudaArray(p, 1024) for p in dev_ptrs[:64]], cuda),
        "cuda_array_interface as CuPy (dev)": (
            [_CupyLikeArray(p, 1024) for p in dev_ptrs[:64]], cuda),
        "dlpack (host)": ([_DLPackOnly(a) for a in arrays], host),
        "tensor-like (host)": ([_TensorLike(a) for a in arrays], host),
    }
    if cupy_stand_in():
        kinds["cupy array (dev)"] = ([_CupyArray(p, 1024) for p in dev_ptrs[:64]], cuda)
    try:
        import torch
        kinds["torch cpu tensor"] = ([torch.zeros(256 + i) for i in range(64)], host)
        kinds["torch cpu tensor (requires grad)"] = (
            [torch.zeros(256 + i, requires_grad=True) for i in range(64)], host)
    except ImportError:
        pass
    return {k: ((objs * (queries // len(objs) + 1))[:queries], want)
            for k, (objs, want) in kinds.items()}


def _ctypes_driver_query() -> Any:
    """``cuPointerGetAttribute(MEMORY_TYPE, p)`` of the loaded driver through
    ctypes (what a program without cuda-python does), or None."""
    import ctypes

    try:
        driver = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)
    except OSError:
        return None
    fn = driver.cuPointerGetAttribute
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
    fn.restype = ctypes.c_int
    out = ctypes.c_uint32()
    ref = ctypes.byref(out)
    memory_type_attr = 2  # CU_POINTER_ATTRIBUTE_MEMORY_TYPE

    def ask(p: int) -> int:
        return fn(ref, memory_type_attr, p) or out.value
    return ask


def _child(mode: str, regions: int, queries: int, repeat: int) -> dict[str, Any]:
    """Install, allocate, check, time; the figures as a dict (ns)."""
    import collections
    import gc
    import random
    import time
    from itertools import repeat as same

    import numpy as np

    import memhook
    from memhook import MemoryType
    from memhook import cache as cache_mod

    report = memhook.install(mode)  # before cuda-python resolves the driver's entry points
    from cuda.bindings import driver as cu

    ok = functools.partial(cuda_ok, cu)

    ok(cu.cuInit(0))
    dev = ok(cu.cuDeviceGet(0))
    name = ok(cu.cuDeviceGetName(128, dev)).split(b"\0")[0].decode()
    ok(cu.cuCtxSetCurrent(ok(cu.cuDevicePrimaryCtxRetain(dev))))

    made = [int(ok(cu.cuMemAlloc(ALLOC_BYTES))) for _ in range(2 * regions)]
    made.sort()
    keep, drop = made[::2], made[1::2]
    for p in drop:
        ok(cu.cuMemFree(p))
    memhook.flush()
    cache = cache_mod.process_cache()

    rng = random.Random(SEED)
    cold = [keep[rng.randrange(len(keep))] + rng.randrange(ALLOC_BYTES) for _ in range(queries)]
    hot = cold[0]
    host_buf = np.zeros(HOST_BYTES, dtype=np.uint8)
    base = host_buf.ctypes.data
    host = [base + rng.randrange(HOST_BYTES) for _ in range(queries)]
    cold_arr = np.array(cold, dtype=np.uint64)
    sorted_arr = np.sort(cold_arr)  # (the core's search is much cheaper over sorted keys)
    host_arr = np.array(host, dtype=np.uint64)

    # Every answer about to be timed is right (the hooks saw every allocation).
    CUDA, HOST = MemoryType.CUDA, MemoryType.HOST
    assert all(memhook.memory_type(p) is CUDA for p in cold), "a device pointer is not CUDA"
    assert all(memhook.memory_type(p) is HOST for p in host), "a host pointer is not HOST"
    assert all(memhook.memory_type(p + ALLOC_BYTES // 2) is HOST for p in drop[:100])
    assert all(memhook.lookup(p).mem_type is CUDA for p in cold[:1000])  # type: ignore[union-attr]
    assert (memhook.memory_types(cold_arr) == CUDA).all()
    assert (memhook.memory_types(host_arr) == HOST).all()
    attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    get_attr = cu.cuPointerGetAttribute
    device_answer = get_attr(attr, hot)
    assert device_answer[0] == cu.CUresult.CUDA_SUCCESS, device_answer
    assert device_answer[1] == cu.CUmemorytype.CU_MEMORYTYPE_DEVICE, device_answer
    assert get_attr(attr, host[0])[0] == cu.CUresult.CUDA_ERROR_INVALID_VALUE

    # (memory_types' batch without the Python around it: the core's call alone)
    from memhook._binding.core import ffi, lib
    codes = np.empty(queries, dtype=np.uint8)
    consume: Any = collections.deque(maxlen=0).extend
    clock = time.perf_counter_ns
    memory_type, lookup, memory_types = memhook.memory_type, memhook.lookup, memhook.memory_types

    work: dict[str, tuple[Any, int]] = {
        "dev_cold": (lambda: consume(map(memory_type, cold)), queries),
        "dev_hot": (lambda: consume(map(memory_type, same(hot, queries))), queries),
        "host": (lambda: consume(map(memory_type, host)), queries),
        "lookup_cold": (lambda: consume(map(lookup, cold)), queries),
        "batch_dev": (lambda: memory_types(cold_arr), queries),
        "batch_dev_core": (lambda: lib.memhook_query_types(
            ffi.from_buffer("uint64_t[]", cold_arr), queries, ffi.from_buffer("uint8_t[]", codes)),
            queries),
        "batch_dev_sorted": (lambda: memory_types(sorted_arr), queries),
        "batch_host": (lambda: memory_types(host_arr), queries),
        "cu_dev_cold": (lambda: consume(map(get_attr, same(attr), cold)), queries),
        "cu_dev_hot": (lambda: consume(map(get_attr, same(attr), same(hot, queries))), queries),
        "cu_host": (lambda: consume(map(get_attr, same(attr), host)), queries),
    }
    objects = _objects(cu, keep, queries)
    for kind, (objs, want) in objects.items():
        try:
            memory_type(objs[0])
        except TypeError:
            continue  # a build that refuses this kind (a baseline): not measured, "-"
        assert all(memory_type(o) is want for o in objs[:256]), kind
        work[f"obj {kind}"] = ((lambda objs=objs: consume(map(memory_type, objs))), queries)
    # What reading the interfaces alone costs (the goal for those objects is
    # this plus 200 ns).
    cai = objects["cuda_array_interface (dev)"][0]
    cupy_like = objects["cuda_array_interface as CuPy (dev)"][0]
    dlp = objects["dlpack (host)"][0]
    work["iface cuda_array_interface"] = (
        lambda: consume(o.__cuda_array_interface__ for o in cai), queries)
    work["iface cuda_array_interface as CuPy (dev)"] = (
        lambda: consume(o.__cuda_array_interface__ for o in cupy_like), queries)
    if "cupy array (dev)" in objects:
        work["iface cupy array (dev)"] = (lambda objs=objects["cupy array (dev)"][0]: consume(
            o.__cuda_array_interface__ for o in objs), queries)
    # (a consumer asks the device first, for the stream, then for a versioned
    # capsule: both are the protocol's reading)
    work["iface dlpack"] = (lambda: consume((o.__dlpack_device__(), o.__dlpack__(
        max_version=(1, 0))) for o in dlp), queries)
    for kind in ("tensor-like (host)", "torch cpu tensor"):
        if kind in objects:
            work[f"iface {kind}"] = ((lambda objs=objects[kind][0]: consume(
                map(_read_tensor_iface, objs))), queries)
    grad = objects.get("torch cpu tensor (requires grad)")
    if grad is not None:
        work["iface torch cpu tensor (requires grad)"] = (
            lambda objs=grad[0]: consume(map(_read_tensor_methods, objs)), queries)
    ctypes_get_attr = _ctypes_driver_query()
    if ctypes_get_attr is not None:
        work["ctypes_driver_dev_cold"] = (lambda: consume(map(ctypes_get_attr, cold)), queries)
        work["ctypes_driver_host"] = (lambda: consume(map(ctypes_get_attr, host)), queries)
    best = dict.fromkeys(work, float("inf"))
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            for key, (fn, count) in work.items():
                t0 = clock()
                fn()
                best[key] = min(best[key], (clock() - t0) / count)
    finally:
        gc.enable()

    regions_in_cache = len(cache)
    status = memhook.status()
    for p in keep:
        ok(cu.cuMemFree(p))
    return {"mode": mode, "device": name,
            "installed_as_asked": report.mode == memhook.HookMode.parse(mode),
            "coverage_complete": bool(getattr(status, "coverage_complete", False)),
            "regions": regions_in_cache, "queries": queries,
            "memhook": os.path.dirname(memhook.__file__),
            "repeat": repeat, **best}


# --------------------------------------------------------------- the parent

def _run_mode(mode: str, args: argparse.Namespace, env: dict[str, str],
              python: str = sys.executable) -> dict[str, Any]:
    """One mode's figures from a child run by ``python`` (this interpreter,
    or the baseline's: another build of memhook, its own venv)."""
    cmd = [python, os.path.abspath(__file__), "--child", mode,
           "--regions", str(args.regions), "--queries", str(args.queries),
           "--repeat", str(args.repeat)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout,
                          check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"mode {mode}: the child exited {proc.returncode}\n"
                           f"{proc.stdout}{proc.stderr}")
    return json.loads(lines[-1][len(RESULT):])  # type: ignore[no-any-return]


def _ratio(base: float, ours: float) -> str:
    return f"{base / ours:.1f}x" if ours > 0 else "-"


def _print_table(rows: list[dict[str, Any]], driver: str) -> bool:
    first = rows[0]
    print(f"{driver}: {first['device']}; python {sys.version.split()[0]}; "
          f"{first['regions']} regions of {ALLOC_BYTES >> 10} KiB, {first['queries']} "
          f"pointers, best of {first['repeat']} rounds; ns per query (batch: per pointer)")
    head = ("| mode | dev cold | dev hot | host | lookup | batch dev | batch host "
            "| cuda-python dev cold | dev hot | host "
            "| speed-up dev cold | dev hot | host | host/dev | goal |")
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    met_all = True
    for r in rows:
        speed = (r["cu_dev_cold"] / r["dev_cold"], r["cu_dev_hot"] / r["dev_hot"],
                 r["cu_host"] / r["host"])
        host_per_dev = r["host"] / r["dev_cold"]
        met = (min(speed) >= 3.0 and host_per_dev <= 1.0
               and max(r["batch_dev"], r["batch_host"]) <= 20.0)
        met_all &= met
        print(f"| {r['mode']} | {r['dev_cold']:.0f} | {r['dev_hot']:.0f} | {r['host']:.0f} "
              f"| {r['lookup_cold']:.0f} | {r['batch_dev']:.1f} | {r['batch_host']:.1f} "
              f"| {r['cu_dev_cold']:.0f} | {r['cu_dev_hot']:.0f} | {r['cu_host']:.0f} "
              f"| {speed[0]:.1f}x | {speed[1]:.1f}x | {speed[2]:.1f}x | {host_per_dev:.2f} "
              f"| {'met' if met else 'MISSED'} |")
    print("batch dev: the cold pointers in random order; sorted, the same batch costs "
          + ", ".join(f"{r['batch_dev_sorted']:.1f}" for r in rows) + " ns a pointer")
    print()
    vouched = ", ".join(f"{r['mode']} {'yes' if r['coverage_complete'] else 'NO'}" for r in rows)
    print(f"coverage complete (host answers without asking the driver): {vouched}")
    print("goal (>= 3x cuda-python for dev cold, dev hot and host; host/dev <= 1.0; "
          f"batch <= 20 ns): {'met' if met_all else 'MISSED'}")
    return met_all


OBJECT_GOAL_NS = 300.0
INT_GOAL_NS = 100.0
BATCH_GOAL_NS = 8.0
IFACE_EXTRA_NS = 200.0


def _print_objects(rows: list[dict[str, Any]], base: list[dict[str, Any]]) -> bool:
    """memory_type of the objects users pass, this build beside the
    baseline's (measured in the same run, one mode after the other)."""
    print()
    print("memory_type of each object kind, ns per call (this build"
          + (", and the baseline's build beside it: "
             + base[0]["memhook"] if base else "") + "):")
    head = "| object | goal | " + " | ".join(
        r["mode"] + (" (baseline)" if b else "")
        for r in rows for b in ([False, True] if base else [False])) + " | met |"
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    keys = ["dev_cold", "host"] + [k for k in rows[0] if k.startswith("obj ")] + ["batch_dev"]
    met_all = True
    for key in keys:
        if key == "batch_dev":
            goal = BATCH_GOAL_NS
        elif key in ("dev_cold", "host"):
            goal = INT_GOAL_NS
        elif f"iface {key[4:]}" in rows[0]:
            goal = rows[0][f"iface {key[4:]}"] + IFACE_EXTRA_NS
        elif "cuda_array_interface" in key:
            goal = rows[0]["iface cuda_array_interface"] + IFACE_EXTRA_NS
        elif "dlpack" in key:
            goal = rows[0]["iface dlpack"] + IFACE_EXTRA_NS
        else:
            goal = OBJECT_GOAL_NS
        cells = []
        met = True
        for i, r in enumerate(rows):
            cells.append(f"{r[key]:.1f}" if key == "batch_dev" else f"{r[key]:.0f}")
            met &= r[key] <= goal
            if base:
                b = base[i].get(key)
                cells.append("-" if b is None else
                             (f"{b:.1f}" if key == "batch_dev" else f"{b:.0f}"))
        met_all &= met
        name = {"dev_cold": "int (dev, cold)", "host": "int (host)",
                "batch_dev": "memory_types, a pointer"}.get(key, key[4:])
        print(f"| {name} | {goal:.0f} | " + " | ".join(cells) + f" | {'met' if met else 'MISSED'} |")
    for what in ("iface cuda_array_interface", "iface cuda_array_interface as CuPy (dev)",
                 "iface cupy array (dev)", "iface dlpack", "iface tensor-like (host)",
                 "iface torch cpu tensor", "iface torch cpu tensor (requires grad)",
                 "ctypes_driver_dev_cold",
                 "ctypes_driver_host", "cu_dev_cold", "cu_host"):
        print(f"{what}: " + ", ".join(f"{r['mode']} {r[what]:.0f}" for r in rows if what in r)
              + " ns")
    print("memory_types' call into the core alone (memhook_query_types), ns a pointer: "
          + ", ".join(f"{r['mode']} {r['batch_dev_core']:.1f}" for r in rows) + " ns")
    print(f"goals (int <= {INT_GOAL_NS:.0f} ns; objects <= {OBJECT_GOAL_NS:.0f} ns; interfaces "
          f"<= reading them + {IFACE_EXTRA_NS:.0f} ns; batch <= {BATCH_GOAL_NS:.0f} ns a "
          f"pointer): {'met' if met_all else 'MISSED'}")
    return met_all


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--driver", choices=("auto", "sim", "real"), default="auto",
                   help="the real driver (needs a GPU), the simulator, or the real one if a "
                        "GPU is present (default)")
    p.add_argument("--mode", action="append", dest="modes", metavar="MODE",
                   help="a hook mode to measure (repeatable; default: each of "
                        f"{', '.join(MODES)})")
    p.add_argument("--regions", type=int, default=10_000, help="regions in the cache")
    p.add_argument("--queries", type=int, default=200_000, help="pointers per figure")
    p.add_argument("--repeat", type=int, default=5, help="rounds; each figure is the best")
    p.add_argument("--timeout", type=float, default=600, help="seconds per mode")
    p.add_argument("--json", action="store_true", help="also print each mode's figures as JSON")
    p.add_argument("--baseline-python", metavar="PYTHON",
                   help="also run every mode with this interpreter (another build of memhook, "
                        "e.g. main's in its own venv), interleaved with this one's")
    p.add_argument("--child", metavar="MODE", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in ("regions", "queries", "repeat"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.child:
        figures = _child(args.child, args.regions, args.queries, args.repeat)
        print(RESULT + json.dumps(figures), flush=True)
        return 0
    import memhook.sim
    from memhook.cli.demo import gpu_present

    driver = args.driver
    if driver == "auto":
        driver = "real" if gpu_present() else "sim"
    env = memhook.sim.environ() if driver == "sim" else dict(os.environ)
    env.pop("MEMHOOK_CUDA_MODE", None)  # the mode is install()'s argument
    modes = args.modes or list(MODES)
    rows: list[dict[str, Any]] = []
    base: list[dict[str, Any]] = []
    try:
        for mode in modes:
            rows.append(_run_mode(mode, args, env))
            if args.baseline_python:
                base.append(_run_mode(mode, args, env, args.baseline_python))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"cache_vs_driver: {exc}", file=sys.stderr)
        return 1
    _print_table(rows, "simulator" if driver == "sim" else "GPU")
    if base:
        print()
        print("baseline (" + base[0]["memhook"] + "):")
        _print_table(base, "simulator" if driver == "sim" else "GPU")
    _print_objects(rows, base)
    if args.json:
        for r in rows + base:
            print(RESULT + json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
