"""Which arguments memory_type and lookup read in C (csrc/pyext/query.c)
rather than through Python's normaliser (memhook._queries.inputs.byte_range), and
that the answers are the same either way.

A type is read in C once C has been shown, on an object of it, that its
reading gives what byte_range gives.  These tests count byte_range's calls:
after the first objects of a type, none.  The objects are those users pass
that C once left to Python on every call: PyTorch's tensors (an interface
that raises off the GPU, then DLPack with an IntEnum device type), a DLPack
producer that hands out legacy capsules, and a type whose first object is
empty."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hooks_api_testing import WINDOW, clean_events, normaliser_calls  # noqa: F401
from memhook_testing import hooks_installed  # noqa: F401

import memhook
from memhook import MemoryType, Region
from memhook._queries import query as _query
from memhook.cache import process_cache

pytestmark = pytest.mark.usefixtures("clean_events")

M = MemoryType
A = WINDOW + 0x3000_0000
SIZE = 1 << 20


class _DLDeviceType(enum.IntEnum):
    """As PyTorch's torch.utils.dlpack.DLDeviceType: an IntEnum, not an int."""

    kDLCPU = 1
    kDLCUDA = 2


@pytest.fixture
def device_region(hooks_installed: memhook.HookReport) -> Iterator[int]:
    """A CUDA region in the process cache (as the hooks would record it),
    recorded while the hooks are in: the queries answer from it, not from a
    driver an earlier test may have initialised."""
    cache = process_cache()
    cache.update(A, SIZE, M.CUDA, 0)
    yield A
    cache.remove(A, SIZE)


def _tensor_type() -> type:
    """A fresh type (C has learned nothing of it) that behaves as a PyTorch
    tensor does: __cuda_array_interface__ is a property raising
    AttributeError off the GPU; DLPack, with an IntEnum device type; a
    length; no buffer protocol, no __array_interface__."""

    class Tensor:
        def __init__(self, host: np.ndarray | None = None, device_ptr: int = 0) -> None:
            self._host, self._ptr = host, device_ptr

        def __len__(self) -> int:
            return 4 if self._host is None else len(self._host)

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            if self._host is not None:
                raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")
            return {"data": (self._ptr, False), "shape": (4,), "typestr": "<f4",
                    "strides": None, "version": 2}

        def __dlpack_device__(self) -> tuple[_DLDeviceType, int]:
            return (_DLDeviceType.kDLCPU, 0) if self._host is not None else (
                _DLDeviceType.kDLCUDA, 0)

        def __dlpack__(self, *, stream: Any = -1, max_version: Any = None) -> Any:
            if self._host is None:
                raise BufferError("no DLPack export of this device tensor in the test")
            assert stream in (None, -1), stream  # (a CPU tensor's stream: none, or -1)
            return self._host.__dlpack__(max_version=max_version)

    return Tensor


def test_cpu_tensors_are_read_in_c_after_the_first(normaliser_calls: list[Any]) -> None:
    tensor = _tensor_type()
    arrays = [np.zeros(16 + i, dtype=np.float32) for i in range(8)]
    for _ in range(20):
        for a in arrays:
            t = tensor(a)
            assert memhook.memory_type(t) is M.HOST
            assert memhook.lookup(t) is None
    assert len(normaliser_calls) == 1, f"{len(normaliser_calls)} calls into Python"


def test_device_and_cpu_tensors_of_one_type_are_both_read_in_c(
        normaliser_calls: list[Any], device_region: int) -> None:
    """Whichever kind comes first, the type is learned, and then both kinds
    are read in C: the interface where it answers, DLPack where it raises."""
    for first_on_device in (True, False):
        tensor = _tensor_type()
        host = np.zeros(32, dtype=np.float32)
        dev, cpu = tensor(device_ptr=device_region + 64), tensor(host)
        order = (dev, cpu) if first_on_device else (cpu, dev)
        del normaliser_calls[:]
        for _ in range(50):
            for t in order:
                want = M.CUDA if t is dev else M.HOST
                assert memhook.memory_type(t) is want
        assert memhook.lookup(dev) == Region(device_region, SIZE, M.CUDA, 0)
        assert len(normaliser_calls) == 1, (first_on_device, len(normaliser_calls))


class _LegacyDLPack:
    """A DLPack producer that ignores max_version and hands out legacy
    ("dltensor") capsules, as producers before DLPack 1.0 do."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._a.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def test_legacy_dlpack_capsules_are_read_in_c(normaliser_calls: list[Any]) -> None:
    arrays = [np.zeros((4, 5 + i), dtype=np.int16)[:, ::2] for i in range(8)]
    for _ in range(10):
        for a in arrays:
            assert memhook.memory_type(_LegacyDLPack(a)) is M.HOST
    assert len(normaliser_calls) == 1, f"{len(normaliser_calls)} calls into Python"


def test_a_type_whose_first_object_is_empty_is_still_learned(
        normaliser_calls: list[Any]) -> None:
    """C leaves an empty object to Python (its one byte at the data
    pointer); that refuses the type no longer: the next object teaches it."""
    class Wrapped(_LegacyDLPack):
        pass

    assert memhook.memory_type(Wrapped(np.zeros(0))) is M.HOST
    for i in range(50):
        assert memhook.memory_type(Wrapped(np.zeros(8 + i % 4))) is M.HOST
    assert len(normaliser_calls) == 2, f"{len(normaliser_calls)} calls into Python"


def test_a_type_c_cannot_read_is_given_up_after_a_few_objects(
        normaliser_calls: list[Any]) -> None:
    """A type C declines on every object costs C's attempt only on its
    first few objects: then it stays with Python, with the same answers."""
    class Odd:
        def __init__(self, a: np.ndarray) -> None:
            self._a = a

        def __dlpack__(self, **kwargs: Any) -> Any:
            return self._a.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> Any:
            return ["cpu", 0]  # (Python reads this form; C leaves it to Python)

    for _ in range(20):
        assert memhook.memory_type(Odd(np.zeros(4))) is M.HOST
    assert Odd in _query._refused and Odd not in _query._kinds
    assert len(normaliser_calls) == 20


@pytest.mark.parametrize("first", ["empty", "full"])
def test_torch_cpu_tensors_are_read_in_c_where_importable(
        normaliser_calls: list[Any], first: str) -> None:
    torch = pytest.importorskip("torch")
    if torch.Tensor in _query._kinds:
        del _query._kinds[torch.Tensor]
    _query._refused.discard(torch.Tensor)
    _query._declined.pop(torch.Tensor, None)
    tensors = [torch.zeros(16 + i) for i in range(8)]
    if first == "empty":
        tensors.insert(0, torch.zeros(0))
    for _ in range(10):
        for t in tensors:
            assert memhook.memory_type(t) is M.HOST
            assert memhook.lookup(t) is None
    # (an empty tensor is always Python's to answer: its byte at the data pointer)
    full = [t for t in normaliser_calls if t.numel()]
    assert len(full) == 1, f"{len(full)} calls into Python"


def test_lookup_makes_its_regions_without_calling_python(device_region: int) -> None:
    """Where Region's fields are slots (Python 3.10+), lookup builds its
    answer in C: the Python constructor is never called, and the answer is
    the frozen, hashable Region of the public API all the same."""
    if not _query._slotted(Region):
        pytest.skip("Region has no slots before Python 3.10: Python builds it")
    made: list[tuple] = []

    def counting(*args: Any) -> Region:
        made.append(args)
        return Region(*args)

    _query.query_configure(tuple(M), Region, counting, _query._normalise, _query._kinds)
    try:
        got = memhook.lookup(device_region + 5, 100)
        assert got == Region(device_region, SIZE, M.CUDA, 0)
        assert type(got) is Region and hash(got) == hash(Region(device_region, SIZE, M.CUDA, 0))
        assert got.mem_type is M.CUDA and got.end == device_region + SIZE
        with pytest.raises(AttributeError):
            got.size = 1  # type: ignore[misc]  # frozen
        assert repr(got) == f"Region(start={device_region:#x}, size={SIZE}, " \
                            "mem_type=CUDA, device=0)"
    finally:
        _query._configure()
    assert made == []


def _as_def(ptr: Any, size: Any = 1) -> None:
    """The signature memory_type and lookup stand for, as a def has it."""


def test_the_public_queries_are_the_builtins_called_as_their_def(device_region: int) -> None:
    """memory_type and lookup are query.c's builtins themselves, with no
    Python frame before C, and take their arguments as the documented def
    does: by position or keyword, with a def's errors; they carry its name,
    module, signature and docstring."""
    import inspect

    for fn in (memhook.memory_type, memhook.lookup):
        assert inspect.isbuiltin(fn), fn
        assert fn.__module__ == "memhook._queries.query"
        assert str(inspect.signature(fn)) == "(ptr, size=1)"
        assert ">>>" in (fn.__doc__ or "") and "Runtime complexity" in (fn.__doc__ or "")
    p, region = device_region + 64, Region(device_region, SIZE, M.CUDA, 0)
    for fn, want in ((memhook.memory_type, M.CUDA), (memhook.lookup, region)):
        assert fn(p) == fn(p, 16) == fn(p, size=16) == fn(ptr=p, size=16) == \
            fn(size=16, ptr=p) == fn(ptr=p) == want
        assert fn(np.uint64(p), size=np.int64(4)) == want
        with pytest.raises(ValueError):
            fn(p, size=0)  # (the keyword is read: size 0 is refused)
        name = fn.__name__
        for args, kwargs in (((p, 1, 2), {}), ((), {}), ((p,), {"ptr": p}),
                             ((p,), {"bogus": 1}), ((), {"size": 1}), ((p, 1), {"size": 1})):
            with pytest.raises(TypeError) as theirs:
                _as_def(*args, **kwargs)
            with pytest.raises(TypeError) as ours:
                fn(*args, **kwargs)
            assert str(ours.value) == str(theirs.value).replace("_as_def", name), (args, kwargs)


def test_a_type_removed_from_the_learned_kinds_goes_to_python_again(
        normaliser_calls: list[Any]) -> None:
    """C remembers the last learned type's kind; a type removed from the
    table (as the torch tests do, to learn it again) is not read in C from
    that memo: its next object goes to Python, which teaches it again."""
    class Forgotten(_LegacyDLPack):
        pass

    arrays = [np.zeros(8 + i) for i in range(4)]
    for a in arrays * 3:
        assert memhook.memory_type(Forgotten(a)) is M.HOST
    assert len(normaliser_calls) == 1 and Forgotten in _query._kinds
    del _query._kinds[Forgotten]
    for a in arrays * 3:
        assert memhook.memory_type(Forgotten(a)) is M.HOST
    assert len(normaliser_calls) == 2 and Forgotten in _query._kinds
