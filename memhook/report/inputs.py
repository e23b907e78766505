"""Which ranks each of ``memhook report``'s inputs holds, and its clock.

A trace of one process (``memhook trace -f jsonl``) is one track, named
as ``memhook merge`` names it (its rank and host, with the file's name
where two say the same); its times go through its header's clock anchor
to the wall clock, so the files of a job's ranks line up.  A file of
``memhook merge -f jsonl`` is the tracks its header lists, each line
already carrying its aligned time.  A file without an anchor (an older
memhook's) keeps its own clock, which is only sound when it is alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from .._values.printable import printable
from ..tracing.tracefile import TraceError, TraceFile
from .model import TrackInfo, merged_sources

__all__ = ["plan"]


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def plan(files: list[TraceFile]) -> Iterator[tuple[TraceFile, list[TrackInfo],
                                                   Callable[[int], int] | None, bool]]:
    """(file, its tracks, its clock's map to the wall clock, merged?) per file."""
    merged = {f.path: merged_sources(f.path) for f in files}
    singles = [f for f in files if merged[f.path] is None]
    unanchored = [f for f in singles if f.header.anchor is None]
    if unanchored and len(files) > 1:
        raise TraceError(f"{printable(unanchored[0].path)} has no clock anchor (it was written "
                         f"by an older memhook), so its times cannot be put beside the other "
                         f"traces'; report it alone")
    labels = [f.header.label for f in singles]
    for f in files:
        sources = merged[f.path]
        if sources is not None:
            tracks = [TrackInfo(printable(str(s.get("label") or f"track {i}")), f.path,
                                _int_or_none(s.get("rank")),
                                None if s.get("host") is None else str(s.get("host")))
                      for i, s in enumerate(sources)]
            yield f, tracks, None, True
            continue
        h = f.header
        label = h.label
        if labels.count(label) > 1:
            label = f"{label} ({os.path.basename(f.path)})"
        to_wall = h.anchor.to_wall if h.anchor is not None else None
        yield f, [TrackInfo(printable(label), f.path, h.rank, h.host)], to_wall, False
