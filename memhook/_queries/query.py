"""The queries a user makes of the process cache: :func:`memory_type`,
:func:`lookup`, :func:`memory_types`, and :func:`process_cache`.  They are
re-exported by :mod:`memhook.cache` (and the first three by :mod:`memhook`).

There is one cache per process, and it lives in the core (csrc/cache/): the
hooks' events reach it through the core's own drain, and C transports
(``memhook_query``), programs with no Python in them and these functions all
read it.  Each query normalises its argument and makes one call into the
core, which applies what is pending, answers from the cache where the hooks
vouch, and asks the driver - only one the process has already loaded and
initialised - where they do not, remembering a CUDA answer while the hooks
record (memhook.h, memhook_query's contract; docs/design/native-cache.md).

The argument is read in C (csrc/pyext/query.c, builtins of the extension)
for an int, bytes and bytearray, and for the types this module has taught
it (:func:`_normalise`): the first object of a type goes through the
Python normaliser (memhook._queries.inputs.byte_range, the reference for every form
and every error message); where the type's form is one C reads (the buffer
protocol, a ctypes integer, ``__index__``, ``__int__``,
``__cuda_array_interface__``, DLPack, a PyTorch tensor's methods, a CuPy
array's attributes) and C's reading of that object gives the same extent,
later objects of the type are read in C.  Anything C does not read, or
reads oddly (an error, an empty extent), comes back here.
"""

from __future__ import annotations

import ctypes
import dataclasses
import inspect
import numbers
import sys
import types
from typing import Any, Callable, TypeVar

import numpy as np

from .._binding.core import ffi, lib
from .inputs import address_array, byte_range, torch_tensor
from .._values.types import MemoryType, Region, _make_region
from ..cache import MemtypeCache

try:  # (after memhook._binding.core, which binds the core first)
    from .._native import (query_configure, query_extent,  # type: ignore[import-not-found]
                          query_hand_out, query_public, query_region, query_type)
except ImportError as exc:  # pragma: no cover - an extension built by another cffi
    raise ImportError("memhook's extension memhook._native lacks its query builtins "
                      f"(csrc/pyext/query.c; {exc}): rebuild it with `pip install .`") from exc

__all__ = ["lookup", "memory_type", "memory_types", "process_cache"]


def process_cache() -> MemtypeCache:
    """The one cache of this process, the core's, that the hooks feed and
    the module-level queries read, as a :class:`~memhook.MemtypeCache`.
    Writing to it by hand is allowed (a transport that knows of memory the
    hooks cannot see may record it); the hooks keep writing too.  Its own
    methods answer from what it holds, as any ``MemtypeCache`` does; the
    module-level queries also ask the driver where the hooks do not vouch.

    Runtime complexity: O(1).

    >>> import memhook
    >>> from memhook.cache import process_cache
    >>> process_cache() is process_cache()
    True
    >>> isinstance(process_cache(), memhook.MemtypeCache)
    True
    """
    return _process_cache


_F = TypeVar("_F", bound=Callable[..., Any])


def _in_c(fn: _F) -> _F:
    """The builtin of csrc/pyext/query.c that ``fn`` names, under ``fn``'s
    name, module, docstring and signature (annotations aside: a builtin's
    text signature has none), in its place: the same call, positional or by
    keyword, and the same answers and errors, without the Python frame a def
    costs every call: as much as the rest of a query of an int
    (docs/performance.md).  ``fn``'s body is what the builtin does."""
    params = [p.replace(annotation=inspect.Parameter.empty)
              for p in inspect.signature(fn).parameters.values()]
    return query_public(fn, str(inspect.Signature(params)))  # type: ignore[no-any-return]


@_in_c
def memory_type(ptr: Any, size: Any = 1) -> MemoryType:
    """The memory type of ``[ptr, ptr + size)``, or of an object's whole
    extent (``__cuda_array_interface__``, ``__array_interface__``, DLPack,
    buffer protocol).  Pending hook events are applied first; UNKNOWN regions,
    and ranges the hooks cannot vouch for, are resolved through the driver.
    ``ptr`` takes every form :meth:`MemtypeCache.memory_type` does: a ctypes
    integer or pointer, or a ``CUdeviceptr``, is the address it holds; an
    empty object gets the type at its data pointer (HOST for a NULL one).

    The answer comes from the process cache (:func:`process_cache`, the
    core's) as :meth:`MemtypeCache.memory_type` gives it, except that the
    driver - only one this process has already loaded and initialised;
    memhook never loads one - is asked about what the hooks do not vouch
    for: UNKNOWN regions, ranges that straddle regions, regions learned
    while no hooks recorded, and (unless ``status().coverage_complete``)
    pointers in no region; a CUDA answer is remembered as a region while the
    hooks record (without them no FREE would ever undo it).

    Runtime complexity: O(log n) for n regions, plus the drain of e pending
    events, O(e log e + n); plus one driver call where the driver is asked.

    >>> import numpy as np
    >>> import memhook
    >>> memhook.memory_type(np.zeros(4))            # host memory
    <MemoryType.HOST: 0>
    >>> cache = memhook.cache.process_cache()
    >>> cache.update(0x7000_0000_0000, 1 << 20, memhook.MemoryType.CUDA, 0)  # as the hooks would
    >>> memhook.memory_type(0x7000_0000_0000 + 64)
    <MemoryType.CUDA: 1>
    >>> cache.remove(0x7000_0000_0000, 1 << 20)
    """
    return query_type(ptr, size)  # type: ignore[no-any-return]


@_in_c
def lookup(ptr: Any, size: Any = 1) -> Region | None:
    """The allocation holding ``[ptr, ptr + size)`` (or an object's extent),
    after applying pending hook events and resolving through the driver
    what the cache cannot vouch for (as :func:`memory_type` does).  None for
    host memory; ``Region(ptr, size, UNKNOWN, -1)`` for a range that runs
    past an allocation's end; one region spanning touching allocations of
    one type when they cover the range (device -1 unless they share one).

    Runtime complexity: O(log n) for n regions, plus the drain and any
    driver call, as for :func:`memory_type`.

    >>> import memhook
    >>> cache = memhook.cache.process_cache()
    >>> cache.update(0x7000_0000_0000, 1 << 20, memhook.MemoryType.CUDA_MANAGED, 0)
    >>> memhook.lookup(0x7000_0000_0000 + 4096, 4096)
    Region(start=0x700000000000, size=1048576, mem_type=CUDA_MANAGED, device=0)
    >>> memhook.lookup(bytearray(16)) is None     # a host buffer
    True
    >>> cache.remove(0x7000_0000_0000, 1 << 20)
    """
    return query_region(ptr, size)  # type: ignore[no-any-return]


def memory_types(ptrs: Any) -> np.ndarray:
    """:func:`memory_type` of many single-byte addresses, as ``uint8``
    :class:`MemoryType` codes shaped like ``ptrs`` (a numpy integer array or
    a sequence of addresses, as :meth:`MemtypeCache.memory_types` takes),
    in one call into the core (``memhook_query_types``).

    Runtime complexity: O(m log n) for m addresses and n regions, plus the
    drain, plus one driver call per address the cache cannot vouch for.

    >>> import numpy as np
    >>> import memhook
    >>> cache = memhook.cache.process_cache()
    >>> cache.update(0x7000_0000_0000, 1 << 20, memhook.MemoryType.CUDA, 0)
    >>> ptrs = np.array([[0x7000_0000_0000, 0x7000_0010_0000]], dtype=np.uint64)
    >>> memhook.memory_types(ptrs)                  # the second is one past the end
    array([[1, 0]], dtype=uint8)
    >>> cache.remove(0x7000_0000_0000, 1 << 20)
    """
    arr = address_array(ptrs)
    query_hand_out()
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    out = np.empty(arr.shape, dtype=np.uint8)
    if len(arr):
        lib.memhook_query_types(ffi.from_buffer("uint64_t[]", arr), len(arr),
                                ffi.from_buffer("uint8_t[]", out))
    shape = getattr(ptrs, "shape", None)
    return out.reshape(shape) if shape is not None and len(shape) != 1 else out


# ---------------------------------------------------------------------------
# Teaching C the argument forms (csrc/pyext/query.c's enum kind)

_KIND_BUFFER, _KIND_INDEX, _KIND_INT, _KIND_CAI, _KIND_DLPACK = 1, 3, 4, 5, 6
_KIND_CTYPES_UNSIGNED, _KIND_CTYPES_SIGNED, _KIND_CAI_DLPACK, _KIND_TORCH = 7, 8, 9, 10
_KIND_CUPY = 11
_ADDRESS_KINDS = frozenset((_KIND_INDEX, _KIND_INT, _KIND_CTYPES_UNSIGNED, _KIND_CTYPES_SIGNED))
_CTYPES_SIGNED_CODES = frozenset("bhilq")
_CTYPES_UNSIGNED_CODES = frozenset("BHILQP")  # (not c_char_p/c_wchar_p: .value is text)
_LEARNED_MAX = 256  # (types: a program passes a handful)
_DECLINED_MAX = 8  # objects of a type C declines to read before it stops trying
_kinds: dict[type, int] = {}
_refused: set[type] = set()
_declined: dict[type, int] = {}
_misread: set[type] = set()  # CuPy-typed, yet its attributes disagreed with its interface
# The attributes C reads of a CuPy array (cupy_range), and the interface
# they stand for: a subclass that redefines one is read through the protocol.
_CUPY_ATTRIBUTES = ("data", "shape", "strides", "itemsize", "__cuda_array_interface__")


def _cupy_array(cls: type) -> bool:
    """Whether ``cls`` is CuPy's ``ndarray`` or a subclass that keeps the
    attributes C reads in its place (``_CUPY_ATTRIBUTES``).  Asked of the
    class CuPy itself defines, found in ``sys.modules``: no array exists
    before cupy is imported, so memhook never imports it, and another
    library's ``data.ptr`` (whose meaning no protocol fixes) is never read
    as an address."""
    cupy = sys.modules.get("cupy")
    ndarray = getattr(cupy, "ndarray", None)
    if not (isinstance(ndarray, type) and issubclass(cls, ndarray)):
        return False
    missing = object()  # (an attribute ndarray lacks is kept by no class)
    return all(getattr(cls, name, missing) is getattr(ndarray, name, None)
               for name in _CUPY_ATTRIBUTES)


def _kinds_of(cls: type) -> tuple[int, ...]:
    """How C could read an object of ``cls``, as memhook._queries.inputs
    would, best first: a CuPy array through its own attributes, else its
    interface (a type whose attributes once disagreed with its interface:
    the interface alone).  Empty: C cannot."""
    kind = _kind_of(cls)
    if kind and cls not in _misread and _cupy_array(cls):
        # (the interface's extent, at a fraction of the cost of the dict
        # CuPy builds on each read)
        return (_KIND_CUPY, kind)
    return (kind,) if kind else ()


def _kind_of(cls: type) -> int:
    """How C could read an object of ``cls`` through the protocols, as
    memhook._queries.inputs would (0: it cannot)."""
    if issubclass(cls, bool) or cls in (np.bool_, ctypes.c_bool):
        return 0
    if torch_tensor(cls):
        # (its own methods: the protocols' extent where they answer, at a
        # fraction of their cost, and an answer where they refuse)
        return _KIND_TORCH
    if issubclass(cls, ctypes._SimpleCData):
        code = getattr(cls, "_type_", "")
        if code in _CTYPES_UNSIGNED_CODES:
            return _KIND_CTYPES_UNSIGNED
        return _KIND_CTYPES_SIGNED if code in _CTYPES_SIGNED_CODES else _KIND_BUFFER
    if issubclass(cls, (ctypes._Pointer, ctypes._CFuncPtr)):  # type: ignore[attr-defined]
        return 0  # (the address it points to: ctypes.cast, in Python)
    if issubclass(cls, np.integer):
        return _KIND_INDEX
    if issubclass(cls, (np.generic, float, complex, str)):
        return 0
    if hasattr(cls, "__cuda_array_interface__"):
        # (a type offering DLPack too - PyTorch's tensors, whose interface
        # raises on the CPU - is read as memhook._queries.inputs reads it: the
        # interface, else DLPack; with an __array_interface__ between them
        # in that order, such objects stay with Python)
        if hasattr(cls, "__dlpack__") and not hasattr(cls, "__array_interface__"):
            return _KIND_CAI_DLPACK
        return _KIND_CAI
    if hasattr(cls, "__array_interface__"):
        # (a numpy array's interface data is its buffer; others, in Python)
        return _KIND_BUFFER if cls is np.ndarray else 0
    if hasattr(cls, "__dlpack__"):
        return _KIND_DLPACK
    if hasattr(cls, "__len__") or hasattr(cls, "__buffer__") or issubclass(cls, ctypes.Array):
        return _KIND_BUFFER
    if hasattr(cls, "__index__"):
        return _KIND_INDEX
    if hasattr(cls, "__int__") and not issubclass(cls, numbers.Number):
        return _KIND_INT
    return 0


def _learn(obj: Any, start: int, n: int, sized: bool) -> None:
    """Teach C ``type(obj)`` the first of its kinds (``_kinds_of``) by which
    C reads this object as memhook._queries.inputs did.  A kind that reads
    it differently is passed over (a CuPy array's attributes: never tried
    again on the type), and a type no kind reads right is refused; one
    whose object C declined to read (an empty array, a tensor whose
    interface raised...) is tried again on later objects, up to
    _DECLINED_MAX of them: the first object a program passes is often not
    a typical one."""
    cls = type(obj)
    if cls in _refused or len(_kinds) >= _LEARNED_MAX:
        return
    for kind in _kinds_of(cls):
        got = query_extent(obj, kind)
        address = kind in _ADDRESS_KINDS
        if got is None or (sized and not address):
            declined = _declined.get(cls, 0) + 1
            _declined[cls] = declined
            if declined < _DECLINED_MAX:
                return
            break
        if got[0] == start if address else got == (start, n):
            _kinds[cls] = kind
            _declined.pop(cls, None)
            return
        if kind == _KIND_CUPY:
            _misread.add(cls)
    _refused.add(cls)


def _normalise(obj: Any, size: Any = 1) -> tuple[int, int]:
    """The Python normaliser C calls where it does not read ``obj`` itself:
    memhook._queries.inputs.byte_range, and C learns the type where it can."""
    start, n = byte_range(obj, size)
    cls = type(obj)
    if cls not in _kinds and cls is not int:
        _learn(obj, start, n, not (type(size) is int and size == 1))
    return start, n


def _slotted(cls: type) -> bool:
    """Whether every field of ``cls`` is a slot (a member descriptor), which
    C then sets itself (Python 3.10+; memhook._values.types)."""
    return all(isinstance(inspect.getattr_static(cls, f.name), types.MemberDescriptorType)
               for f in dataclasses.fields(cls))


def _configure() -> None:
    query_configure(tuple(MemoryType), Region if _slotted(Region) else None, _make_region,
                    _normalise, _kinds)


_configure()

from .process_cache import ProcessCache  # noqa: E402  (it subclasses memhook.cache's class)

_process_cache: MemtypeCache = ProcessCache()
