"""A ^C that lands while memory_type or lookup reads an object reaches the
caller, whichever reader C uses for the object's type: the interface
property, DLPack's methods, ``__index__``, ``__int__``, a CuPy-shaped
array's attributes.  C answers what it can read and leaves the rest to the
Python normaliser, clearing a reader's error; a KeyboardInterrupt raised
inside the producer's Python code is no reader's error - Python's own
normaliser (which catches ``Exception`` only) lets it through, and so must C.

Each object raises KeyboardInterrupt once, on demand, as a signal handler
would; before C kept it aside the Python path read the object again and
answered, and the ^C was lost."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hooks_api_testing import forget_taught_types  # noqa: F401
from memhook_testing import hooks_installed_module  # noqa: F401

import memhook
from memhook import MemoryType
from memhook._queries import query as _query

pytestmark = pytest.mark.usefixtures("hooks_installed_module", "forget_taught_types")

_HOST = np.zeros(4096, dtype=np.uint8)
_ADDR = int(_HOST.ctypes.data)


class _Interrupt:
    """Raises KeyboardInterrupt the next time ``hit()`` is called after
    ``arm()``, once."""

    def __init__(self) -> None:
        self.armed = False

    def arm(self) -> None:
        self.armed = True

    def hit(self) -> None:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt


def _cai(stop: _Interrupt) -> Any:
    class CudaArray:
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            stop.hit()
            return {"data": (_ADDR, False), "shape": (4096,), "typestr": "|u1", "version": 3}
    return CudaArray()


def _index(stop: _Interrupt) -> Any:
    class Pointer:
        def __index__(self) -> int:
            stop.hit()
            return _ADDR
    return Pointer()


def _handle(stop: _Interrupt) -> Any:
    class Handle:
        def __int__(self) -> int:
            stop.hit()
            return _ADDR
    return Handle()


def _dlpack(stop: _Interrupt) -> Any:
    class Tensor:
        def __init__(self) -> None:
            self.array = _HOST

        def __dlpack__(self, **kwargs: Any) -> Any:
            stop.hit()
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.array.__dlpack_device__()
    return Tensor()


def _cupy(stop: _Interrupt) -> Any:
    """A CuPy-shaped array, its type registered as ``cupy.ndarray`` (the
    module is put in sys.modules by the test)."""
    class MemoryPointer:
        @property
        def ptr(self) -> int:
            stop.hit()
            return _ADDR

    class ndarray:  # noqa: N801 - CuPy's name
        data = MemoryPointer()
        shape = (4096,)
        strides = (1,)
        itemsize = 1

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            return {"data": (self.data.ptr, False), "shape": self.shape, "typestr": "|u1",
                    "strides": None, "version": 3}

    ndarray.__module__ = "cupy"
    cupy = types.ModuleType("cupy")
    cupy.ndarray = ndarray  # type: ignore[attr-defined]
    sys.modules["cupy"] = cupy
    return ndarray()


MAKERS: dict[str, Callable[[_Interrupt], Any]] = {
    "interface": _cai, "index": _index, "int": _handle, "dlpack": _dlpack, "cupy": _cupy}


@pytest.mark.parametrize("query", ["memory_type", "lookup"])
@pytest.mark.parametrize("form", sorted(MAKERS))
def test_a_keyboard_interrupt_while_c_reads_an_object_reaches_the_caller(
        form: str, query: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))  # (put back after)
    stop = _Interrupt()
    obj = MAKERS[form](stop)
    ask = getattr(memhook, query)
    expected = ask(obj)  # (the first: Python's path, which teaches C the type)
    assert memhook.memory_type(obj) == MemoryType.HOST
    assert type(obj) in _query._kinds, "C did not learn the type: the test reads nothing in C"
    stop.arm()
    with pytest.raises(KeyboardInterrupt):
        ask(obj)
    assert not stop.armed
    assert ask(obj) == expected  # (nothing kept: the next query answers)
