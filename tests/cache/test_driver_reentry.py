"""memhook._binding.driver's query is reentrant on one thread: a query made while
another is under way on the same thread - a Python signal handler runs
between any two bytecodes of the interrupted query - writes its answer into
argument blocks of its own, so the interrupted query reads its own answer.
(Sharing one block per thread, a handler's query of a host pointer made
the interrupted query of a live allocation answer HOST: seen under load in
tests/hooks/test_signal_queries.py.)

The driver's entry point is a stand-in here: it writes the attributes of a
made-up device allocation, and (once) runs a nested query of a host pointer
before it returns - where a signal handler could run."""

from __future__ import annotations

from typing import Any

from memhook import MemoryType
from memhook._binding import driver as _driver
from memhook._binding.core import ffi

DEVICE = 0x7F00_0000_0000
SIZE = 1 << 20
HOST_PTR = 0x1000


def stand_in_driver(nested: list[Any]) -> Any:
    """cuPointerGetAttributes for one device allocation at DEVICE; every
    other pointer is host memory (MEMORY_TYPE 0).  ``nested``: callables to
    run (each once) after the attributes are written."""
    values = {_driver._MEMORY_TYPE: 2, _driver._IS_MANAGED: 0, _driver._DEVICE_ORDINAL: 0,
              _driver._RANGE_START_ADDR: DEVICE, _driver._RANGE_SIZE: SIZE,
              _driver._MAPPING_BASE_ADDR: 0, _driver._MAPPING_SIZE: 0}

    def fn(count: int, attrs: Any, data: Any, ptr: int) -> int:
        inside = DEVICE <= ptr < DEVICE + SIZE
        for i in range(count):
            ffi.cast("uint64_t *", data[i])[0] = values[attrs[i]] if inside else 0
        while nested:
            nested.pop()()
        return 0

    return fn


def test_a_nested_query_does_not_change_the_interrupted_ones_answer() -> None:
    driver = _driver._Driver()
    nested_answers: list[Any] = []
    pending = [lambda: nested_answers.append(driver.query(HOST_PTR, 1))]
    driver._get_attributes = stand_in_driver(pending)
    answer = driver.query(DEVICE + 64, 1)
    assert nested_answers and nested_answers[0].mem_type is MemoryType.HOST
    assert answer == _driver.DriverAnswer(MemoryType.CUDA, 0, DEVICE, SIZE)
    # and is_cuda, the same way
    pending.append(lambda: nested_answers.append(driver.is_cuda(HOST_PTR)))
    assert driver.is_cuda(DEVICE + 1) is True and nested_answers[-1] is False
    assert driver.query(DEVICE, 1) == answer  # (the blocks were given back: reused)
    assert len(driver._local.free) == 2  # as many as the deepest nesting
