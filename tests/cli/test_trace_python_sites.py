"""``memhook trace --python`` answers "who leaked what" for a Python
program: tests/cli/scripts/helper_leak.py makes every allocation through
one helper, ``alloc()`` (ctypes), called from a weight load (128 MiB,
freed or kept) and from a worker thread (3 x 1 MiB, leaked), plus one
cuda-python allocation it leaks.  The summary separates the weight load
from the worker by the program's call site, shows the way down to CUDA
under each, and every line names the Python frame that called through the
binding layer (ctypes, cuda-python) rather than the binding."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_testing import HERE, MiB, memhook

PROGRAM = HERE / "scripts" / "helper_leak.py"
LINES = PROGRAM.read_text().splitlines()


def _line(text: str) -> int:
    return 1 + LINES.index(text)


ALLOC = _line("    assert libcuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)) == 0")
WEIGHTS_SITE = f"{PROGRAM}:{_line('    return alloc(128 * MiB)')} (load_weights) > :{ALLOC} (alloc)"
WORKER_SITE = f"{PROGRAM}:{_line('        alloc(1 * MiB)')} (worker) > :{ALLOC} (alloc)"
SCRATCH = _line("    err, _ = cu.cuMemAlloc(2 * MiB)")
SCRATCH_SITE = f"{PROGRAM}:{_line('    scratch()')} (main) > :{SCRATCH} (scratch)"
LEAKS_TITLE = "allocations never freed by Python call site (--python), and the way down to CUDA:"


def _trace(tmp_path: Path, how: str, *options: str) -> str:
    out = tmp_path / f"{how}.txt"
    proc = memhook("trace", "--sim", "--python", *options, "-o", str(out), "--",
                   sys.executable, str(PROGRAM), how)
    assert proc.returncode == 0, proc.stderr
    return out.read_text()


def _leaks(text: str) -> dict[str, tuple[int, int, list[str]]]:
    """site -> (bytes, allocations, the lines under it) of the leak view."""
    lines = text.splitlines()
    start = lines.index(LEAKS_TITLE) + 1
    assert lines[start].split() == ["bytes", "allocs", "program", "call", "site"], lines[start]
    rows: dict[str, tuple[int, int, list[str]]] = {}
    site = ""
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        if line[2:14].strip():  # a site's row: bytes, count, the site
            size, unit, count, site = line.split(None, 3)
            scale = {"B": 1, "KiB": 1 << 10, "MiB": MiB}[unit]
            rows[site] = (int(float(size) * scale), int(count), [])
        else:  # the way down, under it
            rows[site][2].append(line.strip())
    return rows


@pytest.mark.parametrize("how", ["free", "keep"])
def test_the_leak_view_separates_one_helper_by_call_site(tmp_path: Path, how: str) -> None:
    text = _trace(tmp_path, how)
    leaks = _leaks(text)
    want = {WORKER_SITE: (3 * MiB, 3), SCRATCH_SITE: (2 * MiB, 1)}
    if how == "keep":
        want[WEIGHTS_SITE] = (128 * MiB, 1)
    assert {site: row[:2] for site, row in leaks.items()} == want, text
    # Under each site, the way down: through the binding, to the driver.
    ((worker_way,),) = [leaks[WORKER_SITE][2]]
    assert worker_way.startswith("via ctypes: libffi.so") and \
        worker_way.endswith(" -> cuMemAlloc_v2"), worker_way
    ((scratch_way,),) = [leaks[SCRATCH_SITE][2]]
    assert scratch_way.startswith("via cuda-python: cydriver."), scratch_way
    # The biggest leak first; the leak view is the summary's last table.
    assert list(leaks)[0] == (WEIGHTS_SITE if how == "keep" else WORKER_SITE)
    assert text.splitlines()[-1].startswith("collector: ")


def test_lines_name_the_python_caller_not_the_binding(tmp_path: Path) -> None:
    text = _trace(tmp_path, "keep")
    allocs = [ln for ln in text.splitlines() if "] alloc " in ln]
    assert len(allocs) == 5, text
    helper = f"from {PROGRAM}:{ALLOC} in alloc  via ctypes (libffi.so"
    assert sum(helper in ln for ln in allocs) == 4, allocs
    assert sum(f"from {PROGRAM}:{SCRATCH} in scratch  via cuda-python (cydriver." in ln
               for ln in allocs) == 1, allocs
    # The by-library tables say which binding a library is.
    assert "\n  ctypes: libffi.so" in text and "\n  cuda-python: cydriver." in text


def test_summary_tables_have_column_headings(tmp_path: Path) -> None:
    text = _trace(tmp_path, "keep", "--stacks")
    lines = text[text.index("== memhook trace summary"):].splitlines()
    for title in ("calls and bytes per function:", "peak live bytes per device:",
                  "peak live bytes by calling library (at the peak of all; each one's own):",
                  "peak live bytes by Python call site (--python; at the peak of all; each "
                  "one's own):",
                  "top call sites (--stacks; bytes allocated):", "allocations never freed:",
                  "allocations never freed by calling library:", LEAKS_TITLE):
        heading = lines[lines.index(title) + 1]
        assert heading.startswith("  ") and not any(c.isdigit() for c in heading), \
            (title, heading)
    # --stacks: the call sites by the program's site, the native frames under it.
    top = lines[lines.index("top call sites (--stacks; bytes allocated):") + 2:]
    assert top[0].split()[:3] == ["128", "MiB", "1x"] and top[0].endswith(WEIGHTS_SITE), top
    assert top[1].strip().startswith("via ctypes: libffi.so"), top


def test_jsonl_names_the_binding_and_the_site(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    proc = memhook("trace", "--sim", "--python", "-f", "jsonl", "-o", str(out), "--",
                   sys.executable, str(PROGRAM), "keep")
    assert proc.returncode == 0, proc.stderr
    allocs = [r for r in map(json.loads, out.read_text().splitlines()) if r["kind"] == "alloc"]
    by_size = {r["size"]: r for r in allocs}
    weights = by_size[128 * MiB]
    assert weights["binding"] == "ctypes" and weights["site"] == WEIGHTS_SITE, weights
    assert weights["caller"]["object"].rsplit("/", 1)[-1].startswith("libffi.so"), weights
    assert weights["python"][0] == {"file": str(PROGRAM), "line": ALLOC, "function": "alloc"}
    assert by_size[2 * MiB]["binding"] == "cuda-python", by_size[2 * MiB]
    assert sum(r["site"] == WORKER_SITE for r in allocs) == 3


def test_without_python_frames_the_summary_says_how_to_get_them(tmp_path: Path) -> None:
    out = tmp_path / "t.txt"
    proc = memhook("trace", "--sim", "-o", str(out), "--", sys.executable, str(PROGRAM), "free")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "\n  (ctypes and cuda-python only carried the calls: --python names the Python code " \
           "that made them)\n" in text, text
    # Each line names the binding's library, as nothing else is known.
    assert sum(ln.rsplit(" from ", 1)[-1].startswith("libffi.so") for ln in text.splitlines()
               if "] alloc " in ln or "] free " in ln) == 5, text
