"""No C function of the native tree runs over MAX_LINES lines.

A long function hides the steps it takes; the anchors memhook is held
against (funchook, UCX's UCM) keep theirs short, and so does memhook: the
decoder, the relocator and the live write are each a sequence of named
steps.  The scanner is deliberately simple: comments, strings and
character constants blanked out, then a brace at file level that follows
a parameter list ``)`` (optionally with ``__attribute__``s) opens a
function, which ends at its matching brace.  A function counts from the
line of its name to the line of its closing brace.
"""

from __future__ import annotations

import re
from pathlib import Path

from memhook_testing import CSRC

MAX_LINES = 120

# Comments, then string and character literals (their contents may hold
# braces), each replaced by blanks of the same shape so line numbers stay.
_CODE_NOISE = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'",
                         re.S)
_FUNCTION_HEAD = re.compile(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*"
                            r"(?:__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)\s*)*$")


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def functions(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of every function defined in `text`."""
    code = _CODE_NOISE.sub(_blank, text)
    found = []
    depth, top_start, head = 0, 0, None
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                # The text since the last file-level statement ended.
                m = _FUNCTION_HEAD.search(code[top_start:i].rstrip())
                head = (m.group(1), top_start + m.start()) if m else None
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                if head is not None:
                    name, start = head
                    found.append((name, code.count("\n", 0, start) + 1,
                                  code.count("\n", 0, i) + 1))
                head = None
                top_start = i + 1
        elif ch == ";" and depth == 0:
            top_start = i + 1
        elif ch == "\n" and depth == 0 and code[top_start:i].lstrip().startswith("#"):
            top_start = i + 1  # a preprocessor line ends a statement
    return found


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """'path:line name (N lines)' for every function under `root` longer
    than `limit` lines."""
    long = []
    for src in sorted(root.rglob("*.[ch]")):
        for name, first, last in functions(src.read_text()):
            if last - first + 1 > limit:
                long.append(f"{src.relative_to(root).as_posix()}:{first} {name} "
                            f"({last - first + 1} lines)")
    return long


def test_no_c_function_is_longer_than_the_limit() -> None:
    long = long_functions(CSRC)
    assert not long, (f"C functions over {MAX_LINES} lines (split each into named steps): "
                      + "; ".join(long))


def test_the_scanner_sees_every_function_and_measures_it(tmp_path: Path) -> None:
    body = "\n".join(f"    x += {i}; /* }} */" for i in range(MAX_LINES - 4))
    (tmp_path / "long.c").write_text(
        "#include <stdio.h>\n"
        "struct s { int a; };\n"
        "static const char *brace = \"{\";\n"
        "static int table[] = {1, 2, 3};\n"
        "__attribute__((noinline))\n"
        "static int short_one(int x) { return x + '}'; }\n"
        "int just_long_enough(int x)\n{\n" + body + "\n    return x;\n}\n"
        "static int one_too_long(int x)\n"
        "{\n" + body + "\n    x++;\n    return x;\n}\n")
    names = [(name, last - first + 1) for name, first, last
             in functions((tmp_path / "long.c").read_text())]
    assert names == [("short_one", 1), ("just_long_enough", MAX_LINES),
                     ("one_too_long", MAX_LINES + 1)]
    assert long_functions(tmp_path) == [
        f"long.c:{MAX_LINES + 7} one_too_long ({MAX_LINES + 1} lines)"]
