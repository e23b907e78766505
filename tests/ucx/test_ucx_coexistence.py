"""memhook and UCX's UCM hooks in one process, on the simulator, with the
libucx-cu13 wheel's libucm (fixtures/ucx_pair.c; docs/design/ucx-coexistence.md).

Every case is a fresh process: both orders (memhook installed first, UCX's
memtype handler first) x memhook's modes (bistro, the far form, reloc,
bistro,reloc) x UCX_MEM_CUDA_HOOK_MODE (bistro, reloc, bistro,reloc).  Each
makes 50 cuMemAlloc_v2/cuMemFree_v2 pairs through its PLT, uninstalls
memhook, and makes 20 more; a handler of its own and UCX's memtype cache
(UCX_MEMTYPE_CACHE=y) are asked about every pointer.  Then UCX's side is
checked through a handler registered late, a second uninstall, an install
again, an uninstall after it, install/uninstall cycles under two calling
threads, and a fork child's install/uninstall (ucx_pair.c, after_uninstall).  The cases run in parallel, a few at a time.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ucx_testing import NO_UCX, find_ucx_lib

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ucx_pair.c"
N, M = 50, 20
ORDERS = ("memhook-first", "ucx-first")
MEMHOOK_MODES = ("bistro", "bistro-far", "reloc", "bistro,reloc")
UCX_MODES = ("bistro", "reloc", "bistro,reloc")
CASES = list(itertools.product(ORDERS, MEMHOOK_MODES, UCX_MODES))
# Four threads making pairs at once: the feed from every thread (memhook
# first), and UCX's own hooks beside memhook's (UCX first).
THREADS, TN = 4, 200
# memhook fed UCX, and at memhook's uninstall UCX's own hooks are refused
# (forced here, test_ucx_refused_at_hand_back_is_fed_by_kept_hooks): the
# outcomes' key holds this in place of a thread count.
KEPT_RUN = 0
KEPT = [("memhook-first", m, u) for m in MEMHOOK_MODES for u in ("bistro", "bistro,reloc")] + \
    [("memhook-before-load", m, "bistro") for m in ("reloc", "bistro,reloc")]
THREADED = [("memhook-first", "bistro", "bistro"), ("memhook-first", "reloc", "reloc"),
            ("memhook-first", "bistro,reloc", "bistro,reloc"), ("ucx-first", "bistro", "bistro"),
            ("ucx-first", "reloc", "reloc")]


@pytest.fixture(scope="session")
def ucx_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lib = find_ucx_lib(tmp_path_factory.mktemp("ucx"))
    if lib is None:
        pytest.skip(NO_UCX)
    return lib


@pytest.fixture(scope="session")
def ucx_pair(native, c_test_dir: Path) -> Path:
    core = native.core.parent
    return native.compile(FIXTURE, c_test_dir / "ucx_pair", extra=[
        f"-L{native.sim_dir}", "-l:libcuda.so.1", f"-L{core}", "-l:libmemhook.so",
        f"-Wl,-rpath,{native.sim_dir}:{core}", "-ldl"])


def _run(native, exe: Path, lib: Path, case: tuple[str, str, str],
         threads: int = 1) -> dict[str, int | str] | str:
    order, mode, ucx_mode = case
    # UCX's own bistro forced to its 12-byte jump, which the simulator's
    # prologues (and often the driver's) cannot give room for: UCX's hooks
    # are refused, as when its CUDA module lies past a rel32 jump's reach of
    # the driver (seen on a loaded box), but every time.
    ucx_far = "y" if threads == KEPT_RUN else "n"
    env = native.env(UCX_MEM_CUDA_HOOK_MODE=ucx_mode, UCX_MODULE_DIR=str(lib / "ucx"),
                     UCX_MEMTYPE_CACHE="y", UCX_WARN_UNUSED_ENV_VARS="n",
                     UCX_MEM_BISTRO_FORCE_FAR_JUMP=ucx_far)
    threads = max(threads, 1)
    env.pop("MEMHOOK_BISTRO_FAR_JUMP", None)
    if mode == "bistro-far":
        mode = "bistro"
        env["MEMHOOK_BISTRO_FAR_JUMP"] = "1"
    n = N if threads == 1 else TN
    proc = subprocess.run([str(exe), order, mode, str(lib), str(n), str(M), str(threads)],
                          env=env, capture_output=True, text=True, timeout=120)
    found = re.search(r"^RESULT (.*)$", proc.stdout, re.M)
    row = re.search(r"^ROW cuMemAlloc_v2 mechanisms=(\d+) jump=(\d+) reason=(.*)$", proc.stdout,
                    re.M)
    if proc.returncode != 0 or not found or not row:
        return f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    got: dict[str, int | str] = {k: int(v) for k, v in
                                 (kv.split("=") for kv in found.group(1).split())}
    after = re.search(r"^AFTER (.*)$", proc.stdout, re.M)
    if after is None:
        return f"no AFTER line\n{proc.stdout}\n{proc.stderr}"
    got.update({k: int(v) for k, v in (kv.split("=") for kv in after.group(1).split())})
    switch = re.search(r"^SWITCH (.*)$", proc.stdout, re.M)
    if switch:
        got["switch"] = switch.group(1)
    second = re.search(r"^SECOND intact=(\d+) calls=(\d+)$", proc.stdout, re.M)
    if second:
        got.update(second_intact=int(second.group(1)), second_calls=int(second.group(2)))
    got.update(mechanisms=int(row.group(1)), jump=int(row.group(2)), reason=row.group(3),
               ucx_refused="UCX could not install its own CUDA hooks" in proc.stderr)
    fork = re.search(r"^FORK install=(-?\d+) reason=(.*)$", proc.stdout, re.M)
    got.update(fork_install=int(fork.group(1)) if fork else -1,
               fork_reason=fork.group(2) if fork else "(no FORK line)")
    again = re.search(r"^AGAIN cuMemAlloc_v2 mechanisms=\d+ reason=(.*)$", proc.stdout, re.M)
    got["again_cuMemAlloc_v2"] = again.group(1) if again else "(no row)"
    for name in ("cuMemAlloc_v2", "cuMemFree_v2"):
        kept = re.search(rf"^UNINSTALLED {name} mechanisms=(\d+) reason=(.*)$", proc.stdout, re.M)
        got[f"uninstalled_{name}"] = kept.group(2) if kept else "(no row)"
        back = re.search(rf"^REINSTALLED {name} mechanisms=(\d+) reason=(.*)$", proc.stdout, re.M)
        got[f"reinstalled_{name}"] = back.group(2) if back else "(no row)"
    return got


def _ucx_outlives_memhook(got: dict[str, int | str]) -> bool:
    """After memhook.uninstall() UCX sees every call - its own hooks, handed
    back or never taken away, or memhook's feed-only hooks where UCX could
    not install its own - and so does a handler UCX registers after the
    uninstall, after a second uninstall, after memhook installs again (each
    call once), after the uninstall that follows, and after five installs
    and uninstalls with two threads calling all along (every FREE UCX got
    then came while the memory was still allocated, and none twice: a
    call unseen while a hook moves is allowed, as the existing mappings
    dispatched after cover it).  A fork child of the
    uninstalled process installs and uninstalls cleanly."""
    return all(got[k] == M for k in ("after_alloc", "after_free", "late_alloc", "late_free",
                                     "again_alloc", "again_free", "re_alloc", "re_free",
                                     "last_alloc", "last_free", "churned_alloc",
                                     "churned_free")) \
        and got["late_status"] == 0 and got["churn_early"] == got["churn_free"] \
        and got["churn_free"] <= got["churn_made"] \
        and got["fork_install"] == 0


@pytest.fixture(scope="session")
def outcomes(native, ucx_pair: Path, ucx_lib: Path) -> dict[tuple, object]:
    jobs = [(c, 1) for c in CASES + LATE + SECOND + PARTIAL] + [(c, THREADS) for c in THREADED] + \
        [(c, KEPT_RUN) for c in KEPT]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 2)) as pool:
        done = pool.map(lambda j: ((*j[0], j[1]), _run(native, ucx_pair, ucx_lib, *j)), jobs)
        return dict(done)


def _memhook_sees(order: str, mode: str, ucx_mode: str) -> int:
    if order == "memhook-first":
        return N
    # UCX first with its reloc and bistro both in: UCX's GOT hook calls UCX's
    # trampoline, which enters the driver's code past its entry.  memhook's
    # reloc leaves UCX's slot alone (writing over it would take UCX out) and
    # no entry patch sees a call that skips the entry.
    if ucx_mode == "bistro,reloc":
        return 0
    # The far form over UCX's 5-byte jump is refused: its 12 bytes would
    # cover the bytes UCX's trampoline returns to (test below).
    if mode == "bistro-far" and ucx_mode == "bistro":
        return 0
    return N


@pytest.mark.parametrize("case", CASES, ids=["/".join(c) for c in CASES])
def test_both_see_every_allocation_and_ucx_outlives_memhook(outcomes, case) -> None:
    got = outcomes[(*case, 1)]
    assert isinstance(got, dict), got
    order, _mode, ucx_mode = case
    # UCX's handler registration (which installs its hooks, unless memhook
    # feeds it) succeeded, and UCX saw every call exactly once: no
    # duplicates from memhook's feed beside UCX's own hooks.
    assert got["ucx_status"] == 0, got
    assert (got["ucx_alloc"], got["ucx_free"]) == (N, N), got
    # Every FREE reached UCX while the memory was still allocated (the
    # handler asked the driver): UCX's cache never outlives an allocation.
    assert got["free_early"] == N, got
    # Fed by memhook, UCX gets memhook's memory types; from its own hooks,
    # "unknown" (UCX asks the driver later).
    assert got["ucx_types"] == (N if order == "memhook-first" else 0), got
    want = _memhook_sees(order, _mode, ucx_mode)
    assert (got["mh_alloc"], got["mh_free"]) == (want, want), got
    # UCX's own memtype cache, asked right after each call: every live
    # pointer is in it (not taken for host memory), no freed one is.
    assert (got["cache_hit"], got["cache_gone"]) == (N, N), got
    # After memhook.uninstall() UCX keeps seeing every call, and its cache
    # stays right.
    assert _ucx_outlives_memhook(got), got
    assert (got["after_hit"], got["after_gone"]) == (M, M), got


@pytest.mark.parametrize("ucx_mode", ["bistro", "bistro,reloc"])
def test_far_form_over_ucx_jump_is_refused_with_the_reason(outcomes, ucx_mode: str) -> None:
    # The far form would overwrite 12 bytes where UCX's jump holds 5: UCX's
    # trampoline returns to the first whole instruction after the bytes it
    # displaced, which would be inside memhook's jump (a crash, or worse).
    got = outcomes[("ucx-first", "bistro-far", ucx_mode, 1)]
    assert isinstance(got, dict), got
    assert got["jump"] == 0, got
    assert "opens with a 5-byte jump" in str(got["reason"]), got
    assert "would cover where its trampoline returns" in str(got["reason"]), got


LATE = [("memhook-before-load", m, u) for m in ("reloc", "bistro,reloc") for u in UCX_MODES]


@pytest.mark.parametrize("case", LATE, ids=["/".join(c) for c in LATE])
def test_ucx_loaded_after_memhook_is_fed_from_its_dlopen(outcomes, case) -> None:
    # UCX's libraries dlopened after memhook's install: reloc's dlopen wrapper
    # shows memhook libucm before UCX's handler can ask for its own hooks.
    got = outcomes[(*case, 1)]
    assert isinstance(got, dict), got
    assert got["ucx_status"] == 0, got
    assert (got["ucx_alloc"], got["ucx_free"], got["ucx_types"]) == (N, N, N), got
    assert (got["mh_alloc"], got["mh_free"], got["free_early"]) == (N, N, N), got
    assert (got["cache_hit"], got["cache_gone"]) == (N, N), got
    assert _ucx_outlives_memhook(got), got


@pytest.mark.parametrize("case", THREADED, ids=["/".join(c) for c in THREADED])
def test_every_thread_s_calls_reach_both(outcomes, case) -> None:
    got = outcomes[(*case, THREADS)]
    assert isinstance(got, dict), got
    total = THREADS * TN
    assert got["ucx_status"] == 0, got
    assert (got["ucx_alloc"], got["ucx_free"], got["free_early"]) == (total,) * 3, got
    assert (got["mh_alloc"], got["mh_free"]) == (total, total), got
    assert _ucx_outlives_memhook(got), got


@pytest.mark.parametrize("case", KEPT, ids=["/".join(c) for c in KEPT])
def test_ucx_refused_at_hand_back_is_fed_by_kept_hooks(outcomes, case) -> None:
    # memhook fed UCX; at uninstall UCX's own bistro is refused (its far
    # jump, forced).  UCX still sees every call, through memhook's
    # feed-only hooks, which status() names; a handler UCX registers after
    # the uninstall installs nothing and is fed too; a second uninstall
    # changes nothing; install() takes the kept hooks out and records
    # again, with UCX seeing each call once; the next uninstall keeps them
    # again.
    got = outcomes[(*case, KEPT_RUN)]
    assert isinstance(got, dict), got
    assert got["ucx_status"] == 0, got
    assert (got["ucx_alloc"], got["ucx_free"], got["ucx_types"]) == (N, N, N), got
    assert (got["mh_alloc"], got["mh_free"]) == (N, N), got
    assert got["ucx_refused"] is True, got
    assert _ucx_outlives_memhook(got), got
    assert (got["after_hit"], got["after_gone"]) == (M, M), got
    assert (got["re_mh_alloc"], got["re_mh_free"]) == (M, M), got
    assert "still patched for UCX" in str(got["fork_reason"]), got
    for name in ("cuMemAlloc_v2", "cuMemFree_v2"):
        reason = str(got[f"uninstalled_{name}"])
        assert "still patched for UCX" in reason, got
        assert "UCX could not install its own CUDA hooks" in reason, got
        assert "memhook records nothing" in reason, got


def _both_saw_every_call(got: object) -> dict:
    """The case's outcome, after checking that UCX's handler installed and
    that UCX and memhook each saw all N allocations and frees."""
    assert isinstance(got, dict), got
    assert got["ucx_status"] == 0, got
    assert (got["ucx_alloc"], got["ucx_free"], got["ucx_types"]) == (N, N, N), got
    assert (got["mh_alloc"], got["mh_free"]) == (N, N), got
    return got


SECOND = [("memhook-second", m, "bistro") for m in MEMHOOK_MODES]


@pytest.mark.parametrize("case", SECOND, ids=["/".join(c) for c in SECOND])
def test_entry_another_patcher_took_stays_fed_after_uninstall(outcomes, case) -> None:
    # memhook fed UCX; then another patcher wrote its jump over memhook's on
    # cuMemAlloc_v2.  At the uninstall memhook's patch there cannot leave
    # (restoring the bytes it saw would erase the other's jump), and UCX's
    # own bistro refuses that entry (so every entry: UCX gives up).  UCX
    # still sees every call: through memhook's wrapper in the other's chain
    # (bistro modes) or a feed-only hook over the other's jump (reloc), and
    # the other patcher's jump is never written over.  Then the other
    # patcher takes itself out, and the next uninstall moves UCX's feed to
    # a feed-only hook of the entry's own.
    _order, mode, _ucx_mode = case
    got = _both_saw_every_call(outcomes[(*case, 1)])
    # (bistro,reloc: a call through memhook's GOT slot goes on to memhook's
    # trampoline, past the other's jump, while memhook is installed - the
    # design note's limit)
    assert got["second_calls"] == (M if mode == "bistro,reloc" else N + M), got
    assert _ucx_outlives_memhook(got), got
    assert (got["re_mh_alloc"], got["re_mh_free"]) == (M, M), got
    reason = str(got["uninstalled_cuMemAlloc_v2"])
    assert "still patched for UCX" in reason, got
    if "bistro" in mode:
        assert got["second_intact"] == 1, got
        assert "another library patched over memhook's jump" in reason, got
        # The other patcher took itself out before the second uninstall,
        # which took memhook's jump out too: the entry got a feed-only hook
        # of its own (UCX's again_* counts above).
        assert "a feed-only hook stays here" in str(got["again_cuMemAlloc_v2"]), got


PARTIAL = [("ucx-partial", m, "bistro") for m in MEMHOOK_MODES]


@pytest.mark.parametrize("case", PARTIAL, ids=["/".join(c) for c in PARTIAL])
def test_partial_hand_back_sends_ucx_each_call_once(outcomes, case) -> None:
    # memhook fed UCX; another patcher's jump on cuMemAllocFromPoolAsync
    # (which UCX's bistro meets after cuMemAlloc_v2 and before cuMemFree_v2)
    # makes UCX, at memhook's uninstall, hook its entry points up to it and
    # refuse the rest.  UCX's hook on cuMemAlloc_v2 stays for good; memhook's
    # feed-only hook feeds UCX from cuMemFree_v2.  Every call reaches UCX
    # once in every phase after, memhook installed again or not (memhook's
    # wrappers fed UCX beside UCX's own hook: each cuMemAlloc_v2 twice).
    _order, mode, _ucx_mode = case
    got = _both_saw_every_call(outcomes[(*case, 1)])
    assert got["ucx_refused"] is True, got
    assert _ucx_outlives_memhook(got), got
    assert (got["after_hit"], got["after_gone"]) == (M, M), got
    # installed again, memhook records both (its far form is refused over
    # UCX's 5-byte jump: rule 1, as with UCX first)
    far = mode == "bistro-far"
    assert (got["re_mh_alloc"], got["re_mh_free"]) == (0 if far else M, M), got
    # status() names who feeds UCX at each entry, installed or not
    assert "UCX's own hook is at this entry" in str(got["uninstalled_cuMemAlloc_v2"]), got
    assert "still patched for UCX" in str(got["uninstalled_cuMemFree_v2"]), got
    again = str(got["reinstalled_cuMemAlloc_v2"])
    if far:
        assert "opens with a 5-byte jump" in again, got
    else:
        assert "UCX's own hook is at this entry" in again, got
        assert "none from memhook" in again, got
    assert "memhook's feed-only hook" in str(got["reinstalled_cuMemFree_v2"]), got
    # memhook switches to its other mechanism and back while installed: the
    # feed-only hooks follow, and each call still reaches UCX once
    each, rec = f"{M}/{M}", f"0/{M}" if far else f"{M}/{M}"
    assert got["switch"] == f"other={each} mh_other={each} back={each} mh_back={rec}", got
