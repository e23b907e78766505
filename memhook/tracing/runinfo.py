"""Who wrote a trace, and when by the wall clock: the facts one trace file
carries so that the traces of a job's ranks, made on several machines, can
be put side by side (:mod:`memhook.tracing.merge`).

* the rank, read from the variables launchers set (:data:`RANK_VARIABLES`,
  first set wins);
* ``-o``'s template: ``%p`` this ``memhook trace``'s pid, ``%h`` the host
  name, ``%r`` the rank, ``%%`` a percent sign (:func:`expand_output`);
* the clock anchor: ``CLOCK_REALTIME`` and ``CLOCK_MONOTONIC`` read
  together (:func:`read_anchor`).  Events are stamped with the monotonic
  clock, which is the machine's own; the anchor turns one into the other;
* the jsonl header record that holds all of it (:func:`header_record`):
  ``"kind": "header"``, so a reader that takes the events by their kind
  (``alloc``/``free``) passes over it.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Mapping

from .._version import __version__

__all__ = ["HEADER_FORMAT", "RANK_VARIABLES", "ClockAnchor", "RankError", "TemplateError",
           "expand_output", "header_record", "host_name", "read_anchor", "read_rank"]

HEADER_FORMAT = 1
"""The jsonl layout's number, in the header's ``format``: a reader refuses
a larger one (keys it would misread), not a different memhook version."""

RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID",
                  "LOCAL_RANK")
"""Where the rank comes from, the first one set winning.  The global ranks
first - torchrun and most Python launchers (``RANK``), Open MPI, PMIx and
MPICH/Intel MPI (``PMI_RANK``), Slurm's ``srun`` (``SLURM_PROCID``, set for
every task even inside an MPI launch) - and ``LOCAL_RANK`` (a rank within
one machine) last, only for a launcher that sets nothing else."""


class RankError(ValueError):
    """``%r`` was asked for and no rank can be read."""


class TemplateError(ValueError):
    """``-o`` holds a ``%`` that is not one of ``%p %h %r %%``."""


def read_rank(env: Mapping[str, str] | None = None) -> tuple[int, str] | None:
    """(rank, the variable it came from), or None when none is set.  A set
    variable that is not a non-negative integer is an error, not skipped:
    the launcher meant something by it."""
    env = os.environ if env is None else env
    for name in RANK_VARIABLES:
        value = env.get(name)
        if value is None or not value.strip():
            continue
        text = value.strip()
        if not text.isdigit():
            raise RankError(f"{name}={value!r} is not a rank (a non-negative integer)")
        return int(text), name
    return None


def host_name() -> str:
    return socket.gethostname() or "localhost"


def expand_output(template: str, env: Mapping[str, str] | None = None,
                  pid: int | None = None, host: str | None = None) -> str:
    """``-o``'s file name with ``%p``, ``%h``, ``%r`` and ``%%`` replaced.

    ``%r`` with no rank variable set is an error (naming the variables
    looked at) rather than a 0: under a launcher memhook does not know,
    every process would write the same file."""
    out: list[str] = []
    i = 0
    while i < len(template):
        ch = template[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        code = template[i + 1] if i + 1 < len(template) else ""
        if code == "%":
            out.append("%")
        elif code == "p":
            out.append(str(os.getpid() if pid is None else pid))
        elif code == "h":
            # A host name holds no '/', but a hostile one must not move the file.
            out.append((host_name() if host is None else host).replace("/", "_"))
        elif code == "r":
            rank = read_rank(env)
            if rank is None:
                raise RankError(f"%r in {template!r}: no rank variable is set (looked at "
                                f"{', '.join(RANK_VARIABLES)}, in that order); run under a "
                                f"launcher, set RANK=N, or use %p")
            out.append(str(rank[0]))
        else:
            shown = f"%{code}" if code else "a lone % at the end"
            raise TemplateError(f"-o {template!r}: {shown} is not a template code; valid: "
                                f"%p (pid), %h (host), %r (rank), %% (a percent sign)")
        i += 2
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class ClockAnchor:
    """One instant on both clocks: ``realtime_ns`` (CLOCK_REALTIME) and
    ``monotonic_ns`` (CLOCK_MONOTONIC), read within ``uncertainty_ns``."""

    realtime_ns: int
    monotonic_ns: int
    uncertainty_ns: int

    def to_wall(self, monotonic_ns: int) -> int:
        return monotonic_ns - self.monotonic_ns + self.realtime_ns


def read_anchor(tries: int = 5) -> ClockAnchor:
    """The two clocks read together: the realtime reading between two
    monotonic ones, the closest pair of ``tries`` (a preemption between the
    reads widens one pair, rarely all)."""
    best: ClockAnchor | None = None
    for _ in range(max(tries, 1)):
        m0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        real = time.clock_gettime_ns(time.CLOCK_REALTIME)
        m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        anchor = ClockAnchor(real, (m0 + m1) // 2, m1 - m0)
        if best is None or anchor.uncertainty_ns < best.uncertainty_ns:
            best = anchor
    assert best is not None
    return best


def header_record(anchor: ClockAnchor, command_pid: int | None = None,
                  env: Mapping[str, str] | None = None) -> dict:
    """The jsonl header: ``kind`` "header", ``format``, ``memhook`` (the
    version), ``host``, ``rank`` and ``rank_from`` (null when no variable
    is set), ``pid`` (this memhook trace), ``command_pid`` (CMD),
    ``clock``: ``{realtime_ns, monotonic_ns, uncertainty_ns}``."""
    try:
        rank = read_rank(env)
    except RankError:
        rank = None  # (only %r makes a bad rank an error; the header says "unknown")
    return {"kind": "header", "format": HEADER_FORMAT, "memhook": __version__,
            "host": host_name(), "rank": rank[0] if rank else None,
            "rank_from": rank[1] if rank else None, "pid": os.getpid(),
            "command_pid": command_pid,
            "clock": {"realtime_ns": anchor.realtime_ns, "monotonic_ns": anchor.monotonic_ns,
                      "uncertainty_ns": anchor.uncertainty_ns}}
