"""memhook_query from C programs with no Python in them: the core in
LD_PRELOAD, the simulator as the driver (memhook.sim.environ()).

- tests/fixtures/native_query_threads.c: 4 threads allocate, hand over,
  free and reuse device, pinned and managed memory and check every answer
  (types, extents, alloc_ids never shared, never the freed allocation after
  a free, HOST for malloc'd memory), in every hook mode;
- tests/fixtures/native_query_vouching.c: answers across uninstall and
  reinstall, and without hooks, are never stale;
- examples/c/regcache.c: a registration cache keyed by alloc_id: one
  registration per buffer whatever the offsets, and a new one after a free
  and a reallocation at the same address."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from memhook_testing import HAVE_CC, ROOT

import memhook
import memhook.sim

pytestmark = pytest.mark.skipif(not HAVE_CC, reason="needs a C compiler")

CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
          f"-I{ROOT / 'csrc' / 'include'}"]


def _build(src: Path, out: Path) -> Path:
    lib = Path(memhook.library_path())
    cmd = ["cc", *CFLAGS, str(src), "-o", str(out), f"-L{lib.parent}", "-lmemhook", "-ldl",
           "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return out


def _run(exe: Path, *args: str, mode: str = "bistro,reloc") -> str:
    env = memhook.sim.environ()
    env["LD_PRELOAD"] = memhook.library_path()
    env["MEMHOOK_CUDA_MODE"] = mode
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, f"{exe.name} {mode}: rc={proc.returncode}\n{proc.stdout}" \
                                 f"{proc.stderr}"
    return proc.stdout


@pytest.mark.parametrize(("mode", "ballast"), [("bistro,reloc", 0), ("bistro,reloc", 3000),
                                               ("bistro", 0), ("reloc", 0), ("none", 0)])
def test_four_threads_get_every_answer_right(tmp_path: Path, mode: str, ballast: int) -> None:
    """(ballast: 3,000 live allocations make the map large enough that the
    drains leave short batches for the queries to publish.)"""
    exe = _build(ROOT / "tests" / "fixtures" / "native_query_threads.c", tmp_path / "nqt")
    out = _run(exe, "400", str(ballast), mode=mode)
    counts = dict(re.findall(r"(\w+)=(\d+)", out))
    if mode == "none":
        assert int(counts["hooks"]) == 0 and int(counts["driver"]) > 0, out
    else:
        # The hooks vouched for answers (the cache was fed with no Python
        # and no drain of anyone's: the queries' own runs), and every
        # vouched allocation got an id of its own.
        assert int(counts["hooks"]) > 0 and int(counts["ids"]) > 0, out


def test_the_registration_cache_example(tmp_path: Path) -> None:
    exe = _build(ROOT / "examples" / "c" / "regcache.c", tmp_path / "regcache")
    out = _run(exe)
    got = dict(re.findall(r"(\w+)=(\d+)", out))
    assert got["ok"] == "1", out
    # 8 buffers and the reallocation: 9 registrations for 809 messages.
    assert (got["registrations"], got["misses"], got["hits"]) == ("9", "9", "800"), out
    assert got["uncached"] == "1", out


def test_answers_stay_true_across_uninstall_and_without_hooks(tmp_path: Path) -> None:
    """tests/fixtures/native_query_vouching.c: memory learned while installed
    and freed (or unregistered) while uninstalled is not answered from after
    the reinstall; a driver answer remembered without hooks is re-verified,
    so a free nobody saw does not leave it CUDA; the new period's memory is
    vouched for by the hooks again."""
    exe = _build(ROOT / "tests" / "fixtures" / "native_query_vouching.c", tmp_path / "nqv")
    out = _run(exe)
    assert out.rstrip().endswith("ALL OK"), out


def test_a_query_never_waits_for_a_drain_and_sees_its_own_events(tmp_path: Path) -> None:
    """tests/fixtures/native_query_nowait.c: another thread holds the
    queue's consumer lock for the whole check (a drain in progress, stopped
    there by memhook_testing_drain_hold), so a query that waited for it
    would never return.  Meanwhile the querying thread's own allocation is
    answered from the hooks (no driver call) with the alloc_id it keeps
    after the drain, its free is seen, host memory is HOST from the hooks,
    and another thread's pending allocation is answered right."""
    exe = _build(ROOT / "tests" / "fixtures" / "native_query_nowait.c", tmp_path / "nqw")
    out = _run(exe)
    assert out.rstrip().endswith("ALL OK"), out


def test_the_query_memo_is_never_torn_by_a_signal_handler(tmp_path: Path) -> None:
    """tests/fixtures/native_query_memo_signals.c: the main thread's queries
    replace the thread's memo at nearly every call while another thread
    keeps signalling it, and the handler queries (memhook_query_cached,
    async-signal-safe) on the same thread: neither side may answer with
    another region's extent, type or alloc_id (a memo half written by one,
    half by the other)."""
    exe = _build(ROOT / "tests" / "fixtures" / "native_query_memo_signals.c", tmp_path / "nqm")
    out = _run(exe, "1000000")
    assert out.rstrip().endswith("ALL OK"), out
    assert int(re.search(r"handled=(\d+)", out)[1]) > 0, out


def test_the_batches_answer_each_pointer_as_a_query_does(tmp_path: Path) -> None:
    """tests/fixtures/native_query_batch.c: 10,001 pointers over 2,000 live
    allocations with holes, host memory and the ends, random and sorted,
    through memhook_query_batch (a larger stride) and memhook_query_types,
    each against memhook_query; the byte at 2^64 - 1 stops a batch with
    -EOVERFLOW after answering what came before it."""
    exe = _build(ROOT / "tests" / "fixtures" / "native_query_batch.c", tmp_path / "nqb")
    out = _run(exe)
    assert out.rstrip().endswith("ALL OK"), out
