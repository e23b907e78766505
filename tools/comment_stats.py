#!/usr/bin/env python3
"""How much of the source is comment, and which comments break the house rules.

For each C (.c .h .S .def .cu) and Python file under the given paths
(default: csrc/ and memhook/, the simulator under csrc/sim/ included) it
counts comment lines and code lines and prints their ratio per file, per
language and in total. Then it lists:

  long blocks   comment blocks of --long lines or more (default 40)
  issue refs    comments that cite an issue ("issue 23", "issues 12 and 14",
                "#23" where # is not C's preprocessor or a hex colour)
  figures       comments with a number next to a unit of time or a percent
                ("120 ns", "~3 us", "40%"); a constant of the design (a
                250 ms window) is listed too: the list is for a reader to judge

What counts:
  comment line  a line holding comment text and no code; a line of a Python
                docstring (module, class or function) counts as comment
  code line     a line holding code, with or without a trailing comment
  blank lines and comment lines that hold only a delimiter ("/*", "*/",
                "#", '\"\"\"') count as neither
  a block       consecutive comment lines with no code or blank line
                between them, or one /* */ comment, or one docstring

    python tools/comment_stats.py                  # csrc/ and memhook/
    python tools/comment_stats.py --files csrc/queue
    python tools/comment_stats.py --json > stats.json

tests/test_comments.py imports `scan_file` and holds the two rules that have
no exceptions: no block of 40 lines or more, no issue number in a comment.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import subprocess
import sys
import tokenize
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("csrc", "memhook")
C_SUFFIXES = {".c", ".h", ".S", ".def", ".cu"}
PY_SUFFIXES = {".py"}
LONG_BLOCK = 40

# "issue 23", "issues 12 and 14", "Issue #7"; and a bare "#23" not glued to a word.
ISSUE_RE = re.compile(r"\bissues?\s+#?\d+|(?<![\w#&/])#\d+\b", re.I)
# A number, an optional space, then a unit of time or a percent sign.
FIGURE_RE = re.compile(r"(?<![\w.])~?\d[\d,.]*\s?(?:ns|us|µs|ms|%)(?![\w])")
_DELIMITER_ONLY = re.compile(r"^\s*(?:/\*+|\*+/|\*|//+|#+|[rRbBuU]?(?:\"\"\"|'''))?\s*$")


@dataclass
class Block:
    """One comment block: where it starts, how many lines, and its text."""
    first: int
    last: int
    text: str

    @property
    def lines(self) -> int:
        return self.last - self.first + 1


@dataclass
class FileStats:
    path: str
    language: str
    code: int = 0
    comment: int = 0
    blocks: list[Block] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.comment / self.code if self.code else 0.0


@dataclass
class Finding:
    """A comment line that cites an issue or a figure."""
    path: str
    line: int
    kind: str  # "issue" or "figure"
    match: str
    text: str


# -- C ------------------------------------------------------------------------

def _c_comment_spans(src: str) -> list[tuple[int, int, int, str]]:
    """(offset, first line, last line, text) of each comment, strings and chars skipped."""
    spans: list[tuple[int, int, int, str]] = []
    i, n, line = 0, len(src), 1
    while i < n:
        ch = src[i]
        if ch == "\n":
            line += 1
            i += 1
        elif ch in "\"'":
            j = i + 1
            while j < n and src[j] != ch and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            i = j + 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            spans.append((i, line, line, src[i:j]))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            text = src[i:j]
            spans.append((i, line, line + text.count("\n"), text))
            line += text.count("\n")
            i = j
        else:
            i += 1
    return spans


def _strip_c_comments(src: str, spans: list[tuple[int, int, int, str]]) -> list[str]:
    """The file's lines with the comment text blanked out."""
    out, at = [], 0
    for offset, _, _, text in spans:
        out.append(src[at:offset])
        out.append(re.sub(r"[^\n]", " ", text))
        at = offset + len(text)
    out.append(src[at:])
    return "".join(out).split("\n")


def _scan_c(path: Path, rel: str) -> tuple[FileStats, dict[int, str]]:
    src = path.read_text(errors="replace")
    spans = _c_comment_spans(src)
    code_lines = _strip_c_comments(src, spans)
    raw = src.split("\n")
    comment_text: dict[int, str] = {}
    for _, first, _, text in spans:
        for k, piece in enumerate(text.split("\n")):
            comment_text.setdefault(first + k, "")
            comment_text[first + k] += piece
    stats = FileStats(rel, "C")
    kinds: dict[int, str] = {}
    for no, text in enumerate(raw, start=1):
        if code_lines[no - 1].strip():
            kinds[no] = "code"
        elif no in comment_text and not _DELIMITER_ONLY.match(comment_text[no]):
            kinds[no] = "comment"
    stats.code = sum(1 for k in kinds.values() if k == "code")
    stats.comment = sum(1 for k in kinds.values() if k == "comment")
    # A block: one /* */ comment, or a run of comment-only lines.
    run: list[int] = []
    for no in range(1, len(raw) + 2):
        in_comment = no in comment_text and kinds.get(no) != "code" and raw[no - 1].strip() \
            if no <= len(raw) else False
        if in_comment:
            run.append(no)
            continue
        if run:
            stats.blocks.append(Block(run[0], run[-1], "\n".join(comment_text[k] for k in run)))
            run = []
    return stats, {no: t for no, t in comment_text.items()}


# -- Python -------------------------------------------------------------------

def _docstring_ranges(tree: ast.AST) -> list[tuple[int, int]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].end_lineno or body[0].lineno))
    return out


def _scan_py(path: Path, rel: str) -> tuple[FileStats, dict[int, str]]:
    src = path.read_text(errors="replace")
    raw = src.split("\n")
    stats = FileStats(rel, "Python")
    comment_text: dict[int, str] = {}
    code: set[int] = set()
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return stats, {}
    doc_lines: set[int] = set()
    for first, last in _docstring_ranges(tree):
        doc_lines.update(range(first, last + 1))
        for no in range(first, last + 1):
            comment_text[no] = raw[no - 1]
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comment_text[tok.start[0]] = comment_text.get(tok.start[0], "") + tok.string
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER, tokenize.ENCODING):
            for no in range(tok.start[0], tok.end[0] + 1):
                if no not in doc_lines:
                    code.add(no)
    kinds: dict[int, str] = {}
    for no in range(1, len(raw) + 1):
        if no in code:
            kinds[no] = "code"
        elif no in comment_text and not _DELIMITER_ONLY.match(comment_text[no]):
            kinds[no] = "comment"
    stats.code = sum(1 for k in kinds.values() if k == "code")
    stats.comment = sum(1 for k in kinds.values() if k == "comment")
    # Blocks: each docstring; and runs of '#' lines with no code between.
    for first, last in _docstring_ranges(tree):
        stats.blocks.append(Block(first, last, "\n".join(raw[first - 1:last])))
    run: list[int] = []
    for no in range(1, len(raw) + 2):
        if no <= len(raw) and no in comment_text and no not in code and no not in doc_lines:
            run.append(no)
            continue
        if run:
            stats.blocks.append(Block(run[0], run[-1], "\n".join(comment_text[k] for k in run)))
            run = []
    stats.blocks.sort(key=lambda b: b.first)
    return stats, comment_text


# -- Both ---------------------------------------------------------------------

def language_of(path: Path) -> str | None:
    if path.suffix in C_SUFFIXES:
        return "C"
    if path.suffix in PY_SUFFIXES:
        return "Python"
    return None


def scan_file(path: Path, root: Path = ROOT) -> tuple[FileStats, list[Finding]]:
    """Counts for one file and the issue/figure citations in its comments."""
    try:
        rel = str(path.resolve().relative_to(root))
    except ValueError:
        rel = str(path)
    lang = language_of(path)
    if lang is None:
        raise ValueError(f"{path}: not a C or Python source file")
    stats, comments = (_scan_c if lang == "C" else _scan_py)(path, rel)
    findings = []
    for no in sorted(comments):
        text = comments[no]
        for kind, rx in (("issue", ISSUE_RE), ("figure", FIGURE_RE)):
            for m in rx.finditer(text):
                if kind == "issue" and lang == "C" and m.group(0).startswith("#") \
                        and re.match(r"\s*#\d", text):
                    continue  # a line that begins "#1" in a C comment is a list number
                findings.append(Finding(rel, no, kind, m.group(0), text.strip()))
    return stats, findings


def _tracked(root: Path) -> set[Path] | None:
    """The files git tracks under root (build outputs such as the header copy
    in memhook/include/ are not source), or None outside a checkout."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {(root / p).resolve() for p in out.decode().split("\0") if p}


def iter_sources(paths: list[str], root: Path = ROOT) -> Iterator[Path]:
    """The C and Python files under paths that git tracks."""
    tracked = _tracked(root)
    for p in paths:
        base = (root / p) if not Path(p).is_absolute() else Path(p)
        files = [base] if base.is_file() else sorted(base.rglob("*"))
        for f in files:
            if f.is_file() and language_of(f) and (tracked is None or f.resolve() in tracked):
                yield f


def _ratio(comment: int, code: int) -> str:
    return f"{comment / code:.2f}" if code else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="*", default=list(DEFAULT_PATHS),
                    help="files or folders, relative to the repository root (default: csrc memhook)")
    ap.add_argument("--long", type=int, default=LONG_BLOCK, help="a long block has this many lines or more")
    ap.add_argument("--top", type=int, default=0, help="list only the N files with the highest ratio")
    ap.add_argument("--json", action="store_true", help="everything as one JSON object")
    args = ap.parse_args(argv)

    files: list[FileStats] = []
    findings: list[Finding] = []
    for f in iter_sources(args.files):
        st, fd = scan_file(f)
        files.append(st)
        findings.extend(fd)
    per_lang: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for st in files:
        per_lang[st.language][0] += st.comment
        per_lang[st.language][1] += st.code
    total = [sum(v[0] for v in per_lang.values()), sum(v[1] for v in per_lang.values())]
    long_blocks = [(st.path, b) for st in files for b in st.blocks if b.lines >= args.long]

    if args.json:
        json.dump({
            "files": [{"path": s.path, "language": s.language, "comment": s.comment,
                       "code": s.code, "ratio": round(s.ratio, 3)} for s in files],
            "languages": {k: {"comment": v[0], "code": v[1], "ratio": round(v[0] / v[1], 3)
                              if v[1] else None} for k, v in per_lang.items()},
            "total": {"comment": total[0], "code": total[1]},
            "long_blocks": [{"path": p, "first": b.first, "lines": b.lines} for p, b in long_blocks],
            "findings": [asdict(f) for f in findings],
        }, sys.stdout, indent=1)
        print()
        return 0

    shown = sorted(files, key=lambda s: -s.ratio)[:args.top] if args.top else files
    width = max((len(s.path) for s in shown), default=10)
    print(f"{'file':<{width}}  comment   code  ratio")
    for s in shown:
        print(f"{s.path:<{width}}  {s.comment:7d}  {s.code:5d}  {_ratio(s.comment, s.code):>5}")
    print()
    print("language  files  comment   code  ratio")
    for lang, (c, k) in sorted(per_lang.items()):
        n = sum(1 for s in files if s.language == lang)
        print(f"{lang:<8}  {n:5d}  {c:7d}  {k:5d}  {_ratio(c, k):>5}")
    print(f"{'total':<8}  {len(files):5d}  {total[0]:7d}  {total[1]:5d}  {_ratio(*total):>5}")
    print()
    per_dir: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for st in files:
        parts = Path(st.path).parts
        key = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
        per_dir[key][0] += st.comment
        per_dir[key][1] += st.code
    print("folder           comment   code  ratio")
    for d, (c, k) in sorted(per_dir.items()):
        print(f"{d:<15}  {c:7d}  {k:5d}  {_ratio(c, k):>5}")
    print()
    print(f"comment blocks of {args.long} lines or more: {len(long_blocks)}")
    for p, b in long_blocks:
        print(f"  {p}:{b.first}-{b.last}  {b.lines} lines")
    for kind, title in (("issue", "comments citing an issue"), ("figure", "comments citing a figure")):
        hits = [hit for hit in findings if hit.kind == kind]
        print()
        print(f"{title}: {len(hits)} in {len({hit.path for hit in hits})} files")
        for hit in hits:
            print(f"  {hit.path}:{hit.line}  [{hit.match}]  {hit.text[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
