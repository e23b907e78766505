"""Comments in csrc/ and memhook/ explain; they do not hold the argument.

Two rules without exceptions: no comment block (a docstring included) of
40 lines or more - a proof or a history belongs in docs/design/*.md, the
code keeps a few lines of why and names the note - and no issue number in a
comment (history goes in docs/history.md).  tools/comment_stats.py does the
counting and lists the rest (the ratio, figures) for a reader to judge.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LONG_BLOCK = 40


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("comment_stats", ROOT / "tools" / "comment_stats.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["comment_stats"] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


cs = _tool()


Scan = list[tuple[Any, list[Any]]]  # (FileStats, [Finding]) per file


def _scanned() -> Scan:
    return [cs.scan_file(f) for f in cs.iter_sources(["csrc", "memhook"])]


def _long_blocks(scanned: Scan) -> list[str]:
    return [f"{st.path}:{b.first} ({b.lines} lines)"
            for st, _ in scanned for b in st.blocks if b.lines >= LONG_BLOCK]


def _issue_refs(scanned: Scan) -> list[str]:
    return [f"{f.path}:{f.line}: {f.text}" for _, fs in scanned for f in fs if f.kind == "issue"]


def test_no_comment_block_of_40_lines_or_more() -> None:
    scanned = _scanned()
    assert len(scanned) > 100, "the scan found too few sources to mean anything"
    long = _long_blocks(scanned)
    assert not long, ("move the argument to docs/design/<mechanism>.md and keep a few lines "
                      f"of why that name the note: {long}")


def test_no_issue_number_in_a_code_comment() -> None:
    refs = _issue_refs(_scanned())
    assert not refs, f"say why in the comment; the history goes in docs/history.md: {refs}"


def test_the_checks_see_a_planted_violation(tmp_path: Path) -> None:
    """A C block and a Python docstring of 40 lines, and issue numbers in
    comments of both languages, are found; the same words in code are not."""
    body = "\n".join(f" * line {i}" for i in range(38))
    c = tmp_path / "planted.c"
    c.write_text(f"/*\n{body}\n * the end\n */\n"
                 "int f(void) { return 1; } /* fixed in issue 23 */\n"
                 'const char *s = "issue 24 #25";\n')
    py = tmp_path / "planted.py"
    doc = "\n".join(f"    line {i}" for i in range(38))
    py.write_text(f'def f() -> None:\n    """Start.\n{doc}\n    """\n'
                  "    x = 1  # see #12 for why\n"
                  "    y = 'issue 13'\n")
    c_stats, c_found = cs.scan_file(c, tmp_path)
    py_stats, py_found = cs.scan_file(py, tmp_path)
    assert [b.lines for b in c_stats.blocks if b.lines >= LONG_BLOCK] == [41]
    assert [b.lines for b in py_stats.blocks if b.lines >= LONG_BLOCK] == [40]
    assert [(f.line, f.match) for f in c_found if f.kind == "issue"] == [(42, "issue 23")]
    assert [(f.line, f.match) for f in py_found if f.kind == "issue"] == [(42, "#12")]
    scanned = [(c_stats, c_found), (py_stats, py_found)]
    assert len(_long_blocks(scanned)) == 2 and len(_issue_refs(scanned)) == 2
