"""Binding layers: native code that only carries a Python program's call
into CUDA, so that the program, not the binding, is the caller worth
naming.

An event's native caller (:class:`memhook.Caller`) is the first code
outside CUDA's own libraries.  For a Python program that is nearly always a
binding: ``libffi`` under ``ctypes``, cuda-python's Cython modules, CuPy's
backends, PyTorch's caching allocator.  Naming it tells a user nothing they
did not know; the Python frame that called into it does.  So where the
caller is one of :data:`BINDINGS` and the allocation's Python frames were
recorded (``--python``), the outputs name that Python frame as the caller,
and keep the native frame beside it (``via ctypes (libffi.so.8)``, the
jsonl ``caller``, ``--stacks``).

:data:`BINDINGS` is the one list: a library is recognised by its file name,
and, where a name alone is too common, by the package folder it lies in.
A framework's own allocator (``libtorch_cuda``, ``libc10_cuda``) is a
binding layer only when the call came from Python: an allocation made by
a C++ program linked to it keeps its native caller, as it has no Python
frames.

>>> binding_of("/usr/lib/x86_64-linux-gnu/libffi.so.8").name
'ctypes'
>>> binding_of("/venv/lib/python3.12/site-packages/cuda/bindings/cydriver.cpython-312.so").name
'cuda-python'
>>> binding_of("/opt/app/libmine.so") is None
True
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["BINDINGS", "Binding", "binding_of"]


@dataclass(frozen=True)
class Binding:
    """One binding layer: ``name`` (what the outputs call it), ``path``
    (a regular expression searched in the object's path) and ``why`` (what
    it is, for the docs and ``memhook trace``'s readers)."""

    name: str
    path: str
    why: str


_SO = r"[^/]*\.so(\.[0-9.]+)?$"  # a file name's end: name.so, name.so.8, name.cpython-312-....so

BINDINGS: tuple[Binding, ...] = (
    Binding("ctypes", r"/libffi" + _SO,
            "libffi: ctypes' foreign calls (also cffi's ABI mode, numba's CUDA driver, "
            "anything calling a CDLL)"),
    Binding("ctypes", r"/_ctypes" + _SO, "CPython's _ctypes extension"),
    Binding("cffi", r"/_cffi_backend" + _SO, "cffi's ABI-mode backend"),
    Binding("cuda-python", r"/cuda/(bindings|core|_cuda|_lib)/.*\.so$",
            "NVIDIA's cuda-python: cuda.bindings (driver, runtime, cydriver, cyruntime, "
            "_lib) and cuda.core"),
    Binding("cuda-python", r"/cuda/(ccuda|ccudart|cuda|cudart)\.cpython-[^/]*\.so$",
            "cuda-python before 12.6 (cuda.cuda, cuda.cudart)"),
    Binding("CuPy", r"/cupy_backends/cuda/(api|libs)/" + _SO,
            "CuPy's driver and runtime wrappers (cupy_backends.cuda.api)"),
    Binding("CuPy", r"/cupy/cuda/(memory|pinned_memory|memory_hook)[^/]*\.so$",
            "CuPy's memory pool"),
    Binding("PyTorch", r"/torch/lib/lib(c10_cuda|torch_cuda|torch_cuda_cpp|torch_cuda_cu)"
                       r"\.so$",
            "PyTorch's CUDA caching allocator, when called from Python"),
    Binding("PyTorch", r"/torch/_C" + _SO, "PyTorch's Python extension"),
    Binding("pycuda", r"/pycuda/_driver" + _SO, "PyCUDA's driver module"),
    Binding("numba", r"/numba/cuda/cudadrv/[^/]*\.so$",
            "numba's CUDA driver helpers (its driver calls go through ctypes)"),
    Binding("JAX", r"/jaxlib/(xla_extension|_jax)" + _SO,
            "jaxlib's XLA client, when called from Python"),
)
"""Every binding layer memhook knows, by library (docs/python-programs.md
shows this table; a test holds the two together).  Order matters only for
the name: the first that matches names the layer."""

_COMPILED = tuple((b, re.compile(b.path)) for b in BINDINGS)


@functools.lru_cache(maxsize=4096)
def binding_of(path: str) -> Binding | None:
    """The binding layer the object at ``path`` is, or None."""
    if not path:
        return None
    for binding, pattern in _COMPILED:
        if pattern.search(path):
            return binding
    return None
