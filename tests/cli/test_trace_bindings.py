"""Binding layers (memhook/tracing/bindings.py): which native callers are
only the road from Python into CUDA, and what the outputs name instead -
held with the libraries of frameworks not installed here (PyTorch, CuPy,
JAX) by their paths, and through the ledger and the text writer with a
PyTorch-shaped event: the caching allocator called from Python."""

from __future__ import annotations

import io

import pytest

from memhook._objects.symbolize import Caller
from memhook.tracing.bindings import BINDINGS, binding_of
from memhook.tracing.ledger import Ledger, Process, format_summary
from memhook.tracing.pyframes import PyFrame, PyStack
from memhook.tracing.writers.text import TextWriter

SP = "/venv/lib/python3.12/site-packages"


@pytest.mark.parametrize(("path", "name"), [
    ("/usr/lib/x86_64-linux-gnu/libffi.so.8", "ctypes"),
    ("/usr/lib64/libffi.so.6.0.4", "ctypes"),
    ("/usr/lib/python3.12/lib-dynload/_ctypes.cpython-312-x86_64-linux-gnu.so", "ctypes"),
    (f"{SP}/_cffi_backend.cpython-312-x86_64-linux-gnu.so", "cffi"),
    (f"{SP}/cuda/bindings/cydriver.cpython-312-x86_64-linux-gnu.so", "cuda-python"),
    (f"{SP}/cuda/bindings/_lib/cyruntime/cyruntime.cpython-312-x86_64-linux-gnu.so",
     "cuda-python"),
    (f"{SP}/cuda/ccuda.cpython-310-x86_64-linux-gnu.so", "cuda-python"),
    (f"{SP}/cupy_backends/cuda/api/driver.cpython-312-x86_64-linux-gnu.so", "CuPy"),
    (f"{SP}/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so", "CuPy"),
    (f"{SP}/torch/lib/libc10_cuda.so", "PyTorch"),
    (f"{SP}/torch/lib/libtorch_cuda.so", "PyTorch"),
    (f"{SP}/pycuda/_driver.cpython-312-x86_64-linux-gnu.so", "pycuda"),
    (f"{SP}/jaxlib/xla_extension.so", "JAX"),
])
def test_binding_libraries_are_known_by_path(path: str, name: str) -> None:
    found = binding_of(path)
    assert found is not None and found.name == name, (path, found)


@pytest.mark.parametrize("path", [
    "/usr/local/cuda/lib64/libcublasLt.so.12", "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
    "/usr/local/cuda/lib64/libcudart.so.13", f"{SP}/torch/lib/libtorch_cpu.so",
    "/home/me/build/libmine.so", "/opt/app/bin/train", "", f"{SP}/cupy/_core/core.py",
])
def test_other_libraries_are_not_bindings(path: str) -> None:
    assert binding_of(path) is None


def test_every_binding_says_what_it_is() -> None:
    assert all(b.name and b.why and b.path for b in BINDINGS)


def test_a_framework_allocator_called_from_python_names_the_program() -> None:
    """libc10_cuda's caching allocator, reached from torch's Python code
    called by the program: the line names the Python caller and the
    program's frame, the leak view the program's site and, under it, the
    library frame and the binding's native frame."""
    ledger = Ledger(["cuMemAlloc_v2", "cuMemFree_v2"], [False, False])
    proc = Process(conn_id=0)
    ledger.process_started(proc)
    caller = Caller(f"{SP}/torch/lib/libc10_cuda.so", "c10_cuda_malloc", 0x40, 0x7F0000001040)
    torch_frame = PyFrame(f"{SP}/torch/cuda/memory.py", 86, "caching_allocator_alloc")
    python = PyStack((torch_frame, PyFrame("/srv/train.py", 10, "step"),
                      PyFrame("/srv/train.py", 20, "main")))
    row = (0, 0x7E0000000000, 1 << 20, 5, 1, 0, 1, 0, 7, 7, 0, 0, caller, None, python)
    out = io.StringIO()
    TextWriter(out, ledger, 0).events(proc, [row], ledger.add(proc, [row]))
    line = out.getvalue()
    assert line.rstrip().endswith(f"from {SP}/torch/cuda/memory.py:86 in caching_allocator_alloc"
                                  f"  via PyTorch (libc10_cuda.so)  at /srv/train.py:10 in step"), \
        line
    ledger.finish()
    summary = ledger.summary()
    (leak,) = summary["never_freed_by_python_site"]
    assert leak["site"] == "/srv/train.py:20 (main) > :10 (step)", leak
    assert leak["way_down"] == [f"{SP}/torch/cuda/memory.py:86 in caching_allocator_alloc",
                                "via PyTorch: libc10_cuda.so!c10_cuda_malloc+0x40 -> "
                                "cuMemAlloc_v2"], leak
    (lib,) = summary["never_freed_by_library"]
    assert lib["binding"] == "PyTorch"
    text = format_summary(summary, "bistro", 1.0, 0)
    assert "\n  PyTorch: libc10_cuda.so " in text, text


def test_a_native_program_keeps_its_native_caller() -> None:
    """The same allocator with no Python frames (a C++ program): its
    native caller is shown, as for any library."""
    ledger = Ledger(["cuMemAlloc_v2"], [False])
    proc = Process(conn_id=0)
    ledger.process_started(proc)
    caller = Caller(f"{SP}/torch/lib/libc10_cuda.so", "c10_cuda_malloc", 0x40, 0x7F0000001040)
    row = (0, 0x7E0000000000, 1 << 20, 5, 1, 0, 1, 0, 7, 7, 0, 0, caller, None, None)
    out = io.StringIO()
    TextWriter(out, ledger, 0).events(proc, [row], ledger.add(proc, [row]))
    assert out.getvalue().rstrip().endswith("from libc10_cuda.so"), out.getvalue()


def test_the_docs_show_the_table_as_it_is() -> None:
    """docs/python-programs.md shows BINDINGS row for row."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "python-programs.md").read_text()
    rows = [ln for ln in doc.splitlines() if ln.startswith("| ") and "`" in ln]
    want = [f"| {b.name} | `{b.path.replace('|', chr(92) + '|')}` | {b.why} |" for b in BINDINGS]
    assert rows == want
