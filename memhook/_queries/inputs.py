"""Argument parsing for the memory-type queries: addresses, sizes, and the
extent of array-like objects.

An address is a pointer value in ``[0, 2**64)``, given as any of:

* an ``int`` (the fast path: ``type(ptr) is int`` is checked first), a numpy
  integer, or any other object whose type has ``__index__`` and is not an
  array or buffer (an ``IntEnum``);
* a ctypes integer (``c_uint64``, ``c_size_t``, ``c_int``, ...) or ctypes
  pointer (``c_void_p``, ``c_char_p``, ``c_wchar_p``, a ``POINTER(T)``
  instance, a function pointer): the address it holds - not the few bytes
  of the ctypes object itself.  A ``POINTER(T)`` instance is the address it
  points to (``ctypes.cast(p, c_void_p).value``), which is what a C API
  that returns one means; a NULL one is address 0;
* an object with ``__int__`` that is not a number (not a float, Fraction or
  Decimal) and exposes no array or buffer protocol: a pointer handle such
  as cuda-python's ``CUdeviceptr``, which is ``int(p)`` (duck-typed: memhook
  does not import cuda-python).

Other ctypes objects (``c_double``, ``c_char``, arrays, structures) are
buffers: their own storage is the extent asked about.

Refused with ``TypeError``: ``bool`` (numpy's and ctypes' too: a flag is not
an address, and ``True`` meaning address 1 hides a bug), floats and other
non-integral numbers, strings.  A size is an int (or numpy or ctypes
integer, or ``__index__`` object) >= 1, and ``[address, address + size)``
must fit in the 64-bit address space.

Objects are looked up over their whole extent, through
``__cuda_array_interface__``, ``__array_interface__``, DLPack and the buffer
protocol in that order, a PyTorch tensor that all refuse (one requiring
grad) through its own methods; an empty object is the byte at its data
pointer (docs/design/python-queries.md, "Objects' extents").
"""

from __future__ import annotations

import ctypes
import numbers
import operator
import sys
from typing import Any

import numpy as np

__all__ = ["ADDRESS_LIMIT", "address", "address_array", "byte_range", "integer", "refused", "size",
           "torch_tensor"]

ADDRESS_LIMIT = 1 << 64

_ADDRESS_FORMS = ("an int, a numpy or ctypes integer, a ctypes pointer (c_void_p, POINTER(T)) "
                  "or a pointer object with __int__ such as cuda-python's CUdeviceptr")


def _kind(obj: object) -> str:
    return type(obj).__name__


# ctypes simple types by their type code: those that hold an integer, those
# that hold a pointer (c_void_p, c_char_p, c_wchar_p; .value of the last two
# is the string, not its address), and c_bool.
_CTYPES_INTEGER_CODES = frozenset("bBhHiIlLqQ")
_CTYPES_POINTER_CODES = frozenset("PzZ")
_CTYPES_POINTERS = (ctypes._Pointer, ctypes._CFuncPtr)  # type: ignore[attr-defined]
_CTYPES_VALUES = (ctypes._SimpleCData, *_CTYPES_POINTERS)  # (buffers, from Python 3.12 on)

def _offers_extent(cls: type) -> bool:
    """Whether objects of ``cls`` look like arrays or buffers (a length, an
    array interface, DLPack, ``__buffer__`` from Python 3.12 on).  Such an
    object is an extent, not an address, even where it has ``__index__`` or
    ``__int__`` (a numpy array, a one-element torch tensor)."""
    # (__len__ first: arrays, tensors and buffers have it, and a miss costs more)
    return (hasattr(cls, "__len__") or hasattr(cls, "__array_interface__")
            or hasattr(cls, "__cuda_array_interface__") or hasattr(cls, "__dlpack__")
            or hasattr(cls, "__buffer__"))


_FLAGS = (bool, np.bool_, ctypes.c_bool)
# Refused as addresses before anything else is tried (numpy's scalars have
# __array_interface__, and would otherwise be read as their own few bytes).
_NOT_ADDRESSES = (*_FLAGS, float, complex, str, np.floating, np.complexfloating)


def refused(value: object, what: str, forms: str, expected: str = "an int",
            pointer: bool = False) -> TypeError:
    """The TypeError for an argument ``what`` (a ``pointer`` value, or not)
    that is not ``expected``: what it was, and the ``forms`` that are valid."""
    if isinstance(value, _FLAGS):
        why = f" (a {_kind(value)} is a flag, not a number)"
    elif pointer and _offers_extent(type(value)) and not isinstance(
            value, (str, np.generic, ctypes._SimpleCData)):
        why = " (an object with an extent of its own, not a pointer value)"
    else:
        why = ""
    return TypeError(f"{what} must be {expected}, not {_kind(value)}{why}; valid: {forms}")


def _value(value: object, pointers: bool) -> int | None:
    """The int an integer-like argument stands for (with ``pointers``, also
    the address a ctypes pointer holds), or None when it stands for none: a
    flag, a float, a string, an array...  Cheapest checks first: ints and
    numpy integers are what most callers pass."""
    if isinstance(value, (int, np.integer)):
        return None if isinstance(value, bool) else operator.index(value)
    if isinstance(value, ctypes._SimpleCData):
        code = type(value)._type_  # type: ignore[attr-defined]
        if code in _CTYPES_INTEGER_CODES:
            return int(value.value)
        if pointers and code in _CTYPES_POINTER_CODES:
            return ctypes.cast(value, ctypes.c_void_p).value or 0
        return None  # c_bool, c_double, c_char...
    if isinstance(value, _CTYPES_POINTERS):
        return (ctypes.cast(value, ctypes.c_void_p).value or 0) if pointers else None
    cls = type(value)
    if _offers_extent(cls):  # arrays and buffers (np.bool_ too: it has __array_interface__)
        return None
    if hasattr(cls, "__index__"):
        return operator.index(value)  # type: ignore[arg-type]  # has __index__
    if hasattr(cls, "__int__") and not isinstance(value, numbers.Number):
        return int(value)  # type: ignore[call-overload]  # a pointer handle (CUdeviceptr)
    return None


_INTEGER_FORMS = ("an int, a numpy or ctypes integer, or an integer handle (an object with "
                  "__index__ or __int__)")


def integer(value: object, what: str, forms: str = _INTEGER_FORMS,
            expected: str = "an int") -> int:
    """``value`` (an int, a numpy or ctypes integer, an ``__index__`` object
    or a handle with ``__int__`` such as cuda-python's ``CUdevice``) as an
    int; otherwise TypeError: ``what`` must be ``expected``, and the
    ``forms`` that are valid."""
    if type(value) is int:
        return value
    n = _value(value, False)
    if n is None:
        raise refused(value, what, forms, expected)
    return n


def address(value: object, what: str = "address") -> int:
    """``value`` as an address in ``[0, 2**64)``, or TypeError/ValueError.
    ``value`` is any of the forms the module docstring lists (an int, a
    ctypes integer or pointer, a ``CUdeviceptr``...)."""
    if type(value) is not int:
        n = _value(value, True)
        if n is None:
            raise refused(value, what, _ADDRESS_FORMS, pointer=True)
        value = n
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {value}")
    if value >= ADDRESS_LIMIT:
        raise ValueError(f"{what} must be below 2**64, got {value:#x}")
    return value


def size(value: object, what: str = "size") -> int:
    """``value`` as a byte count >= 1, or TypeError/ValueError."""
    if type(value) is not int:
        value = integer(value, what)
    if value < 1:
        raise ValueError(f"{what} must be at least 1 byte, got {value}")
    return value


def byte_range(obj: object, nbytes: object = 1) -> tuple[int, int]:
    """``(start, size)`` for an address (any form :func:`address` takes) plus
    ``nbytes``, or for an object's whole extent (then ``nbytes`` must be left
    at 1).  An empty extent is ``(its data pointer, 1)``: the byte it points
    at (see the module docstring)."""
    if type(obj) is int:
        start: int | None = obj
    elif isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        start = operator.index(obj)
    elif isinstance(obj, _NOT_ADDRESSES):
        raise refused(obj, "address", _ADDRESS_FORMS, pointer=True)
    elif _offers_extent(type(obj)) and not isinstance(obj, _CTYPES_VALUES):
        start = None  # an array or a buffer (checked first: what objects mostly are)
    else:
        start = _value(obj, True)
        if start is None and isinstance(obj, numbers.Number):  # Fraction, Decimal...
            raise refused(obj, "address", _ADDRESS_FORMS, pointer=True)
    if start is not None:
        start = address(start)
        n = size(nbytes)
        if start + n > ADDRESS_LIMIT:
            raise ValueError(f"the range [{start:#x}, {start:#x} + {n}) runs past the end "
                             "of the 64-bit address space")
        return start, n
    if not (type(nbytes) is int and nbytes == 1):
        raise ValueError(f"size is taken from the {_kind(obj)} object's extent; pass size "
                         f"only with an int address (got size={nbytes!r})")
    start, n = _object_extent(obj)
    if n == 0:
        n = 1  # empty: the byte at its data pointer (0, a NULL one: HOST)
    if start < 0 or start + n > ADDRESS_LIMIT:
        raise ValueError(f"the {_kind(obj)} object's extent [{start:#x}, +{n}) is not a valid "
                         "64-bit address range")
    return start, n


# --------------------------------------------------------------------------
# object extents

def _extent(ptr: int, shape: Any, strides: Any, itemsize: int) -> tuple[int, int]:
    """Lowest address and byte count covered by a (possibly strided) array."""
    shape = tuple(int(n) for n in shape)
    if any(n == 0 for n in shape):
        return ptr, 0
    if strides is None:  # C-contiguous
        count = 1
        for n in shape:
            count *= n
        return ptr, count * itemsize
    lo = hi = 0
    for n, st in zip(shape, strides):
        span = (n - 1) * int(st)
        if span < 0:
            lo += span
        else:
            hi += span
    return ptr + lo, hi - lo + itemsize


def _typestr_itemsize(typestr: object, where: str) -> int:
    """The item size of an array-interface typestr ("<f4", "|u1", "<U4" is 16
    bytes: 4 UCS-4 characters)."""
    if not isinstance(typestr, str):
        raise TypeError(f"{where}['typestr'] must be a str such as '<f4' or '|u1', "
                        f"not {_kind(typestr)}")
    try:
        return int(np.dtype(typestr).itemsize)
    except (TypeError, ValueError):
        raise ValueError(f"{where}['typestr'] {typestr!r} is not an array-interface type "
                         "string: a byte order (<, >, | or =), a kind letter and a size, "
                         "such as '<f4' or '|u1'") from None


def _int_tuple(value: object, where: str, key: str, *, non_negative: bool) -> tuple[int, ...]:
    valid = "a tuple of non-negative ints" if non_negative else "a tuple of ints"
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{where}[{key!r}] must be {valid}, not {_kind(value)} ({value!r})")
    out = []
    for i, n in enumerate(value):
        if isinstance(n, bool) or not hasattr(type(n), "__index__"):
            raise TypeError(f"{where}[{key!r}][{i}] must be an int ({valid}), "
                            f"not {_kind(n)} ({n!r})")
        n = operator.index(n)
        if non_negative and n < 0:
            raise ValueError(f"{where}[{key!r}][{i}] is {n}: {key} must be {valid}")
        out.append(n)
    return tuple(out)


def _interface_extent(iface: Any, name: str, owner: object) -> tuple[int, int]:
    where = f"{_kind(owner)}.{name}"
    if not isinstance(iface, dict):
        raise TypeError(f"{where} must be a dict, not {_kind(iface)}")
    for key in ("shape", "typestr"):
        if key not in iface:
            raise ValueError(f"{where} has no {key!r} key; the protocol requires 'shape' "
                             "(a tuple of ints) and 'typestr' (such as '<f4')")
    shape = _int_tuple(iface["shape"], where, "shape", non_negative=True)
    itemsize = _typestr_itemsize(iface["typestr"], where)
    strides = iface.get("strides")
    if strides is not None:
        strides = _int_tuple(strides, where, "strides", non_negative=False)
        if len(strides) != len(shape):
            raise ValueError(f"{where}['strides'] has {len(strides)} entries but 'shape' "
                             f"has {len(shape)}: strides must be None or one int per "
                             "dimension")
    offset = iface.get("offset", 0) or 0
    if isinstance(offset, bool) or not hasattr(type(offset), "__index__"):
        raise TypeError(f"{where}['offset'] must be an int, not {_kind(offset)}")
    data = iface.get("data")
    if name == "__array_interface__" and (data is None or not isinstance(data, tuple)):
        return _buffer_extent(owner, iface)  # the data is the object's own buffer
    if not isinstance(data, tuple) or len(data) != 2:
        raise TypeError(f"{where}['data'] must be a (pointer, read_only) tuple, "
                        f"not {data!r}")
    ptr = address(data[0], f"{where}['data'][0] (the data pointer)")
    return _extent(ptr + operator.index(offset), shape, strides, itemsize)


def _buffer_extent(obj: object, iface: Any = None) -> tuple[int, int]:
    try:
        view = memoryview(obj)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"expected an int address or an object exposing __cuda_array_interface__, "
            f"__array_interface__, __dlpack__ or the buffer protocol, not {_kind(obj)}"
        ) from None
    with view:
        try:
            arr = np.asarray(view)  # (an empty one too: it has a data pointer)
        except (TypeError, ValueError, NotImplementedError):
            if not view.contiguous:
                raise TypeError(f"cannot locate the {_kind(obj)} buffer (format "
                                f"{view.format!r}, not contiguous)") from None
            arr = np.frombuffer(view.cast("B"), dtype=np.uint8)
        ai = arr.__array_interface__
        ptr = ai["data"][0]
        if iface is not None:
            ptr += int(iface.get("offset", 0) or 0)
        return _extent(ptr, arr.shape, arr.strides, arr.itemsize)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE = type(_capsule_new(1, None, None))  # (types.CapsuleType from Python 3.13)
_DL_CPU = 1
# DLManagedTensorVersioned: {DLPackVersion version; void *manager_ctx;
# void (*deleter)(...); uint64_t flags; DLTensor dl_tensor;}
_DL_VERSIONED_TENSOR_OFFSET = 8 + 8 + 8 + 8
_DL_MAJOR = 1


def _dlpack_capsule(obj: Any) -> Any:
    """A capsule from ``obj.__dlpack__``: versioned where the producer offers
    it (max_version), else legacy."""
    stream: Any = None
    try:
        dev_type, _ = obj.__dlpack_device__()
        if int(dev_type) != _DL_CPU:
            stream = -1  # the protocol's "no synchronisation": we only read metadata
    except Exception:  # noqa: BLE001, S110 - an optional method: no device, no stream
        pass
    kwargs: dict[str, Any] = {} if stream is None else {"stream": stream}
    try:
        return obj.__dlpack__(max_version=(_DL_MAJOR, 0), **kwargs)
    except (TypeError, ValueError, BufferError):
        pass
    try:
        return obj.__dlpack__(**kwargs)
    except (TypeError, ValueError, BufferError):
        return obj.__dlpack__()


def _dlpack_extent(obj: Any) -> tuple[int, int]:
    """Extent from a DLPack capsule, versioned ("dltensor_versioned") or
    legacy ("dltensor").  The capsule is not consumed: its destructor calls
    the producer's deleter."""
    capsule = _dlpack_capsule(obj)
    if type(capsule) is not _CAPSULE:
        raise TypeError(f"{_kind(obj)}.__dlpack__() returned {_kind(capsule)}, not a DLPack "
                        "capsule: the protocol's result is a PyCapsule named 'dltensor' or "
                        "'dltensor_versioned'")
    name = _capsule_name(capsule)
    if name == b"dltensor_versioned":
        raw = _capsule_pointer(capsule, name)
        major = ctypes.c_uint32.from_address(raw).value if raw else None
        if major != _DL_MAJOR:
            raise TypeError(f"{_kind(obj)}.__dlpack__() returned a DLPack {major}.x "
                            f"capsule; memhook reads version {_DL_MAJOR}.x and legacy ones")
        raw += _DL_VERSIONED_TENSOR_OFFSET
    elif name == b"dltensor":
        raw = _capsule_pointer(capsule, name)  # DLManagedTensor starts with its DLTensor
    else:
        raise TypeError(f"{_kind(obj)}.__dlpack__() returned a capsule named {name!r}, not "
                        "'dltensor' or 'dltensor_versioned' (a used capsule cannot be read)")
    if not raw:  # pragma: no cover - a broken producer
        raise TypeError(f"{_kind(obj)}.__dlpack__() returned an empty capsule")
    t = _DLTensor.from_address(raw)
    ndim = t.ndim
    shape = [t.shape[i] for i in range(ndim)]
    itemsize = max(1, (t.dtype.bits * t.dtype.lanes + 7) // 8)
    if t.strides:
        strides = [t.strides[i] * itemsize for i in range(ndim)]
    else:
        strides = None
    ptr = (t.data or 0) + t.byte_offset
    del t
    del capsule
    return _extent(ptr, shape, strides, itemsize)


def torch_tensor(cls: type) -> bool:
    """Whether ``cls`` is PyTorch's ``Tensor`` or a subclass (``nn.Parameter``).
    Asked of the class torch itself defines, found in ``sys.modules``: no
    object of it exists before torch is imported, so memhook never imports
    torch, and another library's ``data_ptr`` (whose meaning no protocol
    fixes) is never read as an address."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    return isinstance(tensor, type) and issubclass(cls, tensor)


def _tensor_extent(obj: Any) -> tuple[int, int]:
    """A PyTorch tensor's extent through its own methods: what the protocols
    give where they answer, and an answer where they refuse (a tensor that
    requires grad)."""
    itemsize = int(obj.element_size())
    strides = [int(s) * itemsize for s in obj.stride()]
    return _extent(int(obj.data_ptr()), obj.shape, strides, itemsize)


_INTERFACES = ("__cuda_array_interface__", "__array_interface__")


def _object_extent(obj: Any) -> tuple[int, int]:
    """Through the first protocol the object offers.  A protocol attribute
    that raises (torch's CPU tensors raise AttributeError from
    __cuda_array_interface__) means the object does not offer it: the next
    protocol is tried, and the final error says what each one raised.  A
    PyTorch tensor both protocols refuse (one that requires grad) is read
    through its own methods, before the buffer protocol it lacks."""
    declined: list[str] = []
    for name in _INTERFACES:
        try:
            iface = getattr(obj, name)
        except AttributeError as exc:
            if hasattr(type(obj), name):
                declined.append(f"{name} raised AttributeError: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - any failure declines the protocol
            declined.append(f"{name} raised {type(exc).__name__}: {exc}")
            continue
        return _interface_extent(iface, name, obj)
    if hasattr(type(obj), "__dlpack__"):
        try:
            return _dlpack_extent(obj)
        except (BufferError, RuntimeError) as exc:  # the producer declines
            declined.append(f"__dlpack__ raised {type(exc).__name__}: {exc}")
    if torch_tensor(type(obj)):
        try:
            return _tensor_extent(obj)
        except RuntimeError as exc:  # a layout with no strided storage (sparse)
            declined.append(f"data_ptr() raised RuntimeError: {exc}")
    try:
        return _buffer_extent(obj)
    except TypeError as exc:
        if not declined:
            raise
        raise TypeError(f"{exc} ({'; '.join(declined)})") from None


# --------------------------------------------------------------------------
# batches

def address_array(ptrs: object) -> np.ndarray:
    """``ptrs`` (a numpy array, or a sequence of addresses) as a uint64 array,
    each checked to be an address; TypeError/ValueError otherwise.  A masked
    array's mask is ignored: every stored value is an address to look up
    (a masked value must be a valid address too), so the cache's and the
    module-level queries see the same plain array."""
    # (numpy.ma through sys.modules, never np.ma: that attribute imports
    # numpy.ma on first use, and a query in a signal handler that lands
    # inside that import - its own first query's - would import it again,
    # into a recursion.  Without numpy.ma imported there is no masked array.)
    ma = sys.modules.get("numpy.ma")
    masked = getattr(ma, "MaskedArray", None) if ma is not None else None
    if masked is not None and isinstance(ptrs, masked):
        ptrs = ptrs.data
    arr = ptrs if isinstance(ptrs, np.ndarray) else None
    if arr is None:
        if isinstance(ptrs, (str, bytes, bytearray)) or not hasattr(ptrs, "__len__"):
            if hasattr(ptrs, "__iter__") and not isinstance(ptrs, (str, bytes, bytearray)):
                ptrs = list(ptrs)  # type: ignore[call-overload]
            else:
                raise TypeError(f"ptrs must be an array or a sequence of int addresses, "
                                f"not {_kind(ptrs)}")
        kinds = set(map(type, ptrs))  # type: ignore[call-overload]
        if kinds == _JUST_INT:  # the usual list: one pass in C to see that it is all ints
            try:
                return np.asarray(ptrs, dtype=np.uint64)
            except OverflowError:  # negative, or >= 2**64: the exact message
                return _each_address(ptrs)  # type: ignore[arg-type]
        if not kinds.isdisjoint(_FLAGS):  # np.asarray would make True a 1
            return _each_address(ptrs)  # type: ignore[arg-type]
        try:
            arr = np.asarray(ptrs)
        except (OverflowError, ValueError, TypeError, RuntimeError):
            # (pointer objects, arrays among ints, a tensor that requires
            # grad - its __array__ raises RuntimeError)
            arr = None
        if arr is None or (arr.dtype.kind not in "ui" and arr.size):
            # e.g. [1, 2**64 - 1] becomes float64, [CUdeviceptr, ...] fails:
            # check each value exactly
            return _each_address(ptrs)  # type: ignore[arg-type]
    kind = arr.dtype.kind
    if kind == "u":
        return arr.astype(np.uint64, copy=False).ravel()
    if kind == "i":
        if arr.size and arr.min() < 0:
            raise ValueError(f"ptrs[{int(np.argmin(arr.ravel()))}] is negative "
                             f"({int(arr.min())}); addresses must not be negative")
        return arr.astype(np.uint64).ravel()
    if kind == "O":
        return _each_address(arr.ravel())
    if arr.size == 0 and kind == "f":  # np.asarray([]) is float64
        return np.empty(0, dtype=np.uint64)
    raise TypeError(f"ptrs must hold integer addresses, not {arr.dtype} values")


_JUST_INT = {int}
_BATCH_HINT = ("; memory_types() takes pointer values - ask memory_type() or lookup() about "
               "an object's extent")


def _each_address(values: Any) -> np.ndarray:
    """A uint64 array of ``values`` (a sequence), each checked by :func:`address`."""
    out = np.empty(len(values), dtype=np.uint64)
    for i, value in enumerate(values):
        try:
            out[i] = value if type(value) is int and 0 <= value < ADDRESS_LIMIT else address(
                value, f"ptrs[{i}]")
        except TypeError as exc:
            if _offers_extent(type(value)) and not isinstance(value, np.generic):
                raise TypeError(f"{exc}{_BATCH_HINT}") from None
            raise
    return out
