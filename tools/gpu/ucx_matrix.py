#!/usr/bin/env python3
"""memhook beside UCX's libucm on the real driver: the coexistence matrix.

    python3 tools/gpu/ucx_matrix.py [--sim] [--n 50] [--m 20] [--json FILE]

Every case is a fresh process of tests/ucx/fixtures/ucx_pair.c, built here
against the system's libcuda.so.1 (--sim: memhook's simulator) and a
libmemhook.so built by csrc/build_native.py (no cffi needed): order (memhook
installed first, or UCX's MEM_TYPE handler first) x memhook's mode (bistro,
the far form, reloc, bistro,reloc) x UCX_MEM_CUDA_HOOK_MODE (bistro, reloc,
bistro,reloc).  Each makes N cuMemAlloc_v2/cuMemFree_v2 pairs with both in,
uninstalls memhook and makes M more.  Prints one table row per case:

  ucx st    UCX's handler registration status (0: ok; -22: its bistro refused)
  ucx a/f   allocations / frees UCX's handler saw (of N)
  mh a/f    memhook's ALLOC / FREE events of those pointers (of N)
  early     FREEs that reached UCX while the memory was still allocated
  typed     UCX ALLOCs with a known type (memhook's, when it feeds UCX)
  cache     UCX's memtype cache asked right after each call: live pointers
            found (not host) / freed pointers gone (of N)
  after     allocations / frees UCX saw after memhook.uninstall() (of M)
  later     the least of what UCX saw (allocations and frees, of M) in each
            later phase: a handler registered after the uninstall, a second
            uninstall, memhook installed again, the uninstall after it, and
            M pairs after five installs/uninstalls under two calling threads
  fork      a fork child's install() after the first uninstall (0: ok; -1:
            it did not exit within 10 s)
  row       memhook's row of cuMemAlloc_v2: mechanisms and bistro jump

Then the hand-back when UCX's own hooks are refused (memhook first, UCX's
bistro forced to its 12-byte jump: UCX_MEM_BISTRO_FORCE_FAR_JUMP=y, which a
driver prologue may not give room for): memhook's feed-only hooks must keep
UCX fed; each such row prints cuMemAlloc_v2's status() reason after the
uninstall; memhook-second rows put another patcher's jump over memhook's
on cuMemAlloc_v2 (tests/fixtures/second_patch.h), which makes UCX refuse
too; ucx-partial rows put it on cuMemAllocFromPoolAsync, so that UCX hooks
its entry points before that one (cuMemAlloc_v2 among them) and refuses the
rest.  Exits 1 when UCX saw other than M of M in any phase after an
uninstall (fewer: blind; more: a call sent twice), or a case failed to run
(docs/design/ucx-coexistence.md).

UCX comes from (first found): $MEMHOOK_UCX (an unzipped libucx-cu13 wheel,
its libucx/lib, or the .whl), an installed libucx package, .ucx/ or
.whl/libucx*.whl in the repository root.  Nothing else is needed.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "ucx" / "fixtures" / "ucx_pair.c"
ORDERS = ("memhook-first", "ucx-first")
MODES = ("bistro", "bistro-far", "reloc", "bistro,reloc")
UCX_MODES = ("bistro", "reloc", "bistro,reloc")


def ucx_lib(scratch: Path) -> Path | None:
    def lib_of(p: Path) -> Path | None:
        if p.is_file() and p.suffix == ".whl":
            out = scratch / "ucx"
            with zipfile.ZipFile(p) as z:
                z.extractall(out)
            p = out
        for c in (p, p / "lib", p / "libucx" / "lib"):
            if (c / "libucm.so.0").exists() and (c / "ucx" / "libucm_cuda.so.0").exists():
                return c
        return None

    cands: list[Path] = []
    if os.environ.get("MEMHOOK_UCX"):
        cands.append(Path(os.environ["MEMHOOK_UCX"]))
    spec = importlib.util.find_spec("libucx")
    if spec is not None and spec.submodule_search_locations:
        cands.append(Path(next(iter(spec.submodule_search_locations))))
    cands += [ROOT / ".ucx", *sorted((ROOT / ".ucx").glob("libucx*.whl")),
              *sorted((ROOT / ".whl").glob("libucx*.whl"))]
    for c in cands:
        if c.exists() and (found := lib_of(c)) is not None:
            return found
    return None


def system_libcuda_dir() -> Path:
    ctypes.CDLL("libcuda.so.1")
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.rstrip().endswith("libcuda.so.1") or "/libcuda.so." in line:
            return Path(line.split()[-1]).parent
    raise SystemExit("libcuda.so.1 loaded but not found in /proc/self/maps")


def build(scratch: Path, sim: bool) -> tuple[Path, Path, Path]:
    subprocess.run([sys.executable, str(ROOT / "csrc" / "build_native.py"), str(scratch / "out")],
                   check=True, stdout=subprocess.DEVNULL)
    core = scratch / "out" / "memhook"
    cuda = core / "sim" / "lib" if sim else system_libcuda_dir()
    exe = scratch / "ucx_pair"
    subprocess.run(["cc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-g", f"-I{ROOT / 'csrc' / 'include'}",
                    str(FIXTURE), "-o", str(exe), f"-L{cuda}", "-l:libcuda.so.1", f"-L{core}",
                    "-l:libmemhook.so", f"-Wl,-rpath,{cuda}:{core}", "-ldl", "-lpthread"],
                   check=True)
    return exe, core, cuda


LATER = ("late", "again", "re", "last", "churned")


def run_case(exe: Path, lib: Path, cuda: Path, case: tuple[str, str, str], n: int,
             m: int, ucx_far: bool = False) -> dict[str, object]:
    order, mode, ucx_mode = case
    env = dict(os.environ, UCX_MEM_CUDA_HOOK_MODE=ucx_mode, UCX_MODULE_DIR=str(lib / "ucx"),
               UCX_MEMTYPE_CACHE="y", UCX_WARN_UNUSED_ENV_VARS="n",
               UCX_MEM_BISTRO_FORCE_FAR_JUMP="y" if ucx_far else "n")
    env["LD_LIBRARY_PATH"] = f"{cuda}:{env.get('LD_LIBRARY_PATH', '')}"
    env.pop("MEMHOOK_BISTRO_FAR_JUMP", None)
    if mode == "bistro-far":
        mode, env["MEMHOOK_BISTRO_FAR_JUMP"] = "bistro", "1"
    p = subprocess.run([str(exe), order, mode, str(lib), str(n), str(m)], env=env,
                       capture_output=True, text=True, timeout=300)
    res = re.search(r"^RESULT (.*)$", p.stdout, re.M)
    row = re.search(r"^ROW \S+ mechanisms=(\d+) jump=(\d+) reason=(.*)$", p.stdout, re.M)
    after = re.search(r"^AFTER (.*)$", p.stdout, re.M)
    kept = re.search(r"^UNINSTALLED cuMemAlloc_v2 mechanisms=\d+ reason=(.*)$", p.stdout, re.M)
    fork = re.search(r"^FORK install=(-?\d+) ", p.stdout, re.M)
    out: dict[str, object] = {"order": case[0], "mode": case[1], "ucx_mode": case[2],
                              "exit": p.returncode, "ucx_far": ucx_far,
                              "uninstalled_reason": kept.group(1) if kept else "",
                              "fork": int(fork.group(1)) if fork else None}
    if res:
        out.update({k: int(v) for k, v in (kv.split("=") for kv in res.group(1).split())})
    if after:
        counts = {k: int(v) for k, v in (kv.split("=") for kv in after.group(1).split())}
        out.update(counts)
        later = [counts[f"{w}_{e}"] for w in LATER for e in ("alloc", "free")]
        out["later"] = min(later)
        out["later_max"] = max(later)
    if row:
        out.update(mechanisms=int(row.group(1)), jump=int(row.group(2)), reason=row.group(3))
    if p.returncode != 0 or not res:
        out["error"] = (p.stdout + p.stderr)[-400:]
    # (tests/fixtures/second_patch.h knows memhook's jumps and the classic
    # frame only: another prologue is no verdict on memhook)
    out["second_unfit"] = "second patcher" in p.stderr and p.returncode != 0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim", action="store_true", help="memhook's simulator, not the driver")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--m", type=int, default=20)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        lib = ucx_lib(scratch)
        if lib is None:
            print("skipped: no UCX found (MEMHOOK_UCX, an installed libucx, .ucx/, "
                  ".whl/libucx*.whl)")
            return 0
        exe, _core, cuda = build(scratch, a.sim)
        print(f"== driver: {cuda} ({'simulator' if a.sim else 'system'}); UCX: {lib}")
        rows = [run_case(exe, lib, cuda, c, a.n, a.m)
                for c in itertools.product(ORDERS, MODES, UCX_MODES)]
        refused = [run_case(exe, lib, cuda, ("memhook-first", md, u), a.n, a.m, ucx_far=True)
                   for md in MODES for u in ("bistro", "bistro,reloc")]
        refused += [run_case(exe, lib, cuda, (order, md, "bistro"), a.n, a.m)
                    for order in ("memhook-second", "ucx-partial") for md in ("bistro", "bistro-far")]
    table(rows)
    for r in rows:
        if r.get("reason") and r.get("jump") == 0 and "bistro" in str(r["mode"]):
            print(f"  {r['order']} {r['mode']} {r['ucx_mode']}: {r['reason']}")
    print("\n== memhook first, UCX's own hooks refused at the hand-back "
          "(UCX_MEM_BISTRO_FORCE_FAR_JUMP=y; memhook-second: another patcher over memhook's "
          "jump on cuMemAlloc_v2; ucx-partial: on cuMemAllocFromPoolAsync, UCX refuses some)")
    table(refused)
    for r in refused:
        print(f"  {r['mode']} {r['ucx_mode']}: after uninstall, cuMemAlloc_v2: "
              f"{r['uninstalled_reason'] or '(no row)'}")
    if a.json:
        a.json.write_text(json.dumps(rows + refused, indent=1))
    blind = [r for r in rows + refused if not r["second_unfit"] and (
        r.get("after_alloc") != a.m or r.get("after_free") != a.m or r.get("later") != a.m
        or r.get("later_max") != a.m)]
    for r in rows + refused:
        if r["second_unfit"]:
            print(f"  {r['order']} {r['mode']}: not run, the second patcher cannot patch this "
                  f"driver's entry")
    for r in blind:
        print(f"FAIL {r['order']} {r['mode']} {r['ucx_mode']} ucx_far={r['ucx_far']}: UCX saw "
              f"after={r.get('after_alloc')}/{r.get('after_free')} later={r.get('later')}"
              f"..{r.get('later_max')} of {a.m} (exit {r['exit']})")
    print(f"after uninstall: UCX saw exactly {a.m} of {a.m} in every phase of "
          f"{len(rows) + len(refused) - len(blind)} of {len(rows) + len(refused)} cases")
    return 1 if blind else 0


def table(rows: list[dict[str, object]]) -> None:
    head = (f"{'order':<14} {'memhook':<13} {'UCX mode':<13} {'ucx st':>6} {'ucx a/f':>9} "
            f"{'mh a/f':>9} {'early':>5} {'typed':>5} {'cache':>9} {'after':>7} {'later':>5} "
            f"{'fork':>4}  row")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r and "ucx_alloc" not in r:
            print(f"{r['order']:<14} {r['mode']:<13} {r['ucx_mode']:<13} exit {r['exit']}: "
                  f"{str(r['error']).strip().splitlines()[-1:]}")
            continue
        print(f"{r['order']:<14} {r['mode']:<13} {r['ucx_mode']:<13} {r['ucx_status']:>6} "
              f"{r['ucx_alloc']:>4}/{r['ucx_free']:<4} {r['mh_alloc']:>4}/{r['mh_free']:<4} "
              f"{r['free_early']:>5} {r['ucx_types']:>5} {r['cache_hit']:>4}/{r['cache_gone']:<4} "
              f"{r['after_alloc']:>3}/{r['after_free']:<3} {r.get('later', '?'):>5} "
              f"{str(r.get('fork')):>4}"
              f"  mech={r.get('mechanisms', '?')} jump={r.get('jump', '?')}")


if __name__ == "__main__":
    sys.exit(main())
