"""memhook: is this pointer GPU memory, and which kind?

memhook intercepts CUDA allocation and free entry points inside a process,
turns every call into an event, and answers memory-type queries from a cache.
See DESIGN.md for the contract.  This module is the public Python API.
"""

from __future__ import annotations

import logging

from . import _drain
from ._core import library_path
from ._modes import HookMode
from ._types import MemoryType, Region
from ._version import __version__
from .cache import MemtypeCache, lookup, memory_type, memory_types
from .events import Event, EventKind, Subscription, flush, subscribe
from .hooks import HookInfo, HookReport, install, status, uninstall

__all__ = [
    "Event",
    "EventKind",
    "HookInfo",
    "HookMode",
    "HookReport",
    "MemoryType",
    "MemtypeCache",
    "Region",
    "Subscription",
    "__version__",
    "flush",
    "install",
    "library_path",
    "lookup",
    "memory_type",
    "memory_types",
    "status",
    "subscribe",
    "uninstall",
]

logging.getLogger("memhook").addHandler(logging.NullHandler())

# The cache drains the hooks' events before every query and asks them
# whether they cover every allocation entry point.
_drain.attach()
