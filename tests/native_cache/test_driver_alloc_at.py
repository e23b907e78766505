"""The drain's question for a FREE it cannot size from the hooks' events:
the cache's record of a driver answer starting exactly at the address
(mh_cache_driver_alloc_at, csrc/cache/region_map.c), on private caches fed
by hand (tests/native_cache/fixtures/cache_driver_alloc_at.c).  It names
such a region only at its base, of a known type, learned in the current
install period, and refuses one that an operation staged by a feed, or
queued by a commit and not published, touches: an ALLOC over part of it,
a FREE of unknown size inside it, a context reset of any device."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from memhook_testing import HAVE_CC, ROOT

import memhook

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler")

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cache_driver_alloc_at.c"


def test_refuses_a_region_touched_by_staged_or_queued_operations(tmp_path: Path) -> None:
    lib = Path(memhook.library_path()).parent
    exe = tmp_path / "cache_driver_alloc_at"
    cmd = ["cc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
           f"-I{ROOT / 'csrc' / 'include'}", str(FIXTURE), "-o", str(exe), f"-L{lib}",
           "-lmemhook", f"-Wl,-rpath,{lib}"]
    built = subprocess.run(cmd, capture_output=True, text=True)
    assert built.returncode == 0, f"{' '.join(cmd)}\n{built.stderr}"
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "FAIL" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.count("ok ") == 20, proc.stdout
