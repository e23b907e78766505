"""Whether the hooks vouch for every allocation: the cache's
``coverage_complete`` predicate, answered cheaply.

Only while the installed hooks cover every allocation entry point of the
loaded driver may the cache answer HOST for a pointer it does not know
without asking the driver (DESIGN.md section 4).  The core's
``memhook_hooks_coverage_complete`` decides; its answer can only change when
the hooks are (re)installed or removed, or when an object is loaded (a
driver or runtime arriving, which the reloc layer must then patch).  So the
answer is remembered with the installed mode, the loader's object count and
an install epoch that :mod:`memhook.hooks` bumps, and asked again only when
one of those changed - this predicate runs on the cache's hot query paths.
"""

from __future__ import annotations

from ._core import lib

__all__ = ["coverage_complete", "invalidate"]

_mode = lib.memhook_hooks_mode
_generation = lib.memhook_loader_generation
_ask = lib.memhook_hooks_coverage_complete

_epoch = 0
# (mode, loader generation, epoch, answer), published by one store.
_memo: tuple[int, int, int, bool] = (-1, -1, -1, False)


def invalidate() -> None:
    """Forget the remembered answer (the hooks were installed or removed)."""
    global _epoch
    _epoch += 1


def coverage_complete() -> bool:
    """True while the installed hooks see every allocation the loaded driver
    can make (so a pointer in no known region is host memory)."""
    global _memo
    mode = _mode()
    if not mode:
        return False
    memo = _memo
    generation = _generation()
    if memo[0] == mode and memo[1] == generation and memo[2] == _epoch:
        return memo[3]
    epoch = _epoch
    answer = bool(_ask())
    _memo = (mode, generation, epoch, answer)
    return answer
