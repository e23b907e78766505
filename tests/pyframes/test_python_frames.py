"""``memhook trace --python``: every ALLOC names the Python frames that
made it - file, function, line, innermost first - whichever way the
allocation reached CUDA (ctypes with the GIL released or held,
cuda-python, a threading thread), in every hook mode and output; a thread
with no Python says so; a code object that died is never named after
another; fork and Pool(fork) children are named; --stacks over CPython
reports no frame outside code."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from pyframes_testing import SCRIPTS, interpreters, marker_line, trace, unsupported_interpreter

MODES = ["bistro", "reloc", "bistro,reloc"]
PROGRAM = SCRIPTS / "pyframes_program.py"
A_FILE = SCRIPTS / "alloc_ctypes.py"
B_FILE = SCRIPTS / "alloc_cudapy.py"

sys.path.insert(0, str(SCRIPTS))
from pyframes_cases import EXEC_FILE, SHAPES, SIZES  # noqa: E402


def _site(file: Path, function: str, marker: str) -> dict:
    return {"file": str(file), "line": marker_line(file, marker), "function": function}


A_SITE = _site(A_FILE, "alloc_ctypes", "ALLOC: alloc_ctypes")
B_SITE = _site(B_FILE, "alloc_cudapy", "ALLOC: alloc_cudapy")


def _caller(tag: str, function: str = "sites") -> dict:
    return _site(PROGRAM, function, f"CALL: {tag}")


def _one(traced, size: int) -> dict:
    found = traced.by_size(size)
    assert len(found) == 1, (hex(size), traced.allocs, traced.stderr)
    return found[0]


def _check_sites(traced, cudapy: bool) -> None:
    for tag in ("ctypes", "ctypes_gil"):
        e = _one(traced, SIZES[tag])
        assert e["python"][:2] == [A_SITE, _caller(tag)], (tag, e)
        assert e["python"][-1]["function"] == "<module>", e
        assert "python_note" not in e, e
    if cudapy:
        e = _one(traced, SIZES["cudapy"])
        assert e["python"][:2] == [B_SITE, _caller("cudapy")], e
    # A threading thread: its own frames (alloc_ctypes, then threading's run).
    e = _one(traced, SIZES["thread"])
    assert e["python"][0] == A_SITE, e
    run = e["python"][1]  # (qualified from 3.11 on)
    assert run["function"] in ("run", "Thread.run") and run["file"].endswith("threading.py"), e
    # A C thread: no Python, and the event says so.
    e = _one(traced, SIZES["c_thread"])
    assert e["python"] == [] and e["python_note"] == "no Python on this thread", e
    frees = [e for e in traced.events if e["kind"] == "free"]
    assert all("python" not in e for e in frees)


@pytest.mark.parametrize("mode", MODES)
def test_each_site_names_its_file_function_and_line(c_thread_lib, tmp_path, mode) -> None:
    traced = trace(tmp_path, "sites", str(c_thread_lib), options=("-m", mode))
    assert traced.ready["cudapy"], "cuda-python (cuda.bindings) is a test dependency"
    _check_sites(traced, cudapy=True)


def test_text_memviz_and_summary_name_the_sites(c_thread_lib, tmp_path) -> None:
    trace(tmp_path, "sites", str(c_thread_lib), fmt="text")
    out = (tmp_path / "trace-0.text").read_text()
    lines = [ln for ln in out.splitlines() if " alloc " in ln]
    # The caller is a binding layer (ctypes' libffi, cuda-python): the line
    # names the Python frame that called through it, and the binding.
    a_where = f"from {A_SITE['file']}:{A_SITE['line']} in alloc_ctypes  via ctypes (libffi.so"
    b_where = f"from {B_SITE['file']}:{B_SITE['line']} in alloc_cudapy  via cuda-python (cydriver"
    assert sum(a_where in ln for ln in lines) == 3, lines  # GIL released, held, thread
    assert sum(b_where in ln for ln in lines) == 1, lines
    assert sum(ln.endswith("(no Python: no Python on this thread)") for ln in lines) == 1, lines
    # The summary: by the program's call site (the caller's frame, then
    # alloc_ctypes), beside the by-library table, each under column headings.
    summary = out[out.index("== memhook trace summary"):]
    peak = summary[summary.index("peak live bytes by Python call site"):].splitlines()
    assert peak[1].split() == ["at", "the", "peak", "own", "peak", "program", "call", "site"]
    # (a long site is never clipped: its outer frame tells it apart)
    assert any(ln.split()[4] == f"{PROGRAM}:{_caller('ctypes')['line']}" for ln in peak[2:]), peak
    never = summary[summary.index("allocations never freed by Python call site"):].splitlines()
    assert never[1].split() == ["bytes", "allocs", "program", "call", "site"], never
    rows = {ln.split(None, 3)[3]: (int(ln.split()[2]), i) for i, ln in enumerate(never)
            if ln.startswith("   ") and ln.split()[2:3] and ln.split()[2].isdigit()}
    a_one = f"{A_SITE['file']}:{A_SITE['line']} (alloc_ctypes)"
    a_sites = {f"{PROGRAM}:{_caller(tag)['line']} (sites) > {a_one}": tag
               for tag in ("ctypes", "ctypes_gil")}
    a_sites[a_one] = "thread"  # (threading's frames are the library's: one own frame)
    for site, tag in a_sites.items():
        assert rows[site][0] == 1, (site, never)
        # Under each site, the way down to CUDA: through ctypes.
        way = never[rows[site][1] + 1].strip()
        assert way.startswith("via ctypes: libffi.so") and way.endswith("-> cuMemAlloc_v2"), way
    assert any(site.startswith("(no Python frames: no Python on this thread)")
               for site in rows), never

    memviz = trace(tmp_path, "sites", str(c_thread_lib), fmt="memviz")
    assert memviz.rc == 0
    snap = pickle.loads((tmp_path / "trace-1.memviz").read_bytes())
    by_size = {s["total_size"]: s["frames"] for s in snap["segments"]}
    want_a = {"filename": A_SITE["file"], "line": A_SITE["line"], "name": "alloc_ctypes"}
    assert by_size[SIZES["ctypes"]][0] == want_a, by_size[SIZES["ctypes"]]
    assert by_size[SIZES["ctypes"]][1] == {"filename": str(PROGRAM),
                                           "line": _caller("ctypes")["line"], "name": "sites"}
    assert by_size[SIZES["cudapy"]][0]["name"] == "alloc_cudapy"
    # After the Python frames: the CUDA function, then the caller (native).
    frames = by_size[SIZES["ctypes"]]
    cuda = next(i for i, f in enumerate(frames) if f["filename"] == "CUDA")
    assert all(f["line"] > 0 for f in frames[:cuda]) and frames[cuda + 1]["name"].startswith("libffi")
    assert by_size[SIZES["c_thread"]][0]["filename"] == "CUDA"  # no Python frames


@pytest.mark.parametrize("python", interpreters()[1:] or ["(none)"])
def test_other_cpython_versions(c_thread_lib, tmp_path, python) -> None:
    """Every other CPython 3.9-3.13 this machine has (pyenv's, the
    distribution's, MEMHOOK_TEST_PYTHONS): the same names from its frames."""
    if python == "(none)":
        pytest.skip("no other CPython 3.9-3.13 here (set MEMHOOK_TEST_PYTHONS)")
    traced = trace(tmp_path, "sites", str(c_thread_lib), python=python)
    _check_sites(traced, cudapy=traced.ready["cudapy"])


@pytest.mark.skipif(unsupported_interpreter() is None, reason="no CPython 3.7/3.8 here")
def test_an_interpreter_it_cannot_read_gets_a_note(c_thread_lib, tmp_path) -> None:
    python = unsupported_interpreter()
    assert python is not None
    traced = trace(tmp_path, "sites", str(c_thread_lib), python=python)
    minor = int(python.split("/versions/3.")[1].split(".")[0])
    assert len(traced.allocs) == 4, traced.allocs  # (no cuda-python there)
    for e in traced.allocs:
        assert e["python"] == [], e
        assert e["python_note"] == (f"Python 3.{minor}: an interpreter memhook cannot read "
                                    "(it reads CPython 3.9-3.13)"), e


def test_a_deleted_exec_function_is_never_named_after_another(tmp_path) -> None:
    n = 30
    traced = trace(tmp_path, "exec", str(n))
    ids = traced.ready["code_ids"]
    # The test means something only where a dead code object's address was
    # given to the next one (the cache's key): it was, here.
    assert len(set(ids)) < n, "no code object address was reused"
    for k in range(n):
        name, src = SHAPES[k % len(SHAPES)]
        line = src.count("\n")  # each shape allocates on its last line
        e = _one(traced, 0x200000 + k * 4096)
        assert e["python"][0] == A_SITE, e
        assert e["python"][1] == {"file": EXEC_FILE, "line": line, "function": name}, (k, e)
        assert e["python"][2]["function"] == "exec_case"


def test_threads_defining_and_dropping_functions_at_once_are_named_right(tmp_path) -> None:
    """Four threads at once, each exec-defining, calling (allocating: the
    GIL released, so the hooks run in parallel) and dropping functions:
    the code cache and records, written by several threads, name each
    ALLOC after its own function and line."""
    threads, n = 4, 60
    traced = trace(tmp_path, "churn", str(threads), str(n))
    assert len(traced.allocs) == threads * n
    for t in range(threads):
        for k in range(n):
            e = _one(traced, 0x1000000 + (t * 1000 + k) * 4096)
            assert e["python"][1] == {"file": EXEC_FILE, "line": 2 + k % 3,
                                      "function": f"churn_{t}_{k}"}, (t, k, e["python"])
            assert e["python"][2]["function"] == "_churn"


def test_fork_and_pool_children_name_their_callers(tmp_path) -> None:
    traced = trace(tmp_path, "fork")
    kids = {traced.ready["fork"], *traced.ready["pool"]}
    allocs = [e for e in traced.allocs if e["pid"] in kids]
    assert len(allocs) == 5, traced.allocs  # the fork child's one, four tasks
    for e in allocs:
        assert e["caller"]["object"].endswith(".so") or ".so." in e["caller"]["object"], e
        assert "libffi" in e["caller"]["object"], e
    frees_and_allocs = [e for e in traced.events if e["pid"] in kids]
    assert all(e["caller"] and e["caller"]["object"] for e in frees_and_allocs)
    child = [e for e in allocs if e["pid"] == traced.ready["fork"]]
    assert child[0]["python"][:2] == [A_SITE, _caller("fork", "fork_case")], child
    for e in allocs:
        if e["pid"] != traced.ready["fork"]:
            assert e["python"][:2] == [A_SITE, _caller("pool", "_pool_task")], e


def test_stacks_over_cpython_have_no_frame_outside_code(c_thread_lib, tmp_path) -> None:
    traced = trace(tmp_path, "sites", str(c_thread_lib), options=("--stacks=64",))
    for e in traced.allocs:
        assert e["stack"], e
        outside = [f for f in e["stack"] if not f["object"]]
        assert not outside, (hex(e["size"]), e["stack"])
    _check_sites(traced, cudapy=True)


def test_bad_depths_are_refused_with_what_is_valid(tmp_path) -> None:
    for bad in ("0", "129", "x"):
        proc = subprocess.run([sys.executable, "-m", "memhook", "trace", "--sim",
                               f"--python={bad}", "--", "true"], capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 2
        assert f"--python: '{bad}' is not a depth; valid: 1-128 (--python alone: 32)" in \
            proc.stderr
