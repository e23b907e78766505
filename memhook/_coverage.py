"""Whether the hooks vouch for every allocation: the cache's
``coverage_complete`` predicate, answered cheaply.

Only while the installed hooks cover every allocation entry point of the
loaded driver may the cache answer HOST for a pointer it does not know
without asking the driver.  The core's
``memhook_hooks_coverage_complete`` decides; its answer can only change when
the hooks are (re)installed or removed, or when an object is loaded (a
driver or runtime arriving, which the reloc layer must then patch).  So the
answer is remembered under a token from the core (``memhook_coverage_token``:
the installed mode, the loader's object count, the queue's first trim - one
extension call) and an install epoch that :mod:`memhook.hooks` bumps, and
asked again only when one of those changed - this predicate runs on the
cache's hot query paths, on every HOST answer.
"""

from __future__ import annotations

from . import _control
from ._core import lib
from ._fastpath import FAST

__all__ = ["coverage_complete", "invalidate"]

_token = lib.memhook_coverage_token
_ask = _control.coverage_complete  # (long: with the GIL held, see memhook._control)

_epoch = 0
# (token, epoch, answer), published by one store.  The token (one call into
# the core) moves with the mode, the loader's object count and the queue's
# first trim; the epoch with every install() and uninstall().
_memo: tuple[int, int, bool] = (-1, -1, False)
# memory_type's C fast path answers HOST from its copy of the memo (and
# checks the token itself): each store of the memo or the epoch goes there too.
_note_memo = FAST.coverage_memo if FAST is not None else (lambda token, epoch, answer: None)
_note_epoch = FAST.coverage_epoch if FAST is not None else (lambda epoch: None)


def invalidate() -> None:
    """Forget the remembered answer (the hooks were installed or removed)."""
    global _epoch
    _epoch += 1
    _note_epoch(_epoch)


def coverage_complete() -> bool:
    """True while the installed hooks see every allocation the loaded driver
    can make (so a pointer in no known region is host memory)."""
    global _memo
    token = _token()
    memo = _memo
    if memo[0] == token and memo[1] == _epoch:
        return memo[2]
    if not token & 3:  # mode none: nothing is vouched for
        _memo = (token, _epoch, False)
        _note_memo(token, _epoch, False)
        return False
    epoch = _epoch
    answer = bool(_ask())
    _memo = (token, epoch, answer)
    _note_memo(token, epoch, answer)
    return answer
