"""reloc is a generic GOT engine: nothing under csrc/reloc/ names CUDA.

The CUDA layer's own lookup entry points (cuGetProcAddress/_v2) and its
driver-unload watch live in csrc/cuda/proc_address.c and reach reloc only
through mh_reloc_interpose / mh_reloc_watch_unload; the behaviour is covered
by test_cuda_procaddress.py and the hooks' driver-unload tests.  This test
keeps the knowledge from creeping back."""

from __future__ import annotations

import re
from pathlib import Path

RELOC = Path(__file__).resolve().parent.parent.parent / "csrc" / "reloc"
# A CUDA API name (cuMemAlloc, cuGetProcAddress), the driver's or runtime's
# library, or a CUDA-layer header.
CUDA_NAME = re.compile(r"\bcu[A-Z]\w*|\bcuda\w*|libcuda|libcudart|cuda_hooks\.h", re.IGNORECASE)


def test_reloc_sources_name_no_cuda() -> None:
    files = sorted(p for p in RELOC.iterdir() if p.suffix in (".c", ".h", ".S"))
    assert files, RELOC
    hits = [f"{p.name}:{n}: {line.strip()}"
            for p in files
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if CUDA_NAME.search(line)]
    assert not hits, "CUDA knowledge in the generic GOT engine:\n" + "\n".join(hits)
