"""Every pointer a user holds (issue 25): ctypes integers and pointers, and
pointer handles with ``__int__`` (cuda-python's CUdeviceptr), are the
address they hold; empty extents get the type at their data pointer; bad
batches and DLPack producers get messages about the argument, not
numpy's or CPython's internals; update() takes one documented set of
mem_type and device forms."""

from __future__ import annotations

import ctypes
import enum
import fractions
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, Callable

import numpy as np
import pytest
from memhook_testing import hooks_installed  # noqa: F401

import memhook
from memhook import MemoryType, MemtypeCache, Region
from memhook.cache import process_cache

DEV = 0x7F00_0000_0000  # a "device" range, recorded as the hooks would
DEV_SIZE = 0x10000


class DevicePtr:
    """What cuda-python's CUdeviceptr is: a plain object with __int__ (no
    __index__, no buffer), whose int is the device address."""

    def __init__(self, value: int) -> None:
        self._value = value

    def __int__(self) -> int:
        return self._value

    def getPtr(self) -> int:  # noqa: N802 - cuda-python's name; the address of the box
        return id(self)


class IndexPtr:
    """A pointer type with __index__ only (as CUstream/CUcontext have)."""

    def __init__(self, value: int) -> None:
        self._value = value

    def __repr__(self) -> str:  # (a test id that is the same in every run)
        return f"IndexPtr({self._value})"

    def __index__(self) -> int:
        return self._value


class TensorLike:
    """What a torch tensor exposes to memhook: __cuda_array_interface__ (a
    property), __dlpack__, __len__, and __int__/__index__ for one-element
    tensors - an extent, never an address."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str = "<f4") -> None:
        self._iface = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                       "strides": None, "version": 3}

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self._iface

    def __dlpack__(self, stream: Any = None) -> Any:  # pragma: no cover - CAI comes first
        raise BufferError("not used")

    def __len__(self) -> int:
        return self._iface["shape"][0] if self._iface["shape"] else 1

    def __int__(self) -> int:
        return 7

    def __index__(self) -> int:
        return 7


@pytest.fixture
def cache() -> MemtypeCache:
    c = MemtypeCache()
    c.update(DEV, DEV_SIZE, MemoryType.CUDA, 0)
    return c


@pytest.fixture
def in_process_cache(request: pytest.FixtureRequest) -> Iterator[None]:
    """The device range in the process cache, recorded while the hooks are
    in where the test asks the module-level queries: they answer from it
    (and HOST outside it), not from a driver an earlier test may have
    initialised."""
    if request.node.callspec.params.get("where") == "module":
        request.getfixturevalue("hooks_installed")
    process_cache().update(DEV, DEV_SIZE, MemoryType.CUDA, 0)
    try:
        yield
    finally:
        process_cache().remove(DEV, DEV_SIZE)


def _queries(cache: MemtypeCache, where: str) -> tuple[Callable[..., Any], Callable[..., Any],
                                                       Callable[..., Any]]:
    if where == "cache":
        return cache.memory_type, cache.lookup, cache.memory_types
    return memhook.memory_type, memhook.lookup, memhook.memory_types


WHERE = ["cache", "module"]


def _object_array(*values: object) -> np.ndarray:
    """An object array holding ``values`` as they are (np.array() would read
    a ctypes object through its buffer, and fails on a c_void_p's)."""
    arr = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        arr[i] = value
    return arr

# ----------------------------------------------------------------- ctypes

CTYPES_INTEGERS = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_ulonglong, ctypes.c_int64,
                   ctypes.c_ssize_t, ctypes.c_ulong, ctypes.c_void_p]


@pytest.mark.usefixtures("in_process_cache")
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("ctype", CTYPES_INTEGERS, ids=lambda t: t.__name__)
def test_a_ctypes_integer_is_the_address_it_holds(cache: MemtypeCache, where: str,
                                                   ctype: Any) -> None:
    memory_type, lookup, memory_types = _queries(cache, where)
    p = ctype(DEV + 0x80)
    assert memory_type(p) is MemoryType.CUDA  # was HOST: read as its own 8 bytes
    assert memory_type(p, 0x100) is MemoryType.CUDA
    assert memory_type(ctype(DEV + DEV_SIZE - 8), 16) is MemoryType.UNKNOWN  # runs past the end
    assert lookup(p) == Region(DEV, DEV_SIZE, MemoryType.CUDA, 0)
    assert memory_types([p, ctype(DEV + 1), DEV]).tolist() == [1, 1, 1]
    assert memory_types(_object_array(p, DEV + DEV_SIZE)).tolist() == [1, 0]


@pytest.mark.usefixtures("in_process_cache")
@pytest.mark.parametrize("where", WHERE)
def test_a_ctypes_pointer_object_is_the_address_it_points_to(cache: MemtypeCache,
                                                             where: str) -> None:
    memory_type, lookup, memory_types = _queries(cache, where)
    as_float_p = ctypes.cast(ctypes.c_void_p(DEV + 0x40), ctypes.POINTER(ctypes.c_float))
    assert memory_type(as_float_p) is MemoryType.CUDA
    assert lookup(as_float_p) == Region(DEV, DEV_SIZE, MemoryType.CUDA, 0)
    assert memory_types([as_float_p]).tolist() == [1]
    null = ctypes.POINTER(ctypes.c_float)()
    assert memory_type(null) is MemoryType.HOST and memory_type(ctypes.c_void_p()) is MemoryType.HOST
    # a c_char_p holds the address of its string: as registered host memory it is CUDA_HOST
    text = ctypes.create_string_buffer(b"abc", 64)
    c = MemtypeCache()
    c.update(ctypes.addressof(text), 64, MemoryType.CUDA_HOST, 0)
    assert c.memory_type(ctypes.cast(text, ctypes.c_char_p)) is MemoryType.CUDA_HOST
    assert c.memory_type(ctypes.c_char_p(ctypes.addressof(text) + 3)) is MemoryType.CUDA_HOST
    assert c.memory_type(ctypes.pointer(ctypes.c_int(5))) is MemoryType.HOST  # elsewhere


def test_other_ctypes_objects_are_still_their_own_storage() -> None:
    """A ctypes array or double holds no address: it is a buffer, looked up
    over its own bytes (create_string_buffer is how a C API's output goes)."""
    buf = ctypes.create_string_buffer(256)
    dbl = ctypes.c_double(1.5)
    c = MemtypeCache()
    c.update(ctypes.addressof(buf), 256, MemoryType.CUDA_HOST, 0)
    c.update(ctypes.addressof(dbl), 8, MemoryType.CUDA_HOST, 0)
    assert c.lookup(buf) == Region(ctypes.addressof(buf), 256, MemoryType.CUDA_HOST, 0)
    assert c.memory_type(dbl) is MemoryType.CUDA_HOST
    assert c.memory_type((ctypes.c_uint64 * 4)()) is MemoryType.HOST  # not recorded


# ------------------------------------------------------------ pointer handles

@pytest.mark.usefixtures("in_process_cache")
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("handle", [DevicePtr, IndexPtr])
def test_a_pointer_handle_is_its_int(cache: MemtypeCache, where: str, handle: type) -> None:
    memory_type, lookup, memory_types = _queries(cache, where)
    p = handle(DEV + 0x100)
    assert memory_type(p) is MemoryType.CUDA
    assert memory_type(p, 0x10) is MemoryType.CUDA
    assert lookup(p) == Region(DEV, DEV_SIZE, MemoryType.CUDA, 0)
    # memory_types([p, ...]) said "ptrs[0] must be an int, not CUdeviceptr"
    assert memory_types([p, handle(DEV + DEV_SIZE), handle(DEV)]).tolist() == [1, 0, 1]
    with pytest.raises(ValueError, match="negative"):
        memory_type(handle(-1))


@pytest.mark.usefixtures("in_process_cache")
@pytest.mark.parametrize("where", WHERE)
def test_cuda_pythons_own_cudeviceptr(cache: MemtypeCache, where: str) -> None:
    driver = pytest.importorskip("cuda.bindings.driver")
    memory_type, lookup, memory_types = _queries(cache, where)
    p = driver.CUdeviceptr(DEV + 0x200)
    assert memory_type(p) is MemoryType.CUDA
    assert lookup(p) == Region(DEV, DEV_SIZE, MemoryType.CUDA, 0)
    assert memory_types([p, driver.CUdeviceptr(0)]).tolist() == [1, 0]


def test_an_array_with_int_is_an_extent_not_an_address(cache: MemtypeCache) -> None:
    """A one-element tensor has __int__ and __index__; it is still asked
    about over its extent (7 is what int() of it says, not where it is)."""
    cache.update(0, 0x100, MemoryType.CUDA_MANAGED, 0)  # what address 7 would say
    assert cache.memory_type(TensorLike(DEV + 0x40, (4,))) is MemoryType.CUDA
    assert cache.lookup(TensorLike(DEV, (DEV_SIZE // 4,))) == Region(DEV, DEV_SIZE,
                                                                     MemoryType.CUDA, 0)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("value", [
    True, False, np.bool_(True), ctypes.c_bool(True), 1.0, np.float32(4096), 2.5j,
    fractions.Fraction(4096), Decimal(4096)], ids=repr)
def test_flags_and_non_integral_numbers_are_no_address(where: str, value: object) -> None:
    """A bool (any library's) is refused as an address, and so is a number
    that has __int__ but is not an integer."""
    memory_type, lookup, memory_types = _queries(MemtypeCache(), where)
    for f in (memory_type, lookup):
        with pytest.raises(TypeError, match=f"address must be an int, not {type(value).__name__}"):
            f(value)
    with pytest.raises(TypeError, match=r"ptrs\[1\] must be an int"):
        memory_types([0x1000, value, 0x2000])


def test_plain_and_numpy_ints_unchanged(cache: MemtypeCache) -> None:
    for p in (DEV, np.uint64(DEV), np.int64(DEV), IntAddress.DEV):
        assert cache.memory_type(p) is MemoryType.CUDA and cache.memory_type(p, 16) is MemoryType.CUDA
    assert cache.memory_types(np.array([DEV, 0], dtype=np.uint64)).tolist() == [1, 0]


class IntAddress(enum.IntEnum):
    DEV = 0x7F00_0000_0000


# ----------------------------------------------------------- empty extents

@pytest.mark.parametrize("where", WHERE)
def test_empty_host_objects_are_host(where: str) -> None:
    memory_type, lookup, _ = _queries(MemtypeCache(), where)
    for obj in (np.zeros(0), np.zeros((3, 0)), b"", bytearray(), memoryview(b""),
                DLPackOnly(np.zeros(0))):
        assert memory_type(obj) is MemoryType.HOST, obj  # raised "is empty (0 bytes)"
        assert lookup(obj) is None, obj


class DLPackOnly:
    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.a.__dlpack__()

    def __dlpack_device__(self) -> Any:
        return self.a.__dlpack_device__()


class ArrayInterface:
    def __init__(self, ptr: int, shape: tuple[int, ...]) -> None:
        self.__array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": "<f8",
                                    "version": 3}


@pytest.mark.usefixtures("in_process_cache")
@pytest.mark.parametrize("where", WHERE)
def test_an_empty_extent_is_the_type_at_its_data_pointer(cache: MemtypeCache,
                                                         where: str) -> None:
    memory_type, lookup, _ = _queries(cache, where)
    region = Region(DEV, DEV_SIZE, MemoryType.CUDA, 0)
    for obj in (TensorLike(DEV + 0x40, (0,)), TensorLike(DEV, (4, 0, 2)),
                ArrayInterface(DEV + 8, (0,))):
        assert memory_type(obj) is MemoryType.CUDA
        assert lookup(obj) == region
    # a NULL data pointer (what torch.empty(0, device="cuda") and CuPy give): HOST
    for obj in (TensorLike(0, (0,)), ArrayInterface(0, (0, 5))):
        assert memory_type(obj) is MemoryType.HOST
        assert lookup(obj) is None
    # just past the end of the allocation: what is there, host memory here
    assert memory_type(TensorLike(DEV + DEV_SIZE, (0,))) is MemoryType.HOST
    # a numpy empty array points at a real (host) allocation: what is recorded there counts
    a = np.zeros(0)
    own = MemtypeCache()
    own.update(a.ctypes.data, 16, MemoryType.CUDA_HOST, 0)
    assert own.memory_type(a) is MemoryType.CUDA_HOST
    assert own.lookup(DLPackOnly(a)) == Region(a.ctypes.data, 16, MemoryType.CUDA_HOST, 0)


def test_real_torch_empty_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    assert memhook.memory_type(torch.empty(0)) is MemoryType.HOST
    assert memhook.lookup(torch.zeros(3, 0)) is None
    assert memhook.memory_type(torch.zeros(8)[3:3]) is MemoryType.HOST


TORCH_CUDA_SCRIPT = r"""
import ctypes, torch, memhook
from memhook import MemoryType
memhook.install()
empty = torch.empty(0, device="cuda")
assert empty.data_ptr() == 0, empty.data_ptr()
assert memhook.memory_type(empty) is MemoryType.HOST   # a NULL data pointer
t = torch.empty(1024, device="cuda")
# an empty slice inside the allocation: PyTorch gives it no data pointer
# (data_ptr() 0, and 0 through __cuda_array_interface__ and DLPack alike;
# H200 run 2026-12-03), so it is asked about at NULL, as torch.empty(0)
assert t[5:5].data_ptr() == 0, t[5:5].data_ptr()
assert memhook.memory_type(t[5:5]) is MemoryType.HOST
assert memhook.memory_type(t) is MemoryType.CUDA
assert memhook.memory_type(ctypes.c_void_p(t.data_ptr() + 8)) is MemoryType.CUDA
from cuda.bindings import driver
assert memhook.memory_type(driver.CUdeviceptr(t.data_ptr())) is MemoryType.CUDA
assert memhook.memory_types([driver.CUdeviceptr(t.data_ptr()), t.data_ptr()]).tolist() == [1, 1]
print("OK")
"""


def test_real_torch_empty_cuda_tensors() -> None:
    """On a GPU (the lead's GPU run: pytest tests/cache -k torch), in a child
    so that install() stays out of the suite's process."""
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings.driver")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the GPU run covers torch.empty(0, device='cuda')")
    proc = subprocess.run([sys.executable, "-c", TORCH_CUDA_SCRIPT], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr


# ------------------------------------------------- messages about arguments

@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("ptrs,index", [
    ([np.zeros(3), b"x"], 0), ([1, np.zeros(2)], 1), ([0x1000, b"x"], 1),
    ([0x1000, bytearray(4), 5], 1), ([0x1000, [1, 2]], 1)])
def test_batches_of_objects_say_what_was_wrong(where: str, ptrs: list[Any], index: int) -> None:
    _, _, memory_types = _queries(MemtypeCache(), where)
    with pytest.raises(TypeError) as info:
        memory_types(ptrs)
    text = str(info.value)
    assert "only integer scalar arrays" not in text
    assert text.startswith(f"ptrs[{index}] must be an int, not {type(ptrs[index]).__name__}"), text
    assert "CUdeviceptr" in text  # what is valid


class NotACapsule:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __dlpack__(self, stream: Any = None, max_version: Any = None) -> Any:
        return self.value


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("value", [5, None, "dltensor", np.zeros(3)], ids=repr)
def test_a_dlpack_producer_returning_no_capsule_is_named(where: str, value: Any) -> None:
    memory_type, lookup, _ = _queries(MemtypeCache(), where)
    for f in (memory_type, lookup):
        with pytest.raises(TypeError) as info:
            f(NotACapsule(value))
        text = str(info.value)
        assert "PyCapsule_GetName" not in text
        assert f"NotACapsule.__dlpack__() returned {type(value).__name__}, not a DLPack " \
               "capsule" in text and "'dltensor'" in text, text


# ------------------------------------------------------ update()'s forms

class OtherKinds(enum.IntEnum):
    """Like cuda-python's CUmemorytype: other codes (its DEVICE is 2)."""
    HOSTISH = 1
    DEVICE = 2


class DeviceHandle:
    """What cuda-python's CUdevice is: __int__ only."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal

    def __repr__(self) -> str:  # (a test id that is the same in every run)
        return f"DeviceHandle({self.ordinal})"

    def __int__(self) -> int:
        return self.ordinal


@pytest.mark.parametrize("mem_type", [
    MemoryType.CUDA_HOST, 3, np.uint8(3), np.int64(3), ctypes.c_int(3), IndexPtr(3),
    "CUDA_HOST", "cuda_host"], ids=repr)
def test_update_takes_a_member_its_code_or_its_name(mem_type: Any) -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x100, mem_type, 0)
    assert c.lookup(0x1000) == Region(0x1000, 0x100, MemoryType.CUDA_HOST, 0)


@pytest.mark.parametrize("mem_type,exc,msg", [
    (True, TypeError, "mem_type must be a MemoryType, not bool .a bool is a flag"),
    (False, TypeError, "not bool"),
    (np.bool_(True), TypeError, "not bool"),
    (1.0, TypeError, "mem_type must be a MemoryType, not float"),
    (None, TypeError, "not NoneType"),
    (OtherKinds.DEVICE, TypeError, "not OtherKinds .another enumeration"),
    (b"CUDA", TypeError, "not bytes"),
    (9, ValueError, "mem_type 9 is not a MemoryType code"),
    (-1, ValueError, "mem_type -1 is not a MemoryType code"),
    ("GPU", ValueError, "mem_type 'GPU' is not a MemoryType name"),
    ("", ValueError, "is not a MemoryType name"),
])
def test_update_refuses_every_other_mem_type(mem_type: Any, exc: type, msg: str) -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x100, MemoryType.CUDA, 0)
    with pytest.raises(exc, match=msg) as info:
        c.update(0x1000, 0x100, mem_type, 0)
    assert "HOST, CUDA, CUDA_MANAGED, CUDA_HOST, UNKNOWN" in str(info.value)  # what is valid
    assert c.regions() == [Region(0x1000, 0x100, MemoryType.CUDA, 0)]  # nothing changed


def test_update_refuses_cuda_pythons_memorytype() -> None:
    driver = pytest.importorskip("cuda.bindings.driver")
    with pytest.raises(TypeError, match="another enumeration"):
        MemtypeCache().update(0x1000, 1, driver.CUmemorytype.CU_MEMORYTYPE_DEVICE)


@pytest.mark.parametrize("device,want", [
    (0, 0), (-1, -1), (np.int32(2), 2), (ctypes.c_int(3), 3), (DeviceHandle(1), 1),
    (IndexPtr(4), 4)], ids=repr)
def test_update_device_forms(device: Any, want: int) -> None:
    c = MemtypeCache()
    c.update(0x1000, 0x100, MemoryType.CUDA, device)
    assert c.lookup(0x1000) == Region(0x1000, 0x100, MemoryType.CUDA, want)


@pytest.mark.parametrize("device,exc,msg", [
    (True, TypeError, "device must be an int, not bool .a bool is a flag"),
    (np.bool_(False), TypeError, "not bool"),
    ("0", TypeError, "device must be an int, not str"),
    (1.0, TypeError, "device must be an int, not float"),
    (-2, ValueError, "device must be a device ordinal or -1"),
])
def test_update_refuses_other_devices(device: Any, exc: type, msg: str) -> None:
    c = MemtypeCache()
    with pytest.raises(exc, match=msg) as info:
        c.update(0x1000, 0x100, MemoryType.CUDA, device)
    assert "-1 (unknown)" in str(info.value)
    assert len(c) == 0


def test_update_and_remove_take_pointer_objects_for_start_and_size() -> None:
    c = MemtypeCache()
    c.update(DevicePtr(DEV), ctypes.c_size_t(DEV_SIZE), "CUDA", DeviceHandle(0))
    assert c.lookup(DEV) == Region(DEV, DEV_SIZE, MemoryType.CUDA, 0)
    c.remove(ctypes.c_void_p(DEV), np.uint64(0x1000))
    assert c.lookup(DEV + 0x1000) == Region(DEV + 0x1000, DEV_SIZE - 0x1000, MemoryType.CUDA, 0)
    with pytest.raises(TypeError, match="start must be an int, not bool"):
        c.update(True, 1, MemoryType.CUDA)
    with pytest.raises(TypeError, match="size must be an int, not bool"):
        c.remove(DEV, True)
