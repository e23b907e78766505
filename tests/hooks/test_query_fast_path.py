"""memory_type's and lookup's path: the argument normalised (in C for the
common forms: csrc/pyext/query.c), then one call into the core's cache.
They answer what memhook._queries.inputs and the cache's semantics say - for every
argument form, before and after C has learned its type - and never from a
state of the cache that an event published before the query has made old.

(These tests once warmed and checked a separate C fast path over a snapshot
of a Python cache; that path is gone with the Python process cache, and
they now check the same behaviour through the public functions.)"""

from __future__ import annotations

import ctypes
import queue
import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hooks_api_testing import ALLOC, FREE, WINDOW, clean_events, record  # noqa: F401
from memhook_testing import hooks_installed  # noqa: F401

import memhook
from memhook import MemoryType, MemtypeCache, Region
from memhook.cache import process_cache

pytestmark = pytest.mark.usefixtures("clean_events")

M = MemoryType
A = WINDOW + 0x2000_0000
SIZE = 1 << 20


@pytest.mark.usefixtures("hooks_installed")  # (they vouch for the regions recorded)
def test_a_region_is_answered_and_odd_arguments_are_refused() -> None:
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    for _ in range(3):
        assert memhook.memory_type(A + 100) is M.CUDA
        assert memhook.memory_type(A + SIZE - 1) is M.CUDA
    # In no region: HOST, which the hooks vouch for.
    assert memhook.memory_type(A + SIZE) is M.HOST
    assert memhook.memory_type(np.uint64(A)) is M.CUDA
    with pytest.raises(ValueError, match="negative"):
        memhook.memory_type(-1)
    with pytest.raises(ValueError, match="below 2"):
        memhook.memory_type(1 << 64)
    for odd in (True, float(A), np.float64(A), "0x1000", np.True_):
        with pytest.raises(TypeError):
            memhook.memory_type(odd)
    for ptr, size in ((A, 0), (A, -1), ((1 << 64) - 1, 2), (A, True), (A, 1.0)):
        with pytest.raises((TypeError, ValueError)):
            memhook.lookup(ptr, size)
    assert memhook.memory_type((1 << 64) - 1) is M.HOST
    assert memhook.lookup(np.uint64(A + 1), np.int64(4)) == Region(A, SIZE, M.CUDA, 0)


@pytest.mark.usefixtures("hooks_installed")  # (they vouch for the regions recorded)
def test_a_recorded_free_or_alloc_is_seen_at_once() -> None:
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    assert memhook.memory_type(A + 1) is M.CUDA
    assert memhook.lookup(A + 1) == Region(A, SIZE, M.CUDA, 0)
    record(FREE, "cuMemFree_v2", A, SIZE, M.CUDA, 0)
    assert memhook.memory_type(A + 1) is M.HOST
    assert memhook.lookup(A + 1) is None
    record(ALLOC, "cuMemAllocManaged", A + 4 * SIZE, SIZE, M.CUDA_MANAGED, 0)
    assert memhook.memory_type(A + 4 * SIZE + 7) is M.CUDA_MANAGED


@pytest.mark.usefixtures("hooks_installed")  # (they vouch for the regions recorded)
def test_lookup_answers_the_allocation_as_it_is_now() -> None:
    """lookup's Region follows its allocation: a part freed, the rest kept
    (its id too), the address reused with another type - never an answer
    made for the allocation as it was."""
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    for _ in range(3):
        assert memhook.lookup(A + SIZE - 1) == Region(A, SIZE, M.CUDA, 0)
    record(FREE, "cuMemUnmap", A, SIZE // 2, M.CUDA, 0)
    assert memhook.lookup(A + SIZE - 1) == Region(A + SIZE // 2, SIZE // 2, M.CUDA, 0)
    assert memhook.lookup(A) is None
    record(FREE, "cuMemFree_v2", A + SIZE // 2, SIZE // 2, M.CUDA, 0)
    record(ALLOC, "cuMemAllocManaged", A, SIZE, M.CUDA_MANAGED, 1)
    assert memhook.lookup(A + SIZE - 1) == Region(A, SIZE, M.CUDA_MANAGED, 1)


@pytest.mark.usefixtures("hooks_installed")  # (they vouch for the regions recorded)
def test_a_region_handed_over_by_another_thread_is_cuda_at_once() -> None:
    """Another thread records the allocation (as its hook would) and hands
    the pointer over; the receiver's first query is CUDA, and after the
    other thread's free and hand-over, HOST."""
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    handed: queue.Queue[tuple[str, int]] = queue.Queue()
    rounds = 300

    def other() -> None:
        for i in range(rounds):
            p = A + (2 + i % 7) * SIZE
            record(ALLOC, "cuMemAlloc_v2", p, SIZE, M.CUDA, 0)
            handed.put(("alloc", p))
            handed.join()  # (asked about before it is freed)
            record(FREE, "cuMemFree_v2", p, SIZE, M.CUDA, 0)
            handed.put(("free", p))
            handed.join()

    thread = threading.Thread(target=other)
    thread.start()
    wrong = []
    for _ in range(2 * rounds):
        what, p = handed.get(timeout=60)
        got = memhook.memory_type(p + 64)
        want = M.CUDA if what == "alloc" else M.HOST
        if got is not want:
            wrong.append((what, hex(p), got))
        assert memhook.memory_type(A) is M.CUDA
        handed.task_done()
    thread.join(60)
    assert not wrong, wrong[:10]


class _CudaArray:
    """An object offering __cuda_array_interface__ (as CuPy and Numba do)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str = "<f4",
                 strides: tuple[int, ...] | None = None) -> None:
        self._iface = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                       "strides": strides, "version": 3}

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self._iface


class _Handle:
    """A pointer handle with __int__ (as cuda-python's CUdeviceptr)."""

    def __init__(self, value: int) -> None:
        self._value = value

    def __int__(self) -> int:
        return self._value


def _forms(base: int, rnd: random.Random) -> list[Any]:
    host = np.zeros(64, dtype=np.float32)
    strided = np.zeros((8, 8), dtype=np.int16)[::2, ::-3]
    buf = (ctypes.c_char * 40)()
    return [
        base + rnd.randrange(SIZE), np.uint64(base + 5), np.int64(base + SIZE - 1),
        ctypes.c_uint64(base + 17), ctypes.c_void_p(base + 33), ctypes.c_void_p(None),
        ctypes.c_size_t(base + SIZE), _Handle(base + 99), _Handle(base - 1),
        host, host[3:17], strided, np.zeros(0), b"0123456789", b"", bytearray(12),
        memoryview(b"abcdef")[1:4], memoryview(host)[::4], buf, ctypes.c_double(1.5),
        _CudaArray(base + 64, (4, 4)), _CudaArray(base + SIZE - 8, (4,)),
        _CudaArray(base + 4096, (3, 5), "<f8", (-8 * 5, 8)), _CudaArray(base, (0,)),
    ]


@pytest.mark.usefixtures("hooks_installed")  # (they vouch for the regions recorded)
def test_every_argument_form_answers_as_the_reference_before_and_after_c_learns_it() -> None:
    """memory_type and lookup of ints, numpy and ctypes integers, ctypes
    pointers, pointer handles, numpy arrays (strided, negative strides,
    empty), bytes, bytearray, memoryviews, ctypes arrays and scalars and
    __cuda_array_interface__ objects: each answered as a MemtypeCache with
    the same regions answers it (the reference for the extent of every
    form), on the first object of its type (read in Python) and on later
    ones (read in C once learned)."""
    rnd = random.Random(7)
    ref = MemtypeCache()
    cache = process_cache()
    regions = [(A, SIZE, M.CUDA, 0), (A + 2 * SIZE, SIZE, M.CUDA_MANAGED, 1)]
    for r in regions:
        cache.update(*r)
        ref.update(*r)
    try:
        for round_ in range(4):
            base = A + (2 * SIZE if round_ % 2 else 0)
            for obj in _forms(base, rnd):
                want = ref.memory_type(obj)
                assert memhook.memory_type(obj) is want, (round_, type(obj), obj)
                assert memhook.lookup(obj) == ref.lookup(obj), (round_, type(obj), obj)
            for obj, size in ((ctypes.c_uint64(base + 8), 64), (np.uint32(7), 3),
                              (_Handle(base + SIZE - 4), 8)):
                assert memhook.memory_type(obj, size) is ref.memory_type(obj, size)
        with pytest.raises(ValueError, match="extent"):
            memhook.memory_type(b"abc", 2)
        with pytest.raises(ValueError, match="negative"):
            memhook.memory_type(ctypes.c_int64(-5))
        with pytest.raises(ValueError, match="typestr"):
            memhook.memory_type(_CudaArray(A, (4,), "no"))
    finally:
        for start, size, _, _ in regions:
            cache.remove(start, size)


def test_the_queries_agree_with_the_reference_at_every_bound() -> None:
    """Regions of every kind with gaps and touching neighbours, written into
    the process cache and into a MemtypeCache: at each region's first and
    last byte, one byte either side and a random byte inside, memory_type
    answers as the reference, and so does lookup of single bytes and of
    ranges around every region's ends.  With no hooks and no driver what
    the cache holds is the answer, UNKNOWN regions included: in one fresh
    child, for every count of regions (where a driver is loaded and
    initialised, as an earlier test may have done in this process, it
    resolves UNKNOWN)."""
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parent.parent)!r}]
        from test_query_fast_path import agree_at_every_bound
        with open("/proc/self/maps") as maps:
            assert "libcuda.so" not in maps.read(), "a driver is loaded"
        for n in (1, 3, 17, 64, 65, 1000):
            agree_at_every_bound(n)
        print("ALL OK")
        """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0 and "ALL OK" in proc.stdout, proc.stdout + proc.stderr


def agree_at_every_bound(n: int) -> None:
    """The check of test_the_queries_agree_with_the_reference_at_every_bound
    for n regions, in a process with no hooks and no driver."""
    rnd = random.Random(n)
    kinds = [M.CUDA, M.CUDA_MANAGED, M.CUDA_HOST, M.UNKNOWN]
    cache, ref = process_cache(), MemtypeCache()
    addr, regions = A, []
    for i in range(n):
        size = rnd.choice([1, 2, 4096, 1 << 16])
        regions.append((addr, size))
        # (touching neighbours differ in type or device: the reference merges
        # those that do not, the core keeps each allocation)
        cache.update(addr, size, kinds[i % len(kinds)], i % 3)
        ref.update(addr, size, kinds[i % len(kinds)], i % 3)
        addr += size + rnd.choice([0, 1, 64, 1 << 20])
    try:
        for start, size in regions:
            for p in (start - 1, start, start + 1, start + rnd.randrange(size),
                      start + size - 1, start + size):
                assert memhook.memory_type(p) is ref.memory_type(p), (n, hex(p))
            for p, m in ((start - 1, 1), (start, 1), (start, size), (start - 1, 2),
                         (start + size - 1, 1), (start + size - 1, 2), (start + size, 1)):
                assert memhook.lookup(p, m) == ref.lookup(p, m), (n, hex(p), m)
                assert cache.lookup(p, m) == ref.lookup(p, m), (n, hex(p), m)
        assert cache.regions() == ref.regions(), n
    finally:
        for start, size in regions:
            cache.remove(start, size)


@pytest.mark.parametrize("mode", ["bistro", "reloc", "bistro,reloc"])
def test_installed_hooks_host_answers_and_hand_over(native, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    mode: str) -> None:
    """Through install() and the simulator's real hooks: a host pointer is
    HOST while the hooks vouch, and after an object is loaded; a region
    another thread allocates and hands over is CUDA at once, and HOST once
    it frees it and says so; after uninstall() host memory is the driver's
    to say (HOST) and the allocations it still holds are CUDA."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""\
        import ctypes, os, queue, threading
        import numpy as np
        import memhook
        import memhook.sim
        from memhook import MemoryType as M
        report = memhook.install({mode!r})  # before the driver loads, as the bench does
        cu = memhook.sim.activate()
        def ok(rc):
            assert rc == 0, rc
        ok(cu.cuInit(0))
        dev = ctypes.c_int()
        ok(cu.cuDeviceGet(ctypes.byref(dev), 0))
        ctx = ctypes.c_void_p()
        ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        ok(cu.cuCtxSetCurrent(ctx))
        assert memhook.status().coverage_complete, memhook.status()
        def alloc():
            p = ctypes.c_uint64()
            ok(cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 16))
            return p.value
        keep = [alloc() for _ in range(100)]
        host = np.zeros(1 << 16, dtype=np.uint8)
        h = host.ctypes.data + 100
        assert memhook.memory_type(h) is M.HOST and memhook.memory_type(host) is M.HOST
        assert memhook.memory_type(keep[3] + 5) is M.CUDA
        def holds(region, p):
            return region is not None and region.mem_type is M.CUDA and \\
                region.start <= p and p + 16 <= region.start + region.size
        assert memhook.lookup(h) is None and holds(memhook.lookup(keep[3] + 5), keep[3])
        ctypes.CDLL(os.path.join(memhook.sim.library_dir(), "libcudart.so.13"))  # loaded now
        assert memhook.memory_type(h) is M.HOST
        handed = queue.Queue()
        def other():
            ok(cu.cuCtxSetCurrent(ctx))
            for _ in range(200):
                p = alloc()
                handed.put(("alloc", p))
                assert handed.join() is None
                ok(cu.cuMemFree_v2(ctypes.c_uint64(p)))
                handed.put(("free", p))
                handed.join()                      # (the next may reuse the address)
        t = threading.Thread(target=other)
        t.start()
        wrong = []
        for _ in range(400):
            what, p = handed.get(timeout=60)
            got = memhook.memory_type(p + 8)
            if got is not (M.CUDA if what == "alloc" else M.HOST):
                wrong.append((what, hex(p), got))
            region = memhook.lookup(p + 8, 8)
            if not (holds(region, p) if what == "alloc" else region is None):
                wrong.append(("lookup " + what, hex(p), region))
            assert memhook.memory_type(keep[3] + 5) is M.CUDA
            handed.task_done()
        t.join(60)
        assert not wrong, wrong[:5]
        for p in keep[1:]:
            ok(cu.cuMemFree_v2(ctypes.c_uint64(p)))
        memhook.uninstall()
        assert memhook.memory_type(h) is M.HOST        # the driver's answer now
        assert memhook.memory_type(keep[0] + 5) is M.CUDA
        print("ALL OK")
        """))
    proc = subprocess.run([sys.executable, str(script)], env=native.env(), capture_output=True,
                          text=True, timeout=180, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ALL OK"), (
        f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
