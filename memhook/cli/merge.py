"""``memhook merge FILES... [-f chrome|jsonl|memviz] [-o OUT]``: many traces
as one view.

FILES are jsonl traces (``memhook trace -f jsonl``), typically one per rank
of a job (``memhook trace -o t-%h-%r.jsonl``), from any machines; a
directory stands for the ``*.jsonl`` files in it.  Each file becomes one
process track named by its rank and host, its clock aligned by its anchor
(:mod:`memhook.tracing.merge`); the events of all are written in aligned
time order (:mod:`memhook.tracing.merge_writers`).  The summary on stderr
gives peak bytes per rank and device and which rank peaked first.

The output is written to ``OUT.partial`` and renamed to OUT when it is
whole, so a merge that fails leaves no file that looks complete.

Exit status: 0; 2 for a usage error (no files, an empty directory, bad
flags, an unwritable OUT); 65 (EX_DATAERR) when an input is not a trace,
has no clock anchor, comes from another memhook version than the rest (the
message says which; ``--mixed-versions`` merges them anyway), or is cut
short - then the output holds the whole lines and the warning says what
was left out.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import sys
from typing import IO, Any

from .._values.printable import printable
from ..tracing.tracefile import TraceError, TraceFile
from .diff import DATA_ERROR, check_versions

__all__ = ["DEFAULT_FILES", "add_parser", "input_files", "run"]

DEFAULT_FILES = {"chrome": "memhook-merge.json", "jsonl": "memhook-merge.jsonl",
                 "memviz": "memhook-merge.pickle"}


class UsageError(Exception):
    """Bad arguments: the message, exit status 2."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    from ..tracing.merge_writers import MERGE_FORMATS

    p = sub.add_parser(
        "merge", help="join jsonl traces (a job's ranks) into one view, clocks aligned",
        description="Join traces made with `memhook trace -f jsonl` (one per rank: "
                    "-o t-%h-%r.jsonl) into one view: a process track per rank, labelled "
                    "with its host and rank, clocks aligned by each file's anchor; the "
                    "summary gives peak bytes per rank and device and which rank peaked first.")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="jsonl traces, or directories of them (their *.jsonl files)")
    p.add_argument("-f", "--format", default="chrome", choices=MERGE_FORMATS,
                   help="output format (default chrome: Perfetto / chrome://tracing)")
    p.add_argument("-o", "--output", default=None, metavar="OUT",
                   help="where to write ('-' = stdout; default " +
                        ", ".join(f"{v} for {k}" for k, v in DEFAULT_FILES.items()) + ")")
    p.add_argument("--memviz-entries", type=int, default=100_000, metavar="N",
                   help="memviz keeps the last N entries (default 100000)")
    p.add_argument("--mixed-versions", action="store_true",
                   help="merge traces written by different memhook versions")
    p.set_defaults(func=run)
    return p


def input_files(args: list[str]) -> list[str]:
    """The files named, a directory standing for its ``*.jsonl`` files (in
    name order); raises UsageError for an empty directory or a missing path."""
    out: list[str] = []
    for arg in args:
        if os.path.isdir(arg):
            try:
                names = sorted(n for n in os.listdir(arg) if n.endswith(".jsonl"))
            except OSError as exc:
                raise UsageError(f"cannot list {printable(arg)}: {exc.strerror or exc}") \
                    from None
            found = [os.path.join(arg, n) for n in names
                     if os.path.isfile(os.path.join(arg, n))]
            if not found:
                raise UsageError(f"{printable(arg)} holds no .jsonl files (merge reads the "
                                 f"traces of `memhook trace -f jsonl -o FILE`)")
            out += found
        elif not os.path.exists(arg):
            raise UsageError(f"{printable(arg)}: no such file")
        else:
            out.append(arg)
    return out


def _fail(message: str, status: int) -> int:
    print(f"memhook merge: {message}", file=sys.stderr)
    return status


def _room_for(n_files: int) -> None:
    """Every input stays open for the k-way merge: raise the soft limit of
    descriptors toward the hard one when many ranks are merged."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = n_files + 64
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _open_output(fmt: str, path: str, binary: bool) -> tuple[IO[Any], str | None]:
    """(stream, the partial file to rename to ``path`` when whole; None: stdout)."""
    if path == "-":
        if binary and fmt == "memviz" and sys.stdout.isatty():
            raise UsageError("memviz is a binary pickle; give -o FILE or redirect stdout")
        return (sys.stdout.buffer if binary else sys.stdout), None
    partial = f"{path}.partial"
    try:
        stream = open(partial, "wb" if binary else "w",  # noqa: SIM115 - closed by run()
                      encoding=None if binary else "utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {printable(path)}: {exc.strerror or exc}") from None
    return stream, partial


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:  # (the partial output is gone: _run's finally)
        return _fail("interrupted; nothing was written", 130)


def _run(args: argparse.Namespace) -> int:
    from ..tracing.merge import MergeSummary, make_tracks, merged
    from ..tracing.merge_writers import make_merge_writer
    from ..tracing.progress import Progress

    if args.memviz_entries < 1:
        return _fail("--memviz-entries must be at least 1", 2)
    try:
        paths = input_files(args.files)
    except UsageError as exc:
        return _fail(str(exc), 2)
    _room_for(len(paths))
    files: list[TraceFile] = []
    out: IO[Any] | None = None
    partial: str | None = None
    whole = False
    try:
        try:
            for path in paths:
                files.append(TraceFile(path))
            tracks = make_tracks(files)
        except TraceError as exc:
            return _fail(str(exc), DATA_ERROR)
        problem = check_versions(files)
        if problem and not args.mixed_versions:
            return _fail(problem, DATA_ERROR)
        output = args.output or DEFAULT_FILES[args.format]
        binary = args.format in ("memviz", "jsonl")
        try:
            out, partial = _open_output(args.format, output, binary)
        except UsageError as exc:
            return _fail(str(exc), 2)
        start = min(t.header.anchor.realtime_ns for t in tracks if t.header.anchor)
        progress = Progress(sum(f.size for f in files), "memhook merge")
        for f in files:
            f.progress = progress.advance
        writer = make_merge_writer(args.format, out, tracks, start, args.memviz_entries)
        summary = MergeSummary(tracks, start)
        try:
            event = writer.event
            for wall, track, e, changes in merged(tracks):
                event(wall, track, e, changes)
            writer.close(summary)
            if partial is not None:
                out.close()
                os.replace(partial, output)
                partial = None
            whole = True
        except TraceError as exc:
            return _fail(f"{exc}; nothing was written to {printable(output)}", DATA_ERROR)
        except OSError as exc:
            return _fail(f"writing {printable(output)} failed: {exc.strerror or exc}", 1)
        finally:
            progress.done()
    finally:
        for f in files:
            f.close()
        if out is not None and partial is not None:
            with contextlib.suppress(OSError):
                out.close()
            with contextlib.suppress(OSError):
                os.unlink(partial)
    assert whole
    text = summary.text()
    cut = [f.cut for f in files if f.cut]
    text += "".join(f"warning: {c}\n" for c in cut)
    if output != "-":
        text += f"memhook merge: wrote the {args.format} view of {len(files)} traces to " \
                f"{printable(output)}\n"
    sys.stderr.write(text)
    return DATA_ERROR if cut else 0
