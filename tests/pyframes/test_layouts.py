"""The struct offsets --python reads (csrc/trace/pyframes_abi.c) are those
of every CPython 3.9-3.13 on this machine: a probe compiled against each
interpreter's own headers prints offsetof() of each field, and the table
must say the same.  pycode.c's fixed offsets (the object and string
headers) and the string state's bits are checked the same way."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from memhook_testing import CSRC, HAVE_CC
from pyframes_testing import HERE, interpreters

# What pycode.c and pyframes_abi.h read at fixed offsets, in every version.
FIXED = {"ob_type": 8, "str_length": 16, "str_hash": 24, "str_state": 32, "bytes_size": 16,
         "bytes_data": 32,
         "state_kind": 7 << 2, "state_compact": 1 << 5, "state_ascii": 1 << 6,
         "state_ready": 1 << 7, "codeunit_size": 2, "fr_instr_size": 4}
NO_OWNER = 0xFF


def table() -> dict[int, dict[str, int]]:
    """pyframes_abi.c's layouts, by minor version."""
    text = (CSRC / "trace" / "pyframes_abi.c").read_text()
    body = text[text.index("k_layouts[] = {"):]
    body = body[:body.index("\n};")]
    out = {}
    for block in re.findall(r"\{(\.minor = \d+,.*?)\}", body, re.S):
        fields = dict(re.findall(r"\.(\w+) = (\w+)", block))
        values = {k: (NO_OWNER if v == "MH_PY_NO_OWNER" else int(v, 0))
                  for k, v in fields.items() if k != "chain"}
        out[values["minor"]] = values
    return out


def _headers(python: str) -> Path | None:
    inc = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    return Path(inc) if (Path(inc) / "Python.h").exists() else None


def test_the_table_has_every_version() -> None:
    assert sorted(table()) == [9, 10, 11, 12, 13]


@pytest.mark.skipif(not HAVE_CC, reason="no C compiler")
@pytest.mark.parametrize("python", interpreters())
def test_offsets_match_the_headers(python: str, tmp_path: Path) -> None:
    inc = _headers(python)
    if inc is None:
        pytest.skip(f"{python} has no headers here (its -dev package)")
    probe = tmp_path / "probe"
    build = subprocess.run(["cc", f"-I{inc}", f"-I{inc / 'internal'}",
                            str(HERE / "fixtures" / "layout_probe.c"),
                            "-o", str(probe)], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    found = dict(line.split() for line in subprocess.run(
        [str(probe)], capture_output=True, text=True, check=True).stdout.splitlines())
    found = {k: int(v) for k, v in found.items()}
    ours = table()[found["minor"]]
    for name, value in found.items():
        if name in FIXED:
            assert value == FIXED[name], (name, value)
        elif name in ("minor",):
            continue
        else:
            assert ours.get(name) == value, (found["minor"], name, ours.get(name), value)
    # Fields the table sets that the version has no such thing for.
    for name in ("fr_owner", "co_code_adaptive", "co_firsttraceable", "cframe_current"):
        if name not in found:
            assert ours.get(name, 0) == 0, (name, ours)
    for name in ("owner_generator", "owner_cstack"):
        if name not in found:
            assert ours.get(name) == NO_OWNER, (name, ours)
    assert bool(ours.get("str_has_ready")) == ("state_ready" in found)
