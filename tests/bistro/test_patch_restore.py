"""GOTCHA: remove brings back every byte and every page protection, and
nothing is writable+executable at any time we can observe."""

from __future__ import annotations

from bistro_testing import HOOK_MARK, maps_of

NAMES = ["fx_libcuda_entry", "fx_endbr_libcuda", "fx_cudart_pushmov", "fx_rip_load",
         "fx_jcc_rel8", "fx_c10_rip_movzb"]


def perms_by_range():
    return {(lo, hi): (perm, path) for lo, hi, perm, path in maps_of()}


def no_wx():
    bad = [(hex(lo), perm, path) for lo, hi, perm, path in maps_of()
           if "w" in perm and "x" in perm]
    assert not bad, f"writable+executable mappings: {bad}"


def islands_read_exec(addresses):
    """The island pages holding these trampolines are read+exec, never
    writable.  (Found by address: other new mappings of this process - its
    allocators' arenas, thread stacks - come and go on their own.)"""
    maps = maps_of()
    for at in addresses:
        page = [m for m in maps if m[0] <= at < m[1]]
        assert page, f"trampoline {at:#x} is in no mapping"
        assert page[0][2] in ("r-xs", "r-xp"), f"island {page[0]} is not read+exec"


def test_bytes_and_protections_restored(bistro):
    for size in (5, 12):
        before_code = {n: bistro.code(n, 48) for n in NAMES}
        before_maps = perms_by_range()
        trampolines = []
        for n in NAMES:
            rc, why, original, _ = bistro.install(n, hook=NAMES.index(n), jump_size=size)
            assert rc == 0, why
            trampolines.append(original)
        no_wx()
        islands_read_exec(trampolines)
        for n in NAMES:
            assert bistro.code(n, 48) != before_code[n]
        for n in NAMES:
            assert bistro.remove(n) == 0
        assert {n: bistro.code(n, 48) for n in NAMES} == before_code
        after_maps = perms_by_range()
        # Every file mapping that existed before is there with the same
        # protection; the only new ones are island pages (r-x).  Anonymous
        # memory is left out: the process's allocators grow and trim it on
        # their own (a 13 MB anonymous range changed shape once in CI),
        # and bistro writes only code pages, which are file-backed here.
        for rng, (perm, path) in before_maps.items():
            if path.startswith("[") or not path:
                continue
            assert rng in after_maps, f"mapping {rng} changed shape"
            assert after_maps[rng][0] == perm, f"{path} {rng}: {perm} -> {after_maps[rng][0]}"
        islands_read_exec(trampolines)  # (kept for reuse after remove)
        no_wx()


def test_text_page_protection_is_read_exec(bistro):
    at = bistro.addr("fx_libcuda_entry")
    page = [m for m in maps_of() if m[0] <= at < m[1]][0]
    assert page[2] == "r-xp"
    rc, why, _, _ = bistro.install("fx_libcuda_entry", hook=0)
    assert rc == 0, why
    page2 = [m for m in maps_of() if m[0] <= at < m[1]][0]
    assert page2[2] == "r-xp", "patched text must not stay writable"
    assert bistro.call("fx_libcuda_entry", 0, 0) == 7 + HOOK_MARK
