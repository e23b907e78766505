"""Argument parsing for the memory-type queries: addresses, sizes, and the
extent of array-like objects.

An address is an ``int`` (or anything with ``__index__``, e.g. numpy
integers; ``bool`` is refused) in ``[0, 2**64)``.  A size is an int >= 1, and
``[address, address + size)`` must fit in the 64-bit address space.

Objects are looked up over their whole extent, found through (in this order)
``__cuda_array_interface__``, ``__array_interface__``, DLPack
(``__dlpack__``, versioned or legacy capsules) and the buffer protocol; a
protocol attribute that raises (a torch CPU tensor's
``__cuda_array_interface__``) passes to the next.  A malformed interface
dict is refused naming the key and what is valid.  Strided objects cover from their
lowest to their highest addressed byte.  An empty object (no bytes) has no
extent and is refused with ``ValueError``.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any

import numpy as np

__all__ = ["ADDRESS_LIMIT", "address", "address_array", "byte_range", "size"]

ADDRESS_LIMIT = 1 << 64


def _kind(obj: object) -> str:
    return type(obj).__name__


def address(value: object, what: str = "address") -> int:
    """``value`` as an address in ``[0, 2**64)``, or TypeError/ValueError."""
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise TypeError(f"{what} must be an int, not {_kind(value)}")
        value = operator.index(value)  # type: ignore[arg-type]  # has __index__
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {value}")
    if value >= ADDRESS_LIMIT:
        raise ValueError(f"{what} must be below 2**64, got {value:#x}")
    return value


def size(value: object, what: str = "size") -> int:
    """``value`` as a byte count >= 1, or TypeError/ValueError."""
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise TypeError(f"{what} must be an int, not {_kind(value)}")
        value = operator.index(value)  # type: ignore[arg-type]  # has __index__
    if value < 1:
        raise ValueError(f"{what} must be at least 1 byte, got {value}")
    return value


def byte_range(obj: object, nbytes: object = 1) -> tuple[int, int]:
    """``(start, size)`` for an int address plus ``nbytes``, or for an object's
    whole extent (then ``nbytes`` must be left at 1)."""
    if type(obj) is int or _is_scalar_address(obj):
        start = address(obj)
        n = size(nbytes)
        if start + n > ADDRESS_LIMIT:
            raise ValueError(f"the range [{start:#x}, {start:#x} + {n}) runs past the end "
                             "of the 64-bit address space")
        return start, n
    if isinstance(obj, (bool, float, complex)):
        raise TypeError(f"address must be an int, not {_kind(obj)}")
    if not (type(nbytes) is int and nbytes == 1):
        raise ValueError(f"size is taken from the {_kind(obj)} object's extent; pass size "
                         f"only with an int address (got size={nbytes!r})")
    start, n = _object_extent(obj)
    if n == 0:
        raise ValueError(f"the {_kind(obj)} object is empty (0 bytes): it has no extent to look up")
    if start < 0 or start + n > ADDRESS_LIMIT:
        raise ValueError(f"the {_kind(obj)} object's extent [{start:#x}, +{n}) is not a valid "
                         "64-bit address range")
    return start, n


def _is_scalar_address(obj: object) -> bool:
    """An int-like scalar (numpy integer, IntEnum, ...), as opposed to an
    array-like object (numpy arrays have ``__index__`` too)."""
    if isinstance(obj, (int, np.integer)):
        return not isinstance(obj, bool)
    cls = type(obj)
    return hasattr(cls, "__index__") and not any(
        hasattr(cls, name) for name in ("__cuda_array_interface__", "__array_interface__",
                                         "__dlpack__", "__buffer__", "__len__"))


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
        if view.nbytes == 0:
            return 0, 0
        try:
            arr = np.asarray(view)
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


_INTERFACES = ("__cuda_array_interface__", "__array_interface__")


def _object_extent(obj: Any) -> tuple[int, int]:
    """Through the first protocol the object offers.  A protocol attribute
    that raises (torch's CPU tensors raise AttributeError from
    __cuda_array_interface__) means the object does not offer it: the next
    protocol is tried, and the final error says what each one raised."""
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
    if isinstance(ptrs, np.ma.MaskedArray):
        ptrs = np.ma.getdata(ptrs)
    arr = ptrs if isinstance(ptrs, np.ndarray) else None
    if arr is None:
        if isinstance(ptrs, (str, bytes, bytearray)) or not hasattr(ptrs, "__len__"):
            if hasattr(ptrs, "__iter__") and not isinstance(ptrs, (str, bytes, bytearray)):
                ptrs = list(ptrs)  # type: ignore[call-overload]
            else:
                raise TypeError(f"ptrs must be an array or a sequence of int addresses, "
                                f"not {_kind(ptrs)}")
        try:
            arr = np.asarray(ptrs)
        except (OverflowError, ValueError):
            arr = None
        if arr is None or (arr.dtype.kind not in "ui" and arr.size):
            # e.g. [1, 2**64 - 1] becomes float64: check each value exactly
            arr = np.empty(len(ptrs), dtype=object)  # type: ignore[arg-type]
            arr[:] = list(ptrs)  # type: ignore[call-overload]
    kind = arr.dtype.kind
    if kind == "u":
        return arr.astype(np.uint64, copy=False).ravel()
    if kind == "i":
        if arr.size and arr.min() < 0:
            raise ValueError(f"ptrs[{int(np.argmin(arr.ravel()))}] is negative "
                             f"({int(arr.min())}); addresses must not be negative")
        return arr.astype(np.uint64).ravel()
    if kind == "O":
        flat = arr.ravel()
        out = np.empty(flat.size, dtype=np.uint64)
        for i, value in enumerate(flat):
            out[i] = address(value, f"ptrs[{i}]")
        return out
    if arr.size == 0 and kind == "f":  # np.asarray([]) is float64
        return np.empty(0, dtype=np.uint64)
    raise TypeError(f"ptrs must hold integer addresses, not {arr.dtype} values")
