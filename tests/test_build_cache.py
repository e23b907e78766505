"""The session's cache of C objects (memhook_testing.ObjectCache) hands back
an object only for the same source, flags and visible headers: a copy of a
tree shares the objects of what it left alone, and a changed source or a
changed header - under an -I folder or beside the source - is compiled again.
(causal_merge's knockouts rely on it: a stale object would hide a knockout.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from memhook_testing import HAVE_CC, ObjectCache

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="no C compiler")


def _tree(root: Path) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "answer.h").write_text("#define ANSWER 42\n")
    (root / "local.h").write_text("#define OFFSET 0\n")
    (root / "main.c").write_text('#include <stdio.h>\n#include "answer.h"\n#include "local.h"\n'
                                 'int other(void);\n'
                                 'int main(void) { printf("%d\\n", ANSWER + OFFSET + other()); }\n')
    (root / "other.c").write_text("int other(void) { return 0; }\n")
    return root


def _run(cache: ObjectCache, tree: Path, out: Path) -> tuple[str, list[Path]]:
    objs = cache.compile([tree / "main.c", tree / "other.c"], ["-O1", f"-I{tree / 'include'}"],
                         tree=tree)
    subprocess.run(["cc", *map(str, objs), "-o", str(out)], check=True)
    return subprocess.run([str(out)], capture_output=True, text=True, check=True).stdout, objs


def test_a_copy_shares_objects_and_a_change_is_compiled_again(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path / "objects")
    first = _tree(tmp_path / "a")
    assert _run(cache, first, tmp_path / "a.out")[0] == "42\n"
    copy = tmp_path / "b"
    shutil.copytree(first, copy)
    out, objs = _run(cache, copy, tmp_path / "b.out")
    assert out == "42\n" and len(list(cache.folder.glob("*.o"))) == 2  # nothing compiled
    (copy / "include" / "answer.h").write_text("#define ANSWER 7\n")
    assert _run(cache, copy, tmp_path / "c.out")[0] == "7\n"
    (copy / "local.h").write_text("#define OFFSET 100\n")
    assert _run(cache, copy, tmp_path / "d.out")[0] == "107\n"
    (copy / "other.c").write_text("int other(void) { return 1000; }\n")
    assert _run(cache, copy, tmp_path / "e.out")[0] == "1107\n"
    assert _run(cache, first, tmp_path / "f.out")[0] == "42\n"
