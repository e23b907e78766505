"""Public value types of the memory-type cache: :class:`MemoryType` and :class:`Region`.

Pure Python, no native code: importable on its own.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import IntEnum

__all__ = ["MemoryType", "Region"]


class MemoryType(IntEnum):
    """What kind of memory an address range is.

    The values are fixed and small: :func:`memhook.memory_types` returns them
    as ``uint8`` codes, so they are part of the API.

    ========  =====  ====================================================
    name      code   meaning
    ========  =====  ====================================================
    HOST      0      ordinary host memory (nothing CUDA knows about)
    CUDA      1      device memory (``cuMemAlloc``, pools, VMM maps, ...)
    CUDA_MANAGED 2   unified/managed memory (``cuMemAllocManaged``)
    CUDA_HOST 3      page-locked host memory known to CUDA
                     (``cuMemAllocHost``, ``cuMemHostRegister``, ...) -
                     host memory, *not* GPU memory
    UNKNOWN   4      the cache cannot say: a range that runs past its
                     region, or a region whose kind the call did not decide
    ========  =====  ====================================================
    """

    HOST = 0
    CUDA = 1
    CUDA_MANAGED = 2
    CUDA_HOST = 3
    UNKNOWN = 4

    @property
    def is_gpu(self) -> bool:
        """True for memory that lives on (or migrates to) a GPU: CUDA and
        CUDA_MANAGED.  CUDA_HOST is page-locked *host* memory: False."""
        return self is MemoryType.CUDA or self is MemoryType.CUDA_MANAGED

    def __str__(self) -> str:
        return self.name


# Python 3.10+ gives the dataclass __slots__ (less memory per region: no __dict__).
_SLOTS = {"slots": True} if sys.version_info >= (3, 10) else {}


@dataclass(frozen=True, repr=False, **_SLOTS)
class Region:
    """A half-open address range ``[start, start + size)`` of one memory type
    on one device (``device == -1``: not known, or not one device)."""

    start: int
    size: int
    mem_type: MemoryType
    device: int = -1

    @property
    def end(self) -> int:
        """One past the last address: ``start + size``."""
        return self.start + self.size

    def __contains__(self, address: object) -> bool:
        return isinstance(address, int) and self.start <= address < self.start + self.size

    def __repr__(self) -> str:
        return (f"Region(start={self.start:#x}, size={self.size}, "
                f"mem_type={MemoryType(self.mem_type).name}, device={self.device})")


def _region_factory():  # type: ignore[no-untyped-def]
    """A constructor for trusted arguments that skips the frozen dataclass
    ``__init__`` (object.__setattr__ per field): the cache builds Regions on
    every update, from values it has already checked."""
    if not _SLOTS:  # pragma: no cover - Python 3.9
        return Region
    new = object.__new__
    set_start = Region.start.__set__  # type: ignore[attr-defined]
    set_size = Region.size.__set__  # type: ignore[attr-defined]
    set_type = Region.mem_type.__set__  # type: ignore[attr-defined]
    set_device = Region.device.__set__  # type: ignore[attr-defined]

    def make(start: int, size: int, mem_type: MemoryType, device: int) -> Region:
        r = new(Region)
        set_start(r, start)
        set_size(r, size)
        set_type(r, mem_type)
        set_device(r, device)
        return r

    return make


_make_region = _region_factory()
