"""Who called: an allocation's caller and call site as the outputs show
them, for a program in any language.

* The **caller** is the native code that called into CUDA
  (:class:`memhook.Caller`), except where that code is a binding layer
  (:mod:`memhook.tracing.bindings`: ``libffi`` under ctypes, cuda-python,
  CuPy, PyTorch...) and the Python frames were recorded (``--python``):
  then it is the Python frame that called through the binding, and the
  binding is named beside it (``via ctypes (libffi.so.8)``).
* The **call site** is the program's own code
  (:attr:`memhook.tracing.pyframes.PyStack.site`), and under it the **way
  down**: the library frames between it and the native caller, then the
  native caller (symbolized) and the CUDA function.

>>> from memhook.tracing.pyframes import PyFrame, PyStack
>>> ffi = Caller("/lib/x86_64-linux-gnu/libffi.so.8", "", 0x6f7a, 0x7f0000006f7a)
>>> py = PyStack((PyFrame("/srv/mem.py", 7, "alloc"), PyFrame("/srv/train.py", 80, "load")))
>>> caller_text(ffi, py)
'/srv/mem.py:7 in alloc via ctypes (libffi.so.8)'
>>> way_down(ffi, py, "cuMemAlloc_v2")
('via ctypes: libffi.so.8+0x6f7a -> cuMemAlloc_v2',)
"""

from __future__ import annotations

from .._objects.symbolize import Caller
from .bindings import Binding, binding_of
from .pyframes import PyFrame, PyStack

__all__ = ["binding_name", "caller_text", "frame_text", "library_label", "native_text",
           "python_caller", "way_down"]


def _binding(caller: Caller | None) -> Binding | None:
    return binding_of(caller.object) if caller is not None else None


def binding_name(caller: Caller | None) -> str | None:
    """The binding layer ``caller`` lies in (``"ctypes"``), or None."""
    b = _binding(caller)
    return b.name if b is not None else None


def library_label(library: str, binding: str | None) -> str:
    """A library as the by-library tables show it: ``ctypes: libffi.so.8``."""
    return f"{binding}: {library}" if binding else library


def frame_text(frame: PyFrame) -> str:
    return f"{frame.location} in {frame.function}"


def native_text(caller: Caller | None) -> str:
    """A native frame: ``library!symbol+0x1c``, else ``library+0x6f7a``."""
    return caller.short if caller is not None else "?"


def python_caller(caller: Caller | None, python: PyStack | None) -> PyFrame | None:
    """The Python frame that called into CUDA through a binding layer: the
    innermost recorded frame, when ``caller`` is a binding; else None."""
    if python is None or not python.frames or _binding(caller) is None:
        return None
    return python.frames[0]


def caller_text(caller: Caller | None, python: PyStack | None) -> str:
    """Who called, for a text line (after ``from``): the Python caller
    ``via`` its binding where there is one, else the native library."""
    frame = python_caller(caller, python)
    if frame is None:
        return caller.library if caller is not None else "?"
    assert caller is not None
    return f"{frame_text(frame)} via {binding_name(caller)} ({caller.library})"


def way_down(caller: Caller | None, python: PyStack | None, function: str) -> tuple[str, ...]:
    """The lines under a call site: the Python frames between the site and
    the native caller that are not the site's own (library code the
    program called), then the native caller and ``function``."""
    lines: list[str] = []
    if python is not None:
        shown = set(python.site_frames)
        lines += [frame_text(f) for f in python.path_down if f not in shown]
    b = _binding(caller)
    native = native_text(caller)
    lines.append(f"via {b.name}: {native} -> {function}" if b is not None
                 else f"{native} -> {function}")
    return tuple(lines)
