"""memhook: is this pointer GPU memory, and which kind?

memhook intercepts CUDA allocation and free entry points inside a process,
turns every call into an event, and answers memory-type queries from a cache.
This module is the public Python API (its ``__all__``); docs/architecture.md
in the repository describes the layers and the contracts.  Each function's
docstring says what it does, what it costs and shows an example; the
examples run in the test suite (tests/test_doctests.py), on the simulator
where they need a driver.

* hooks: :func:`install`, :func:`uninstall`, :func:`status` (:mod:`memhook.hooks`);
* events: :func:`subscribe`, :class:`Event` (:mod:`memhook.events`), :func:`flush`
  (:mod:`memhook._events.drain`);
* queries: :func:`memory_type`, :func:`lookup`, :func:`memory_types`, and the
  standalone :class:`MemtypeCache` (:mod:`memhook.cache`);
* the simulator: :mod:`memhook.sim`.

>>> import memhook
>>> memhook.memory_type(bytearray(64))          # any buffer, or an int address
<MemoryType.HOST: 0>
>>> memhook.MemoryType.CUDA_MANAGED.is_gpu, memhook.MemoryType.CUDA_HOST.is_gpu
(True, False)
"""

from __future__ import annotations

import logging

from ._events import drain as _drain
from ._events import feeder as _feeder
from ._binding.core import library_path
from ._values.modes import HookMode
from ._values.types import MemoryType, Region
from ._version import __version__
from ._queries.query import lookup, memory_type, memory_types
from .cache import MemtypeCache
from ._events.drain import flush
from .events import Caller, Event, EventKind, Subscription, subscribe
from .hooks import HookInfo, HookReport, install, status, uninstall

__all__ = [
    "Caller",
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
if _drain.attach():
    _feeder.start()
