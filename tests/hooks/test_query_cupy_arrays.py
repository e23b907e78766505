"""CuPy arrays, as CuPy users pass them to memory_type and lookup: once the
type is learned, C reads an array through its own attributes (data.ptr,
shape, strides, itemsize) and never builds the ``__cuda_array_interface__``
dict CuPy makes afresh on every read - with exactly the extent that
interface gives, which memhook._queries.inputs.byte_range reads (the
reference).

CuPy is not needed: a module standing for it is put in ``sys.modules`` as
``cupy`` (memhook looks CuPy's ndarray up there, never importing it), whose
ndarray has CuPy's attributes and makes its interface as CuPy's
``_ndarray_base.__cuda_array_interface__`` does (cupy/_core/core.pyx): a
new dict, ``strides`` None when C-contiguous, ``data`` ``(0, False)`` when
empty.  The arrays lie in a region recorded as the hooks record a
``cuMemAlloc``; each test checks the extent read exactly: a region a byte
short of it answers UNKNOWN over the very range read."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hooks_api_testing import (ALLOC, FREE, WINDOW, clean_events,  # noqa: F401
                               forget_taught_types, normaliser_calls, record)
from memhook_testing import hooks_installed_module  # noqa: F401

import memhook
from memhook import MemoryType, Region
from memhook._queries import query as _query
from memhook._queries.inputs import byte_range
from memhook.cache import process_cache

pytestmark = pytest.mark.usefixtures("hooks_installed_module", "clean_events", "forget_taught_types")

M = MemoryType
A = WINDOW + 0x4000_0000
SIZE = 1 << 20


def _cupy_module() -> types.ModuleType:
    """A module standing for CuPy: ``ndarray`` (with a subclass, as
    ``cupy.ndarray`` subclasses ``cupy._core.core._ndarray_base``) and
    ``MemoryPointer``.  Each call makes new types, which C has learned
    nothing of.  ``interface_reads`` counts the interface dicts made."""
    cupy = types.ModuleType("cupy")
    cupy.interface_reads = 0  # type: ignore[attr-defined]

    class MemoryPointer:
        """As cupy.cuda.MemoryPointer: ``ptr`` is the address it points at."""

        __slots__ = ("ptr",)

        def __init__(self, ptr: Any) -> None:
            self.ptr = ptr

    class _ndarray_base:  # noqa: N801 - CuPy's name
        __slots__ = ("data", "dtype", "_shape", "_strides", "_c_contiguous")

        def __init__(self, shape: tuple[int, ...], dtype: Any, ptr: int,
                     strides: tuple[int, ...], c_contiguous: bool) -> None:
            self.data = MemoryPointer(ptr)
            self.dtype = np.dtype(dtype)
            self._shape, self._strides = list(shape), list(strides)
            self._c_contiguous = c_contiguous

        @property
        def shape(self) -> tuple[int, ...]:
            return tuple(self._shape)

        @property
        def strides(self) -> tuple[int, ...]:
            return tuple(self._strides)

        @property
        def itemsize(self) -> int:
            return int(self.dtype.itemsize)

        @property
        def size(self) -> int:
            return int(np.prod(self._shape, dtype=np.int64))

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            cupy.interface_reads += 1  # type: ignore[attr-defined]
            desc: dict[str, Any] = {"shape": self.shape, "typestr": self.dtype.str,
                                    "descr": self.dtype.descr}
            desc["stream"] = 1
            desc["version"] = 3
            desc["strides"] = None if self._c_contiguous else self.strides
            desc["data"] = (self.data.ptr if self.size > 0 else 0, False)
            return desc

        def __dlpack__(self, *, stream: Any = None, max_version: Any = None,
                       dl_device: Any = None, copy: Any = None) -> Any:
            raise BufferError("the stand-in for CuPy exports no DLPack capsule")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)  # kDLCUDA, device 0

        def __len__(self) -> int:
            return self._shape[0] if self._shape else 0

    class ndarray(_ndarray_base):  # noqa: N801 - CuPy's name
        __slots__ = ()

    ndarray.__module__ = _ndarray_base.__module__ = "cupy"
    cupy.ndarray = ndarray  # type: ignore[attr-defined]
    cupy.MemoryPointer = MemoryPointer  # type: ignore[attr-defined]
    return cupy


@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = _cupy_module()
    monkeypatch.setitem(sys.modules, "cupy", module)
    return module


@pytest.fixture
def device_region() -> Iterator[int]:
    """A cuMemAlloc'd region, recorded as its hook records it."""
    record(ALLOC, "cuMemAlloc_v2", A, SIZE, M.CUDA, 0)
    yield A
    record(FREE, "cuMemFree_v2", A, SIZE, M.CUDA, 0)


def like(cls: type, view: np.ndarray, base: np.ndarray, device: int) -> Any:
    """An array of ``cls`` laid out over device memory at ``device`` as
    ``view`` is over its numpy ``base`` (the same offset, shape, strides and
    dtype)."""
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return cls(view.shape, view.dtype, device + offset, view.strides,
               bool(view.flags.c_contiguous))


_BASE = np.zeros(4096, dtype=np.uint8)

# Views as CuPy makes them (a view's data pointer is its first element's),
# each over the first 4 KiB of the region: numpy computes the layouts.
LAYOUTS = {
    "contiguous": lambda b: b.view(np.float32),
    "2-d": lambda b: b.view(np.float64).reshape(16, 32),
    "offset slice": lambda b: b.view(np.float32)[100:300],
    "strided": lambda b: b.view(np.int16).reshape(32, 64)[3:20:2, 5::7],
    "negative strides": lambda b: b.view(np.float32).reshape(32, 32)[::-1, 30:2:-3],
    "transposed": lambda b: b.view(np.float32).reshape(16, 64)[:, 8:40].T,
    "single element": lambda b: b.view(np.complex128)[7:8],
    "0-d": lambda b: b.view(np.int32).reshape(1024)[5, ...],
    "structured": lambda b: b[:3600].view(np.dtype([("x", "<f4"), ("y", "<i8")]))[10:80],
    "broadcast row": lambda b: np.lib.stride_tricks.as_strided(
        b.view(np.float32)[16:48], shape=(5, 32), strides=(0, 4)),
}


def _extent_is_read_exactly(obj: Any) -> None:
    """memory_type and lookup answer over the interface's extent: CUDA with
    the region whole, UNKNOWN over that very range with a region recorded a
    byte short of it."""
    start, n = byte_range(obj)
    assert A <= start and start + n <= A + SIZE, (hex(start), n)
    assert memhook.memory_type(obj) is M.CUDA
    assert memhook.lookup(obj) == Region(A, SIZE, M.CUDA, 0)
    cache = process_cache()
    cache.remove(A, SIZE)
    try:
        cache.update(start, n - 1, M.CUDA, 0)
        assert memhook.lookup(obj) == Region(start, n, M.UNKNOWN, -1)
        assert memhook.memory_type(obj) is M.UNKNOWN
    finally:
        cache.remove(start, n - 1)
        cache.update(A, SIZE, M.CUDA, 0)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_cupy_arrays_are_read_through_their_attributes_over_the_interfaces_extent(
        layout: str, cupy: types.ModuleType, device_region: int,
        normaliser_calls: list[Any]) -> None:
    """After the first array (read in Python, which teaches C the type),
    no array's interface is built, and every answer is the interface's."""
    view = LAYOUTS[layout](_BASE)
    arrays = [like(cupy.ndarray, view, _BASE, device_region + 4096 * i) for i in range(8)]
    assert memhook.memory_type(arrays[0]) is M.CUDA  # the type learned
    reads = cupy.interface_reads
    for _ in range(3):
        for a in arrays:
            assert memhook.memory_type(a) is M.CUDA
            assert memhook.lookup(a) == Region(A, SIZE, M.CUDA, 0)
    assert cupy.interface_reads == reads, "C built the interface"
    assert len(normaliser_calls) == 1, f"{len(normaliser_calls)} calls into Python"
    assert _query._kinds.get(cupy.ndarray) == _query._KIND_CUPY
    for a in arrays:
        assert _query.query_extent(a, _query._KIND_CUPY) == byte_range(a)
        _extent_is_read_exactly(a)


@pytest.mark.parametrize("first", [True, False])
def test_an_empty_cupy_array_answers_as_its_interface_says(
        first: bool, cupy: types.ModuleType, device_region: int,
        normaliser_calls: list[Any]) -> None:
    """CuPy's interface gives an empty array the data pointer 0: HOST,
    though its data.ptr lies in a device region.  C leaves an empty array
    to Python, before the type is learned and after; a first empty array
    does not keep C from learning the type from the next."""
    full = like(cupy.ndarray, _BASE.view(np.float32), _BASE, device_region)
    empties = [like(cupy.ndarray, v, _BASE, device_region + 64) for v in (
        _BASE.view(np.float32)[5:5], _BASE.view(np.float32).reshape(32, 32)[:, 3:3],
        _BASE.view(np.float64).reshape(8, 64)[8:, ::2])]
    if not first:
        assert memhook.memory_type(full) is M.CUDA
    for e in empties:
        assert byte_range(e) == (0, 1)
        assert memhook.memory_type(e) is M.HOST
        assert memhook.lookup(e) is None
    for _ in range(3):
        assert memhook.memory_type(full) is M.CUDA
    assert _query._kinds.get(cupy.ndarray) == _query._KIND_CUPY
    assert len(normaliser_calls) == 2 * len(empties) + 1  # (memory_type and lookup each)


def test_an_attribute_that_fails_goes_to_python_as_before(
        cupy: types.ModuleType, device_region: int, normaliser_calls: list[Any]) -> None:
    """An array C cannot read through its attributes (a data pointer that
    is not an int, an attribute that raises, an extent past 2**64) is
    answered by Python's normaliser from the interface: the same answer,
    or the same error."""
    view = _BASE.view(np.float32)[8:200]
    good = like(cupy.ndarray, view, _BASE, device_region)
    assert memhook.memory_type(good) is M.CUDA
    assert _query._kinds.get(cupy.ndarray) == _query._KIND_CUPY
    del normaliser_calls[:]

    odd = like(cupy.ndarray, view, _BASE, device_region)
    odd.data.ptr = np.uint64(device_region + 32)  # (an address all the same, to Python)
    assert _query.query_extent(odd, _query._KIND_CUPY) is None
    assert memhook.memory_type(odd) is M.CUDA and byte_range(odd)[0] == device_region + 32
    assert len(normaliser_calls) == 1

    class Failing(cupy.ndarray):  # type: ignore[name-defined,misc]
        __slots__ = ()
        failing = ""  # the attribute that raises (once the type is learned)

        def __getattribute__(self, name: str) -> Any:
            if name == type(self).failing:
                raise RuntimeError(f"the stand-in cannot say its {name}")
            return super().__getattribute__(name)

    failing = like(Failing, view, _BASE, device_region)
    assert memhook.memory_type(failing) is M.CUDA  # (the type learned)
    assert _query._kinds.get(Failing) == _query._KIND_CUPY
    Failing.failing = "itemsize"  # (which the interface does not read)
    assert memhook.memory_type(failing) is M.CUDA
    assert memhook.lookup(failing) == Region(A, SIZE, M.CUDA, 0)
    Failing.failing = "data"  # (which it does: Python's error, naming it)
    with pytest.raises(TypeError, match="__cuda_array_interface__ raised RuntimeError"):
        memhook.memory_type(failing)
    assert len(normaliser_calls) == 5

    past_the_end = like(cupy.ndarray, _BASE.view(np.float32)[:192], _BASE, (1 << 64) - 256)
    with pytest.raises(ValueError, match="not a valid 64-bit address range"):
        memhook.memory_type(past_the_end)


def test_a_look_alike_whose_attributes_disagree_is_read_through_its_interface(
        monkeypatch: pytest.MonkeyPatch, device_region: int) -> None:
    """A module named cupy whose ndarray's data.ptr is not where its
    interface says the data lie (its interface adds an 'offset', which
    CuPy's never has): C is shown the disagreement on the first array and
    reads that type's arrays through the interface - every answer the
    interface's, none the attributes'."""
    fake = _cupy_module()
    base = fake.ndarray.__mro__[1]
    made = base.__cuda_array_interface__.fget

    def with_offset(self: Any) -> dict[str, Any]:
        return {**made(self), "offset": 4096}

    base.__cuda_array_interface__ = property(with_offset)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    view = _BASE.view(np.float32)[:256]
    # (the attributes put each array in the region's last 4 KiB, the
    # interface 4 KiB higher: past its end, in no region)
    arrays = [like(fake.ndarray, view, _BASE, device_region + SIZE - 4096 + 1024 * i)
              for i in range(4)]
    for _ in range(3):
        for a in arrays:
            assert memhook.memory_type(a) is M.HOST
            assert memhook.lookup(a) is None
    assert _query._kinds.get(fake.ndarray) == _query._KIND_CAI_DLPACK
    assert fake.ndarray in _query._misread  # (its attributes are never tried again)


def test_only_cupys_own_ndarray_is_read_through_its_attributes(
        cupy: types.ModuleType, device_region: int) -> None:
    """A class of the same shape that is not sys.modules['cupy'].ndarray,
    and a subclass of it that redefines an attribute C would read, are read
    through their interface: another library's data.ptr means what that
    library says."""
    other = _cupy_module().ndarray  # (named cupy.ndarray, but not the module's)

    class Redefined(cupy.ndarray):  # type: ignore[name-defined,misc]
        __slots__ = ()

        @property
        def itemsize(self) -> int:
            return 1

    class Kept(cupy.ndarray):  # type: ignore[name-defined,misc]
        __slots__ = ()

    view = _BASE.view(np.float32).reshape(16, 64)[2:9, ::3]
    for cls in (other, Redefined, Kept):
        a = like(cls, view, _BASE, device_region)
        for _ in range(2):
            assert memhook.memory_type(a) is M.CUDA
            assert memhook.lookup(a) == Region(A, SIZE, M.CUDA, 0)
        _extent_is_read_exactly(a)
    assert _query._kinds.get(other) == _query._KIND_CAI_DLPACK
    assert _query._kinds.get(Redefined) == _query._KIND_CAI_DLPACK
    assert _query._kinds.get(Kept) == _query._KIND_CUPY


def test_cupy_arrays_over_the_simulators_allocations_through_installed_hooks(
        native, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """As the field runs it: install(), the simulator's cuMemAlloc seen by
    the real hooks, arrays of every layout over that memory: CUDA, each
    lookup the allocation, no interface built after the type's first
    array; after cuMemFree, HOST."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""\
        import ctypes, sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parent.parent)!r}]
        import memhook
        import memhook.sim
        from memhook import MemoryType as M
        from memhook._queries import query as q
        memhook.install("bistro")
        cu = memhook.sim.activate()
        def ok(rc):
            assert rc == 0, rc
        ok(cu.cuInit(0))
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        ok(cu.cuDeviceGet(ctypes.byref(dev), 0))
        ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        ok(cu.cuCtxSetCurrent(ctx))
        from test_query_cupy_arrays import LAYOUTS, _BASE, _cupy_module, like
        cupy = sys.modules["cupy"] = _cupy_module()
        def alloc():
            p = ctypes.c_uint64()
            ok(cu.cuMemAlloc_v2(ctypes.byref(p), 1 << 16))
            return p.value
        ptrs = [alloc() for _ in range(4)]
        memhook.memory_type(like(cupy.ndarray, _BASE[:64], _BASE, ptrs[0]))  # (taught)
        assert q._kinds[cupy.ndarray] == q._KIND_CUPY
        reads = cupy.interface_reads
        for name, layout in LAYOUTS.items():
            arrays = [like(cupy.ndarray, layout(_BASE), _BASE, p) for p in ptrs]
            for a, p in zip(arrays * 3, ptrs * 3):
                assert memhook.memory_type(a) is M.CUDA, name
                r = memhook.lookup(a)
                assert (r.start, r.size, r.mem_type) == (p, 1 << 16, M.CUDA), (name, r)
        assert cupy.interface_reads == reads, "C built the interface"
        ok(cu.cuMemFree_v2(ctypes.c_uint64(ptrs[0])))
        a = like(cupy.ndarray, LAYOUTS["strided"](_BASE), _BASE, ptrs[0])
        assert memhook.memory_type(a) is M.HOST and memhook.lookup(a) is None
        print("ALL OK")
        """))
    proc = subprocess.run([sys.executable, str(script)], env=native.env(), capture_output=True,
                          text=True, timeout=180, cwd=tmp_path, check=False)
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("ALL OK"), (
        f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
