"""Names from elsewhere, made safe to print on a terminal.

A traced program chooses its own file names, function names and command
line.  Printed as they are, an ESC or BEL in one reaches the user's terminal
as a control sequence (a retitled window, a cleared screen, a hidden line),
and a newline in one writes a line of its own - in ``memhook trace -f text``
a forged event line.  Every human-readable output (the text trace, the
summary, the warnings, ``memhook info``) passes such names through
:func:`printable`; machine formats keep them exact (JSON escapes them
itself, and the memviz pickle is binary).
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_UNSAFE = re.compile(
    "[\\\\\x00-\x1f\x7f-\x9f"          # backslash (the escape's own), C0, DEL, C1
    "\u061c\u200e\u200f\u2028\u2029"   # bidi marks, line and paragraph separators
    "\u202a-\u202e\u2066-\u2069"       # bidi embeddings, overrides and isolates
    "\udc80-\udc9f]")                  # C1 bytes of a name that was not UTF-8
_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    cp = ord(ch)
    if 0xDC80 <= cp <= 0xDCFF:
        cp -= 0xDC00  # the byte os.fsdecode's surrogateescape stood it for
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


def printable(text: str) -> str:
    """``text`` with every control character written as a backslash escape
    (``\\n``, ``\\x1b``, ``\\u202e``; a backslash as ``\\\\``), so that it
    prints as one line of visible characters.  Text without any comes back
    as it is (the same object).

    >>> printable("libfoo.so")
    'libfoo.so'
    >>> print(printable("evil\\x1b]0;owned\\x07\\nname"))
    evil\\x1b]0;owned\\x07\\nname
    """
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)
