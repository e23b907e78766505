"""Argument checking, the public types, and object inputs."""

from __future__ import annotations

import numpy as np
import pytest

import memhook
import memhook.cache as cache_module
from memhook import MemoryType, MemtypeCache, Region


def test_memory_type_codes_and_is_gpu() -> None:
    assert [(t.name, int(t)) for t in MemoryType] == [
        ("HOST", 0), ("CUDA", 1), ("CUDA_MANAGED", 2), ("CUDA_HOST", 3), ("UNKNOWN", 4)]
    assert [t for t in MemoryType if t.is_gpu] == [MemoryType.CUDA, MemoryType.CUDA_MANAGED]
    assert not MemoryType.CUDA_HOST.is_gpu


def test_region_is_a_frozen_dataclass_with_end() -> None:
    import dataclasses
    r = Region(0x1000, 0x200, MemoryType.CUDA, 0)
    assert dataclasses.is_dataclass(r) and r.end == 0x1200
    assert [f.name for f in dataclasses.fields(r)] == ["start", "size", "mem_type", "device"]
    assert Region(1, 2, MemoryType.HOST).device == -1
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.start = 5  # type: ignore[misc]
    assert r == Region(0x1000, 0x200, MemoryType.CUDA, 0) and hash(r) == hash(
        Region(0x1000, 0x200, MemoryType.CUDA, 0))
    assert "0x1000" in repr(r) and "CUDA" in repr(r)


def test_public_names() -> None:
    for name in ("MemoryType", "Region", "MemtypeCache", "memory_type", "lookup",
                 "memory_types", "library_path", "__version__"):
        assert name in memhook.__all__ and hasattr(memhook, name)


BAD_POINTERS = [
    (-1, ValueError, "negative"),
    (1 << 64, ValueError, "below 2\\*\\*64"),
    (1.5, TypeError, "int, not float"),
    (4096.0, TypeError, "int, not float"),
    (True, TypeError, "int, not bool"),
    ("0x1000", TypeError, "str"),
    (None, TypeError, "NoneType"),
    ([1, 2], TypeError, "list"),
]


@pytest.mark.parametrize("func", ["cache", "module"])
@pytest.mark.parametrize("bad,exc,msg", BAD_POINTERS)
def test_bad_pointers_say_what_is_wrong(func, bad, exc, msg) -> None:  # type: ignore[no-untyped-def]
    c = MemtypeCache()
    c.update(0x1000, 0x1000, MemoryType.CUDA)
    for _ in range(cache_module.MEMO_SAMPLE):  # (the memo takes one answer in MEMO_SAMPLE)
        c.memory_type(4096)  # a memo for 4096 must not answer for 4096.0
    assert 4096 in c._flat[2]
    for f in ((c.memory_type, c.lookup) if func == "cache" else
              (memhook.memory_type, memhook.lookup)):
        with pytest.raises(exc, match=msg):
            f(bad)


@pytest.mark.parametrize("size,exc,msg", [
    (0, ValueError, "at least 1 byte"), (-5, ValueError, "at least 1 byte"),
    (1.0, TypeError, "size must be an int"), (True, TypeError, "size must be an int"),
    ("8", TypeError, "size must be an int"),
])
def test_bad_sizes(size, exc, msg) -> None:  # type: ignore[no-untyped-def]
    c = MemtypeCache()
    for f in (c.memory_type, c.lookup, memhook.memory_type, memhook.lookup):
        with pytest.raises(exc, match=msg):
            f(0x1000, size)
    with pytest.raises(exc, match=msg):
        c.update(0x1000, size, MemoryType.CUDA)
    with pytest.raises(exc, match=msg):
        c.remove(0x1000, size)


def test_bad_update_arguments() -> None:
    c = MemtypeCache()
    with pytest.raises(ValueError, match="runs past the end"):
        c.memory_type((1 << 64) - 1, 2)
    with pytest.raises(ValueError, match="not a MemoryType code"):
        c.update(0x1000, 1, 9)
    with pytest.raises(TypeError, match="mem_type must be a MemoryType"):
        c.update(0x1000, 1, 1.0)
    with pytest.raises(ValueError, match="device must be"):
        c.update(0x1000, 1, MemoryType.CUDA, -2)
    with pytest.raises(TypeError, match="device must be an int"):
        c.update(0x1000, 1, MemoryType.CUDA, "0")
    with pytest.raises(ValueError, match="negative"):
        c.update(-1, 1, MemoryType.CUDA)
    c.update(0x1000, 1, 2, np.int32(1))  # int codes and numpy ints are fine
    assert c.lookup(0x1000) == Region(0x1000, 1, MemoryType.CUDA_MANAGED, 1)
    assert c.memory_type(np.uint64(0x1000), np.int64(1)) is MemoryType.CUDA_MANAGED


def test_bad_batches() -> None:
    c = MemtypeCache()
    with pytest.raises(ValueError, match=r"ptrs\[1\] is negative"):
        c.memory_types(np.array([1, -1]))
    with pytest.raises(TypeError, match="float64"):
        c.memory_types(np.array([1.0]))
    with pytest.raises(TypeError, match=r"ptrs\[0\] must be an int, not float"):
        c.memory_types([1.5])
    with pytest.raises(ValueError, match="below 2"):
        c.memory_types([1 << 64])
    with pytest.raises(TypeError, match="sequence of int"):
        c.memory_types("abc")
    assert c.memory_types([0, (1 << 64) - 1]).tolist() == [0, 0]


# ------------------------------------------------------------ object inputs

class FakeCudaArray:
    """What CuPy/Numba/PyTorch expose (v3 interface), with device pointers."""

    def __init__(self, ptr: int, shape, typestr="<f4", strides=None) -> None:  # type: ignore[no-untyped-def]
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": shape, "typestr": typestr,
            "strides": strides, "version": 3}


def _cache_with_device_range() -> MemtypeCache:
    c = MemtypeCache()
    c.update(0x7F00_0000_0000, 0x10000, MemoryType.CUDA, 0)
    return c


def test_cuda_array_interface_whole_extent() -> None:
    c = _cache_with_device_range()
    base = 0x7F00_0000_0000
    assert c.lookup(FakeCudaArray(base, (16, 1024))) == Region(base, 0x10000, MemoryType.CUDA, 0)
    assert c.memory_type(FakeCudaArray(base + 0x100, (100,))) is MemoryType.CUDA
    # one element past the end of the allocation: straddles
    assert c.memory_type(FakeCudaArray(base, (16385,))) is MemoryType.UNKNOWN
    # strided: 4 rows of 4 bytes, 0x4000 apart -> covers [base, base + 0xC004)
    assert c.memory_type(FakeCudaArray(base, (4, 1), strides=(0x4000, 4))) is MemoryType.CUDA
    assert c.memory_type(FakeCudaArray(base, (5, 1), strides=(0x4000, 4))) is MemoryType.UNKNOWN
    # negative strides reach below the data pointer
    assert c.memory_type(FakeCudaArray(base + 0xC000, (4,), strides=(-0x4000,))) is MemoryType.CUDA
    assert c.memory_type(FakeCudaArray(base + 0x100, (4,), strides=(-0x100,))) is MemoryType.UNKNOWN
    # empty: the byte at its data pointer (tests/cache/test_cache_pointers.py has more)
    assert c.memory_type(FakeCudaArray(base, (0, 3))) is MemoryType.CUDA
    with pytest.raises(ValueError, match="size is taken from"):
        c.memory_type(FakeCudaArray(base, (4,)), 8)


def test_host_objects_are_host_and_their_extent_is_used() -> None:
    a = np.zeros(1000, dtype=np.float64)
    c = MemtypeCache()
    assert c.memory_type(a) is MemoryType.HOST
    assert c.lookup(a) is None
    ptr = a.ctypes.data
    c.update(ptr, a.nbytes, MemoryType.CUDA_HOST, 0)  # as if registered
    for obj in (a, a[10:20], a[::7], memoryview(a), a.reshape(10, 100).T):
        assert c.memory_type(obj) is MemoryType.CUDA_HOST, obj
    assert c.lookup(a[::-1]) == Region(ptr, a.nbytes, MemoryType.CUDA_HOST, 0)
    c.remove(ptr + 8 * 500, 8)
    assert c.memory_type(a) is MemoryType.UNKNOWN  # a hole in the middle
    assert c.memory_type(a[:500]) is MemoryType.CUDA_HOST


def test_bytearray_memoryview_bytes_and_dlpack() -> None:
    buf = bytearray(256)
    mv = memoryview(buf)
    arr = np.frombuffer(buf, dtype=np.uint8)
    ptr = arr.ctypes.data
    c = MemtypeCache()
    c.update(ptr, 256, MemoryType.CUDA_HOST, 0)
    assert c.lookup(buf) == Region(ptr, 256, MemoryType.CUDA_HOST, 0)
    assert c.memory_type(mv[16:32]) is MemoryType.CUDA_HOST
    assert c.memory_type(mv[::2]) is MemoryType.CUDA_HOST
    assert c.memory_type(memoryview(buf).cast("I")) is MemoryType.CUDA_HOST
    assert c.memory_type(bytes(10)) is MemoryType.HOST
    # DLPack only (no __array_interface__): numpy's own DLPack export
    class DLOnly:
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __dlpack__(self, stream=None):  # type: ignore[no-untyped-def]
            return self.a.__dlpack__()

        def __dlpack_device__(self):  # type: ignore[no-untyped-def]
            return self.a.__dlpack_device__()

    assert c.lookup(DLOnly(arr)) == Region(ptr, 256, MemoryType.CUDA_HOST, 0)
    assert c.memory_type(DLOnly(arr.view(np.uint32)[4:8])) is MemoryType.CUDA_HOST
    assert c.memory_type(DLOnly(np.zeros(3))) is MemoryType.HOST
    assert c.memory_type(bytearray()) is MemoryType.HOST  # empty: where it points, host memory


def test_module_level_functions_on_plain_host_memory() -> None:
    a = np.arange(10)
    assert memhook.memory_type(a) is MemoryType.HOST
    assert memhook.lookup(a) is None
    assert memhook.memory_types(np.array([a.ctypes.data, 0], dtype=np.uint64)).tolist() == [0, 0]
