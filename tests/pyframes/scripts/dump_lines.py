"""Run by tests/pyframes/test_line_tables.py under each CPython: every code
object of a few sources, with what the interpreter itself says is the line
of each instruction offset (PyCode_Addr2Line, through ctypes: the function
PyFrame_GetLineNumber uses).  Prints JSON."""

from __future__ import annotations

import ctypes
import json
import sys
import types

TRICKY = '''
import os

@staticmethod
def decorated(a,
              b=(1,
                 2)):
    """doc"""
    x = [i * 2
         for i in range(a)
         if i]
    try:
        y = {k: v for k, v in zip(x, x)}
    except (ValueError,
            TypeError) as exc:
        raise RuntimeError(
            "no") from exc
    finally:
        pass
    while a:
        a -= 1
        if a == 3:
            break
    else:
        a = None
    return (lambda q:
            q + 1)(len(y))


class K:
    def gen(self):
        yield from range(3)
        yield (1 +
               2)

    async def co(self):
        async with self as s:
            await s
''' + "\n" * 300 + '''
def far_away():
    return 1
''' + "".join(f"\nv{i} = {i}" for i in range(200))


def codes(code: types.CodeType):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from codes(c)


def main() -> None:
    addr2line = ctypes.pythonapi.PyCode_Addr2Line
    addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
    addr2line.restype = ctypes.c_int
    minor = sys.version_info[1]
    sources = [("<tricky>", TRICKY)]
    for mod in ("json.decoder", "ctypes", "threading"):
        m = __import__(mod, fromlist=["_"])
        with open(m.__file__, encoding="utf-8") as f:
            sources.append((m.__file__, f.read()))
    out = []
    for name, src in sources:
        for code in codes(compile(src, name, "exec")):
            table = code.co_lnotab if minor == 9 else code.co_linetable
            units = len(code.co_code) // 2
            # A frame keeps lasti in bytes in 3.9, in code units after.
            lastis = range(-1, len(code.co_code) if minor == 9 else units)
            lines = [addr2line(code, lasti if minor == 9 else lasti * 2) if lasti >= 0
                     else code.co_firstlineno for lasti in lastis]
            out.append({"name": code.co_name, "first": code.co_firstlineno, "table": table.hex(),
                        "lines": [max(line, 0) for line in lines]})
    json.dump({"minor": minor, "codes": out}, sys.stdout)


if __name__ == "__main__":
    main()
