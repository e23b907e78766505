"""memhook: is this pointer GPU memory, and which kind?

memhook intercepts CUDA allocation and free entry points inside a process,
turns every call into an event, and answers memory-type queries from a cache.
See DESIGN.md for the contract.  This module is the public Python API.
"""

from __future__ import annotations

import logging

from ._core import library_path
from ._types import MemoryType, Region
from ._version import __version__
from .cache import MemtypeCache, lookup, memory_type, memory_types

__all__ = [
    "MemoryType",
    "MemtypeCache",
    "Region",
    "__version__",
    "library_path",
    "lookup",
    "memory_type",
    "memory_types",
]

logging.getLogger("memhook").addHandler(logging.NullHandler())
