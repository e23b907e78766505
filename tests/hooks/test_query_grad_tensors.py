"""PyTorch tensors that require grad, as training code passes them: both
protocols refuse such a tensor (``__cuda_array_interface__`` and
``__dlpack__`` raise), yet memory_type, lookup and MemtypeCache answer for
the tensor's memory, read through torch's own methods (data_ptr, shape,
stride, element_size) - in C once the type is learned.

The extent each query reads is checked exactly: a region recorded over it
answers lookup as that region, and one a byte short answers UNKNOWN over
the very range read (a range running past an allocation's end).  The
reference extent is the protocols' own, read from ``t.detach()``.

The hooks are installed for the module's tests, as in the field: the regions the
tests record are then what the queries answer from, and memory in none is
HOST, whether or not a driver is loaded and initialised in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hooks_api_testing import clean_events, normaliser_calls  # noqa: F401
from memhook_testing import hooks_installed_module  # noqa: F401

import memhook
from memhook import MemoryType, MemtypeCache, Region
from memhook._queries import query as _query
from memhook._queries.inputs import byte_range
from memhook.cache import process_cache

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("hooks_installed_module", "clean_events")

M = MemoryType

# Tensors that require grad, each with storage of its own (the regions the
# tests record must not overlap another test's).
TENSORS: dict[str, Callable[[], Any]] = {
    "whole": lambda: torch.zeros(3, requires_grad=True),
    "parameter": lambda: torch.nn.Parameter(torch.zeros(5, 7)),
    "view of a leaf": lambda: torch.zeros(64, requires_grad=True)[8:24],
    "non-leaf result": lambda: torch.zeros(4, 4, requires_grad=True) * 2,
    "non-contiguous": lambda: torch.zeros(6, 10, dtype=torch.float64, requires_grad=True)[1:5, 2::3],
    "transposed": lambda: torch.zeros(3, 8, requires_grad=True).t(),
    "0-dim": lambda: torch.tensor(1.5, requires_grad=True),
}


@pytest.fixture
def learned_afresh() -> Iterator[None]:
    """C has learned nothing of torch's tensor types: the first object of
    each goes through Python, as in a new process."""
    def forget() -> None:
        for cls in (torch.Tensor, torch.nn.Parameter):
            _query._kinds.pop(cls, None)
            _query._refused.discard(cls)
            _query._declined.pop(cls, None)
    forget()
    yield
    forget()


def _protocols_extent(t: Any) -> tuple[int, int]:
    """What the protocols say of the same memory (DLPack, for a CPU tensor
    that does not require grad)."""
    d = t.detach()
    assert not d.requires_grad
    return byte_range(d)


def _refuse_both(t: Any) -> None:
    """The premise: neither protocol gives this tensor's memory."""
    with pytest.raises(Exception):  # noqa: B017,PT011 - AttributeError or RuntimeError
        t.__cuda_array_interface__  # noqa: B018
    with pytest.raises((BufferError, RuntimeError)):
        t.__dlpack__()


@pytest.mark.parametrize("name", list(TENSORS))
def test_a_tensor_that_requires_grad_is_read_over_its_extent(
        name: str, learned_afresh: None, normaliser_calls: list[Any]) -> None:
    tensors = [TENSORS[name]() for _ in range(4)]
    for t in tensors:
        assert t.requires_grad
        _refuse_both(t)
    cache = process_cache()
    for t in tensors:
        start, n = _protocols_extent(t)
        assert memhook.memory_type(t) is M.HOST
        assert memhook.lookup(t) is None
        mine = MemtypeCache()
        try:
            cache.update(start, n, M.CUDA_MANAGED, 0)
            mine.update(start, n, M.CUDA_MANAGED, 0)
            assert memhook.memory_type(t) is M.CUDA_MANAGED
            assert memhook.lookup(t) == Region(start, n, M.CUDA_MANAGED, 0)
            assert mine.lookup(t) == Region(start, n, M.CUDA_MANAGED, 0)
            assert n > 1
            cache.remove(start + n - 1, 1)  # a byte short: UNKNOWN over the range read
            mine.remove(start + n - 1, 1)
            assert memhook.lookup(t) == Region(start, n, M.UNKNOWN, -1)
            assert mine.lookup(t) == Region(start, n, M.UNKNOWN, -1)
            assert memhook.memory_type(t) is M.UNKNOWN
        finally:
            cache.remove(start, n)
    # the type is learned from its first object: the others are read in C
    assert len(normaliser_calls) == 1, f"{len(normaliser_calls)} calls into Python"


def test_memory_types_of_a_batch_holding_such_a_tensor_points_to_the_single_queries() -> None:
    """memory_types takes addresses; an integer tensor cannot require grad,
    and a float one is no address: a tensor in a batch is refused, saying
    which queries read an object's extent."""
    with pytest.raises(TypeError, match=r"ptrs\[1\].*memory_type\(\) or lookup\(\)"):
        memhook.memory_types([0x1000, torch.zeros(2, requires_grad=True)])


@pytest.mark.parametrize("first", [True, False])
def test_an_empty_tensor_that_requires_grad_answers_at_its_data_pointer(
        first: bool, learned_afresh: None) -> None:
    """As any empty object: the byte its data pointer points at, as the
    protocols give it for the same tensor without grad.  torch's data
    pointer of an empty tensor is NULL, a slice's too: HOST, even where the
    slice's base lies in a recorded region."""
    if not first:
        memhook.memory_type(torch.zeros(2, requires_grad=True))  # the type learned
    base = torch.zeros(8, requires_grad=True)
    empties = [torch.zeros(0, requires_grad=True), torch.zeros(3, 0, requires_grad=True),
               base[3:3]]
    cache = process_cache()
    cache.update(base.data_ptr(), 32, M.CUDA_MANAGED, 0)
    try:
        for t in empties:
            assert t.numel() == 0 and t.requires_grad
            assert byte_range(t) == _protocols_extent(t) == (0, 1)
            assert memhook.memory_type(t) is M.HOST
            assert memhook.lookup(t) is None
    finally:
        cache.remove(base.data_ptr(), 32)


def test_a_data_ptr_that_is_not_torchs_is_not_read() -> None:
    """The methods are read only on torch.Tensor and its subclasses (the
    class torch defines, found in sys.modules): another library's data_ptr
    means what that library says, so an object that looks like a tensor
    with a grad, but is not one, is refused as today, naming what raised."""

    class LooksLikeATensor:
        shape = (4,)

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            raise AttributeError("not on the GPU")

        def __dlpack__(self, **kwargs: Any) -> Any:
            raise BufferError("requires grad")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

        def __len__(self) -> int:
            return 4

        def data_ptr(self) -> int:
            return 0x7000_0000_0000

        def stride(self) -> tuple[int, ...]:
            return (1,)

        def element_size(self) -> int:
            return 4

    for query in (memhook.memory_type, memhook.lookup, MemtypeCache().memory_type):
        for _ in range(3):
            with pytest.raises(TypeError, match="__dlpack__ raised BufferError") as info:
                query(LooksLikeATensor())
            assert "data_ptr" not in str(info.value)
    assert LooksLikeATensor not in _query._kinds


def test_a_sparse_tensor_is_refused_naming_each_reading() -> None:
    """No strided storage, no extent: a clear error saying what each way of
    reading it raised."""
    s = torch.zeros(4).to_sparse().requires_grad_()
    with pytest.raises(TypeError, match=r"__dlpack__ raised.*data_ptr\(\) raised RuntimeError"):
        memhook.memory_type(s)


def test_memory_types_of_such_a_tensor_is_refused_clearly() -> None:
    """Given the tensor itself as the batch, the same: a TypeError naming
    the element, not torch's RuntimeError from ``__array__``."""
    with pytest.raises(TypeError, match=r"ptrs\[0\].*memory_type\(\) or lookup\(\)"):
        memhook.memory_types(torch.zeros(2, requires_grad=True))


def test_threads_querying_such_tensors_while_others_make_and_drop_them(
        learned_afresh: None) -> None:
    """Four threads ask about tensors that require grad (the first objects
    of the type among them, while C learns it) as two more make and drop
    tensors: every answer is the tensor's memory, and nothing raises."""
    import threading

    errors: list[BaseException] = []
    stop = threading.Event()

    def ask() -> None:
        try:
            mine = [torch.zeros(32 + i, requires_grad=True)[1:] for i in range(16)]
            for _ in range(200):
                for t in mine:
                    assert memhook.memory_type(t) is M.HOST
                    assert memhook.lookup(t) is None
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def churn() -> None:
        while not stop.is_set():
            ts = [torch.ones(64, requires_grad=True) * 2 for _ in range(8)]
            del ts

    churners = [threading.Thread(target=churn) for _ in range(2)]
    askers = [threading.Thread(target=ask) for _ in range(4)]
    for th in churners + askers:
        th.start()
    for th in askers:
        th.join()
    stop.set()
    for th in churners:
        th.join()
    assert not errors, errors
