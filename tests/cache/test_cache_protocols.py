"""Array-protocol inputs people hold: a protocol attribute that raises falls
through to the next protocol (torch CPU tensors), malformed
__cuda_array_interface__/__array_interface__ dicts are refused with the key
and what is valid, and versioned DLPack capsules are read."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import memhook
from memhook import MemoryType, MemtypeCache, Region


class RaisingCai:
    """Like a torch CPU tensor: __cuda_array_interface__ is a property that
    raises, __array_interface__ is real (a host array)."""

    def __init__(self, a: np.ndarray, exc: type[Exception] = AttributeError) -> None:
        self.a, self.exc = a, exc

    @property
    def __cuda_array_interface__(self) -> dict:
        raise self.exc("Can't get __cuda_array_interface__ on non-CUDA tensor type")

    @property
    def __array_interface__(self) -> dict:
        return self.a.__array_interface__


def test_a_raising_protocol_property_falls_through() -> None:
    a = np.zeros(64, dtype=np.float32)
    c = MemtypeCache()
    c.update(a.ctypes.data, a.nbytes, MemoryType.CUDA_HOST, 0)
    for exc in (AttributeError, RuntimeError, TypeError):
        assert c.lookup(RaisingCai(a, exc)) == Region(a.ctypes.data, 256, MemoryType.CUDA_HOST, 0)
    assert memhook.memory_type(RaisingCai(np.zeros(10))) is MemoryType.HOST

    class OnlyRaising:
        @property
        def __cuda_array_interface__(self) -> dict:
            raise AttributeError("not on CUDA")

    with pytest.raises(TypeError, match="__cuda_array_interface__ raised AttributeError: not on"):
        c.memory_type(OnlyRaising())


def test_torch_cpu_tensor_where_importable() -> None:
    torch = pytest.importorskip("torch")
    t = torch.zeros(10)
    assert memhook.memory_type(t) is MemoryType.HOST
    assert MemtypeCache().memory_type(t) is MemoryType.HOST


class Iface:
    def __init__(self, name: str, iface: Any) -> None:
        setattr(self, name, iface)


BASE = 0x7F00_0000_0000
GOOD = {"data": (BASE, False), "shape": (4,), "typestr": "<f4", "version": 3}

MALFORMED = [
    ({"shape": (-1,)}, ValueError, r"\['shape'\]\[0\] is -1.*non-negative ints"),
    ({"shape": (1.5,)}, TypeError, r"\['shape'\]\[0\] must be an int.*float"),
    ({"shape": ("a",)}, TypeError, r"\['shape'\]\[0\] must be an int.*str"),
    ({"shape": 5}, TypeError, r"\['shape'\] must be a tuple of non-negative ints, not int"),
    ({"strides": (4,), "shape": (2, 2)}, ValueError, r"'strides'\] has 1 entries but 'shape' has 2"),
    ({"strides": (4.0,)}, TypeError, r"\['strides'\]\[0\] must be an int"),
    ({"shape": None}, TypeError, r"\['shape'\] must be a tuple"),
    ({"typestr": 4}, TypeError, r"\['typestr'\] must be a str such as '<f4'"),
    ({"typestr": "<Q9"}, ValueError, r"'typestr'\] '<Q9' is not an array-interface type string"),
    ({"data": ()}, TypeError, r"\['data'\] must be a \(pointer, read_only\) tuple, not \(\)"),
    ({"data": (BASE,)}, TypeError, r"\['data'\] must be a \(pointer, read_only\) tuple"),
    ({"data": ("x", False)}, TypeError, r"data pointer\) must be an int"),
    ({"offset": "8"}, TypeError, r"\['offset'\] must be an int"),
]


@pytest.mark.parametrize("name", ["__cuda_array_interface__", "__array_interface__"])
@pytest.mark.parametrize("change,exc,msg", MALFORMED)
def test_malformed_interfaces_name_the_key(name: str, change: dict, exc: type, msg: str) -> None:
    if name == "__array_interface__" and "data" in change and not change["data"]:
        change = {"data": ()}  # (a non-tuple data means "my own buffer" there)
    iface = {**GOOD, **change}
    with pytest.raises(exc, match=f"Iface.{name}" + r".*" + msg):
        MemtypeCache().memory_type(Iface(name, iface))


@pytest.mark.parametrize("name", ["__cuda_array_interface__", "__array_interface__"])
@pytest.mark.parametrize("key", ["shape", "typestr"])
def test_missing_required_keys(name: str, key: str) -> None:
    iface = {k: v for k, v in GOOD.items() if k != key}
    with pytest.raises(ValueError, match=f"has no '{key}' key; the protocol requires 'shape'"):
        MemtypeCache().memory_type(Iface(name, iface))


def test_typestr_item_sizes_follow_numpy() -> None:
    c = MemtypeCache()
    c.update(BASE, 64, MemoryType.CUDA, 0)
    # "<U4" is 4 UCS-4 characters: 16 bytes an item, so 4 of them are 64 bytes
    assert c.lookup(Iface("__cuda_array_interface__", {**GOOD, "typestr": "<U4"})) == Region(
        BASE, 64, MemoryType.CUDA, 0)
    assert c.memory_type(Iface("__cuda_array_interface__",
                               {**GOOD, "typestr": "<U4", "shape": (5,)})) is MemoryType.UNKNOWN
    for typestr, size in (("|b1", 1), ("<f8", 8), ("<c16", 16), ("|S3", 3), ("|V16", 16)):
        fits = {**GOOD, "typestr": typestr, "shape": (64 // size,)}
        assert c.memory_type(Iface("__cuda_array_interface__", fits)) is MemoryType.CUDA, typestr
        assert c.memory_type(Iface("__cuda_array_interface__",
                                   {**GOOD, "typestr": typestr, "shape": (64 // size + 1,)})) \
            is MemoryType.UNKNOWN, typestr


def test_versioned_dlpack_capsules_are_read() -> None:
    a = np.arange(64, dtype=np.uint32)
    capsule = a.__dlpack__(max_version=(1, 0))
    assert "dltensor_versioned" in repr(capsule)  # numpy offers the versioned form
    del capsule

    class VersionedOnly:
        def __init__(self, arr: np.ndarray) -> None:
            self.arr = arr

        def __dlpack__(self, *, stream: Any = None, max_version: Any = None) -> Any:
            if max_version is None:
                raise BufferError("this producer exports versioned capsules only")
            return self.arr.__dlpack__(max_version=max_version)

        def __dlpack_device__(self) -> Any:
            return self.arr.__dlpack_device__()

    c = MemtypeCache()
    c.update(a.ctypes.data, a.nbytes, MemoryType.CUDA_HOST, 0)
    assert c.lookup(VersionedOnly(a)) == Region(a.ctypes.data, 256, MemoryType.CUDA_HOST, 0)
    assert c.memory_type(VersionedOnly(a[8:16])) is MemoryType.CUDA_HOST
    assert c.memory_type(VersionedOnly(np.zeros(4))) is MemoryType.HOST


MASKED_SCRIPT = r"""
import ctypes, json, sys
ctypes.CDLL("libcuda.so.1")  # the simulator: the module-level query asks it on a miss
import numpy as np
import memhook
from memhook import MemoryType, MemtypeCache
from memhook.cache import process_cache

a = np.zeros(100)
p = a.ctypes.data
process_cache().update(p, 800, MemoryType.CUDA_HOST, 0)
own = MemtypeCache()
own.update(p, 800, MemoryType.CUDA_HOST, 0)
cases = [
    np.ma.masked_array(np.array([p, p + 8, 0, 1 << 40], dtype=np.uint64), mask=[0, 1, 0, 1]),
    np.ma.masked_array(np.array([[p, 1 << 40]], dtype=np.uint64), mask=[[0, 1]]),
    np.ma.masked_array(np.array([-5, p], dtype=np.int64), mask=[1, 0]),
    np.ma.masked_array(np.array([p, 2], dtype=object), mask=[0, 1]),
]
out = []
for m in cases:
    got = []
    for f in (memhook.memory_types, own.memory_types):
        try:
            r = f(m)
            got.append([type(r).__name__, r.tolist()])
        except Exception as exc:
            got.append(["error", type(exc).__name__, str(exc)])
    out.append(got)
print(json.dumps(out))
"""


def test_masked_arrays_alike_in_module_and_cache(native) -> None:
    """The mask is ignored alike by both (the module-level query used to
    fail with MaskError on a masked element it asked the driver about)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", MASKED_SCRIPT], env=native.env(),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    for module_level, cache in results:
        assert module_level == cache
    assert results[0][0] == ["ndarray", [3, 3, 0, 0]]
    assert results[1][0] == ["ndarray", [[3, 0]]]
    assert results[2][0][:2] == ["error", "ValueError"] and "ptrs[0] is negative" in results[2][0][2]
    assert results[3][0] == ["ndarray", [3, 0]]
