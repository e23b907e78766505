"""Hook events and the subscribers that receive them.

Every completed CUDA allocation or free call the hooks see becomes one
:class:`Event`.  The hooks only record events into the
core's lock-free queue; Python takes them out when it drains the queue -
lazily before every module-level cache query (:func:`memhook.memory_type`
and friends), and on :func:`memhook.flush`.  Draining applies each event
to the process-wide cache and then hands it to the subscribers, in event
order.  The drain (:mod:`memhook._events.drain`, where ``flush`` lives) reads this
module; this module never imports the drain, so the two form no cycle.

Subscribers run in the thread that drains, one event at a time, while that
thread holds the drain lock:

* an exception in a subscriber is logged (logger ``"memhook"``) and the
  other subscribers still get the event;
* a subscriber may query memhook (``memory_type`` and friends see the cache
  up to and including its event) but a drain it starts does nothing - the
  outer drain is still delivering events in order;
* a subscriber must not wait for another thread that queries memhook: that
  thread waits for the drain to finish.
"""

from __future__ import annotations

import enum
import os
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ._events.atomic import commit
from ._binding.core import lib
from ._objects.symbolize import Caller, resolve_local
from ._values.types import MemoryType

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Caller", "Event", "EventKind", "Subscription", "subscribe", "subscriptions"]


class EventKind(enum.IntFlag):
    """What an event reports: an allocation or a free.  A flag, so that
    :func:`subscribe` can take ``ALLOC | FREE``."""

    ALLOC = 1
    FREE = 2

    def __str__(self) -> str:
        names = [name.lower() for name, bit in (("ALLOC", 1), ("FREE", 2)) if self & bit]
        return "|".join(names) or "none"


_SLOTS = {"slots": True} if sys.version_info >= (3, 10) else {}


@dataclass(frozen=True, **_SLOTS)
class Event:
    """One completed user call of a hooked function.

    ``address`` is 0 for a failed ALLOC; ``size`` is the requested bytes
    (pitch x height for pitched allocations, the global's size for module
    and library globals, the allocation's size for a FREE; 0 for a FREE whose
    size nobody knew - then ``size_unknown`` is True); ``device`` is -1 when
    unknown; ``result`` is the CUresult / cudaError_t of the call (0:
    success).  ``seq`` is the event's position in this process's event
    order, ``flags`` the core's ``MEMHOOK_EVENT_*`` flags.
    ``caller_address`` is the return address into the code that called
    CUDA; :attr:`caller` names it.

    ``timestamp_ns`` is CLOCK_MONOTONIC, and coarse - the clock as of its
    last tick (``CLOCK_MONOTONIC_COARSE``, 1-4 ms), so about a tick before
    the call, more where the kernel's tick comes late - unless it is
    precise: where reading the TSC costs less than the coarse clock (the
    core times both at load; ``MEMHOOK_CLOCK`` decides otherwise), and
    wherever precise time is on: under ``memhook trace``, and for
    events recorded while a subscription made with ``precise_time=True``
    is open (:func:`subscribe`).  The event order does not come from the
    timestamps: it is causal per address range - a FREE comes after the
    ALLOC that made its range and before any later ALLOC overlapping it;
    markers (the driver unloaded) come after what was recorded before them.
    Events of unrelated ranges from different threads within one coarse
    tick may come in either order, so across threads ``seq`` order and
    timestamp order may disagree by up to a tick.

    >>> from memhook import Event, EventKind, MemoryType
    >>> e = Event(EventKind.ALLOC, "cuMemAlloc_v2", 0x10000, 256, MemoryType.CUDA,
    ...           device=0, pid=1, tid=1, timestamp_ns=0, result=0)
    >>> e.ok, hex(e.end), e.size_unknown
    (True, '0x10100', False)
    >>> Event(EventKind.ALLOC, "cuMemAlloc_v2", 0, 1 << 50, MemoryType.CUDA,
    ...       0, 1, 1, 0, result=2).ok                  # CUDA_ERROR_OUT_OF_MEMORY
    False
    """

    kind: EventKind
    function: str
    address: int
    size: int
    mem_type: MemoryType
    device: int
    pid: int
    tid: int
    timestamp_ns: int
    result: int
    seq: int = -1
    flags: int = 0
    caller_address: int = 0

    @property
    def caller(self) -> Caller | None:
        """The code that called into CUDA (past CUDA's own libraries): its
        object, symbol and offset, resolved on first use from this process's
        mappings and the object's ELF symbols (cached per object); None when
        the address is 0.  An address in no mapped object (the object was
        unloaded since) keeps ``object`` empty."""
        if not self.caller_address:
            return None
        return resolve_local(self.caller_address)

    @property
    def ok(self) -> bool:
        """True when the call succeeded (``result == 0``)."""
        return self.result == 0

    @property
    def size_unknown(self) -> bool:
        """True for a FREE whose size nobody knew (``size`` is 0 then)."""
        return bool(self.flags & SIZE_UNKNOWN)

    @property
    def context_reset(self) -> bool:
        """True for the FREE a context teardown makes (cuDevicePrimaryCtxReset,
        cuCtxDestroy, the last cuDevicePrimaryCtxRelease): every allocation
        of a context on ``device`` (-1: not known which) is gone; it has no
        address or size of its own."""
        return bool(self.flags & CONTEXT_RESET)

    @property
    def end(self) -> int:
        """One past the last byte: ``address + size``."""
        return self.address + self.size


SIZE_UNKNOWN = 0x1
"""``Event.flags`` bit: a FREE whose size nobody knew (MEMHOOK_EVENT_SIZE_UNKNOWN)."""

CONTEXT_RESET = 0x8
"""``Event.flags`` bit: a context teardown's FREE (MEMHOOK_EVENT_CONTEXT_RESET)."""

_ALL_KINDS = EventKind.ALLOC | EventKind.FREE

Callback = Callable[[Event], object]


class Subscription:
    """A callback registered with :func:`subscribe`.  :meth:`close` (or
    leaving a ``with`` block) unregisters it; closing twice is harmless.
    A subscription closed while a drain is delivering gets no further
    events."""

    __slots__ = ("__weakref__", "_active", "_kind_bits", "callback", "exact", "kinds",
                 "precise_time")

    def __init__(self, callback: Callback, kinds: EventKind, precise_time: bool = False,
                 exact: bool = False) -> None:
        self.callback = callback
        self.kinds = kinds
        self.precise_time = precise_time
        self.exact = exact
        self._kind_bits = int(kinds)  # (the drain tests it per event: int & int is cheap)
        self._active = True

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return not self._active

    def close(self) -> None:
        """Stop receiving events (idempotent).

        Runtime complexity: O(s) for s live subscriptions.

        >>> import memhook
        >>> sub = memhook.subscribe(print)
        >>> sub.close(); sub.close()
        >>> sub.closed
        True
        """
        _registry.remove(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if not self._active else str(self.kinds)
        return f"<Subscription {self.callback!r} ({state})>"


class _Registry:
    """The live subscriptions, published as one tuple (copy on write), so
    the drain reads them with no lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: tuple[Subscription, ...] = ()

    # Each change is one commit (memhook._events.atomic): an exception from a
    # signal handler (^C) in subscribe() or close() leaves the subscription
    # registered, active and counted for precise time, or none of these.

    def add(self, sub: Subscription) -> None:
        steps: list[tuple[Any, ...]] = []
        if sub.precise_time:
            steps.append((lib.memhook_events_precise_time, 1))
        if sub.exact:
            steps.append((lib.memhook_events_exact_sizes, 1))
        with self.lock:
            steps.append((setattr, self, "current", (*self.current, sub)))
            commit(steps)

    def remove(self, sub: Subscription) -> None:
        with self.lock:
            if not sub._active:
                return
            steps: list[tuple[Any, ...]] = [
                (setattr, sub, "_active", False),
                (setattr, self, "current", tuple(s for s in self.current if s is not sub))]
            if sub.precise_time:
                steps.append((lib.memhook_events_precise_time, 0))
            if sub.exact:
                steps.append((lib.memhook_events_exact_sizes, 0))
            commit(steps)

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()


_registry = _Registry()
os.register_at_fork(after_in_child=_registry.after_fork_in_child)


def _as_kinds(kinds: EventKind | int) -> EventKind:
    if isinstance(kinds, bool) or not isinstance(kinds, int):
        raise TypeError(f"kinds must be an EventKind (ALLOC, FREE or both), "
                        f"not {type(kinds).__name__}")
    if not 0 < int(kinds) <= int(_ALL_KINDS):
        raise ValueError(f"kinds must be EventKind.ALLOC, EventKind.FREE or both, got {kinds!r}")
    return EventKind(int(kinds))


def subscribe(callback: Callback,
              kinds: EventKind | int = EventKind.ALLOC | EventKind.FREE, *,
              precise_time: bool = False, exact: bool = False) -> Subscription:
    """Call ``callback(event)`` for every event of ``kinds`` drained from now
    on (failed calls included), in event order, on the thread the module
    docstring names.  Returns the :class:`Subscription`; close it (or use it
    as a context manager) to stop.  Runtime complexity: O(s) for s live
    subscriptions.

    ``kinds``: ``EventKind.ALLOC``, ``EventKind.FREE`` or both; anything
    else raises TypeError or ValueError.
    ``precise_time``: precise timestamps (:attr:`Event.timestamp_ns`) on
    every event recorded while the subscription is open, at a cost to every
    hooked call; events already recorded keep their time.
    ``exact``: every FREE whose call begins while the subscription is open
    carries its size as the driver knew it before the free, and every event
    a precise timestamp (what ``memhook trace`` gets).  Without it a FREE of
    memory allocated before :func:`install` (or a gap in the hooks) has
    size 0 and ``size_unknown`` set.  docs/design/python-drain.md says
    what each option costs.

    The example records through ``memhook_events_record``, as a hook would:

    >>> import memhook
    >>> from memhook._binding.core import lib
    >>> from memhook.hooks import hook_index
    >>> def record(kind, function):
    ...     return lib.memhook_events_record(kind, hook_index(function), 0x7f0000000000,
    ...                                      4096, lib.MEMHOOK_MEM_CUDA, 0, 0)
    >>> seen = []
    >>> with memhook.subscribe(seen.append, memhook.EventKind.ALLOC) as sub:
    ...     record(lib.MEMHOOK_EVENT_ALLOC, "cuMemAlloc_v2")
    ...     record(lib.MEMHOOK_EVENT_FREE, "cuMemFree_v2")
    ...     memhook.flush()
    0
    0
    2
    >>> [(e.kind, e.function, hex(e.address), e.size, e.ok) for e in seen]  # no FREE: not asked
    [(<EventKind.ALLOC: 1>, 'cuMemAlloc_v2', '0x7f0000000000', 4096, True)]
    >>> sub.closed
    True
    """
    if not callable(callback):
        raise TypeError(f"callback must be callable, not {type(callback).__name__}")
    if not isinstance(precise_time, bool):
        raise TypeError(f"precise_time must be True or False, not {precise_time!r}")
    if not isinstance(exact, bool):
        raise TypeError(f"exact must be True or False, not {exact!r}")
    sub = Subscription(callback, _as_kinds(kinds), precise_time, exact)
    _registry.add(sub)
    return sub


def subscriptions() -> tuple[Subscription, ...]:
    """The live subscriptions (a snapshot).  Runtime complexity: O(1).

    >>> import memhook
    >>> from memhook.events import subscriptions
    >>> with memhook.subscribe(print) as sub:
    ...     sub in subscriptions()
    True
    >>> sub in subscriptions()
    False
    """
    return _registry.current
