#!/usr/bin/env python3
"""memhook beside UCX 1.22's CUDA memory hooks: hook cost, install time, types.

    python3 bench/ucx/ucx_side_by_side.py                 # the simulator (this box)
    python3 bench/ucx/ucx_side_by_side.py --quick         # fewer, shorter processes
    python3 bench/ucx/ucx_side_by_side.py --real          # the system's libcuda.so.1
    python3 bench/ucx/ucx_side_by_side.py --ucx PATH      # UCX from PATH (see below)

On the H200, in one device call (the wheel travels as an untracked file
under .ucx/, see tools/gpu/ucx_side_by_side.sh):

    bash tools/gpu/ucx_side_by_side.sh "$OUT"

which runs ``python3 bench/ucx/ucx_side_by_side.py --real --core <native build>
--json $OUT/ucx_side_by_side_real.json``, then the same with ``--driver stub``.

To travel light (the device's working tree is limited to 64 MiB; the wheel
is 43 MB), ``--slim-wheel WHEEL`` writes just the libraries used here to
``.ucx/libucx_cu13-1.22.0-slim.whl`` (untracked, not ignored: it travels).

Where UCX comes from, first found wins (PATH may be an unzipped libucx-cu13
wheel, the ``libucx`` package folder inside one, or the ``.whl`` itself,
whose four libraries are then extracted to a temporary folder):
  1. ``--ucx PATH``;  2. the environment variable ``MEMHOOK_UCX``;
  3. ``.ucx/`` in the repository root (a folder, or a ``.whl`` inside it);
  4. an installed ``libucx`` package (``pip install libucx-cu13``, or the
     wheel in ``.whl/`` that tools/gpu/device_setup.sh unpacks);
  5. ``.whl/libucx*.whl`` in the repository root.
Without UCX it prints ``skipped: ...`` and exits 0.

What runs: bench/ucx/ucx_side_by_side.c, built here with the system cc and
linked against libcuda (the simulator's by default, the system's with
--real) so that its calls go through its PLT.  Each process measures one
configuration - ``none`` (nothing installed: what before -> after drifts by
itself), memhook in modes bistro, reloc, bistro,reloc
(memhook_hooks_install), UCX in the same modes (UCX_MEM_CUDA_HOOK_MODE,
UCX_MEMTYPE_CACHE=y, UCX_MODULE_DIR = the wheel's lib/ucx; its first
ucs_memtype_cache_lookup creates the cache and installs the hooks) - as:
rounds of cuMemAllocAsync+cuMemFreeAsync pairs before install, the install
(timed), the same rounds after.  The configurations' processes are
interleaved (each process of every configuration, then the next), and every
figure is a median: over rounds within a process, then over processes.

Prints:
  1. hook cost: config, pair before (ns), after, added ns, added %, and for
     memhook its added ns over UCX's in the same mode (goal: <= 0.5);
  2. install time, memhook's whole hook table beside UCX's first lookup,
     per mode (median, min, max over the processes);
  3. the memory type each side gives a cuMemAlloc_v2 region, a
     cuMemAllocAsync region and a malloc'd host buffer: UCX's
     ucs_memtype_cache_lookup, memhook's ALLOC event (what memhook's cache,
     and memory_type, answer from), and - where memhook is importable -
     memhook.memory_type itself, in a fresh Python process per mode.
A UCX mode that cannot install on this driver (UCX's bistro refuses a
prologue it cannot decode, which it does for the simulator's) is reported
with UCX's own diagnostic, not measured.

Drivers (--driver): ``sim``, memhook's simulator (its pair maps pages: several
us of system calls, noisy; UCX's bistro refuses its prologues, so only reloc
compares); ``stub``, bench/ucx/ucx_stub_driver.c, whose pair costs a few ns and
whose entries begin as libcuda 580's do, so every mode of both sides installs
and `added` is each side's own cost on this CPU; ``real`` (or --real), the
system's libcuda.so.1: the goal's figures.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["UcxLocation", "find_ucx", "main"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CFLAGS = ["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror",
          f"-I{ROOT / 'csrc' / 'include'}"]
MODES = ("bistro", "reloc", "bistro,reloc")
# What of the wheel this bench needs (the rest is 140 MB of UCP/UCT).
WHEEL_MEMBERS = re.compile(r"^(libucx/lib/(libucs|libucm)\.so(\.0)?|libucx/lib/ucx/libucm_cuda\.so"
                           r"(\.0)?|libucx_cu\d+\.libs/libcudart[^/]*)$")


@dataclass(frozen=True)
class UcxLocation:
    """Where UCX's libraries are: libucs.so, and the module folder with libucm_cuda."""

    libucs: Path
    module_dir: Path
    origin: str


def _layout(base: Path, origin: str) -> UcxLocation | None:
    """The libraries under an unzipped wheel (base/libucx/lib) or its package (base/lib)."""
    for lib in (base / "libucx" / "lib", base / "lib"):
        if (lib / "libucs.so").is_file():
            return UcxLocation(lib / "libucs.so", lib / "ucx", origin)
    return None


def _from_wheel(wheel: Path, scratch: Path) -> UcxLocation | None:
    try:
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if WHEEL_MEMBERS.match(name):
                    z.extract(name, scratch)
    except zipfile.BadZipFile as e:
        raise SystemExit(f"{wheel}: not a wheel ({e}); expected a libucx-cu13 .whl") from e
    return _layout(scratch, f"{wheel} (extracted to {scratch})")


def slim_wheel(wheel: Path, out_dir: Path) -> Path:
    """Write the members this bench needs (~5 MB of the wheel's 140) as a
    small .whl in out_dir, which find_ucx takes like the whole wheel: for a
    working tree that must travel under a size limit."""
    m = re.match(r"^([^-]+-[^-]+)-", wheel.name)
    out = out_dir / f"{m.group(1) if m else 'libucx'}-slim.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        names = [n for n in src.namelist() if WHEEL_MEMBERS.match(n)]
        if not any(n.endswith("libucm_cuda.so") for n in names):
            raise SystemExit(f"{wheel}: no libucx/lib/ucx/libucm_cuda.so (not libucx-cu*)")
        for name in names:
            dst.writestr(src.getinfo(name), src.read(name))
    return out


def find_ucx(explicit: str | None, scratch: Path) -> tuple[UcxLocation | None, str]:
    """UCX's location, or None and what was looked at (for the skip line)."""
    looked: list[str] = []
    candidates: list[tuple[Path, str]] = []
    if explicit:
        candidates.append((Path(explicit), "--ucx"))
    elif os.environ.get("MEMHOOK_UCX"):
        candidates.append((Path(os.environ["MEMHOOK_UCX"]), "MEMHOOK_UCX"))
    else:
        candidates.append((ROOT / ".ucx", "the repository's .ucx/"))
        spec = importlib.util.find_spec("libucx")
        if spec is not None and spec.submodule_search_locations:
            pkg = Path(list(spec.submodule_search_locations)[0])
            candidates.append((pkg, "the installed libucx package"))
        candidates += [(w, "the repository's .whl/")
                       for w in sorted((ROOT / ".whl").glob("libucx*.whl"))]
    for path, why in candidates:
        looked.append(f"{path} ({why})")
        if path.is_file() and path.suffix == ".whl":
            loc = _from_wheel(path, scratch / "ucx")
        elif path.is_dir():
            loc = _layout(path, f"{path} ({why})")
            wheels = sorted(path.glob("libucx*.whl"))
            if loc is None and wheels:
                loc = _from_wheel(wheels[-1], scratch / "ucx")
        else:
            loc = None
        if loc is not None:
            return loc, ""
    return None, "; ".join(looked) if looked else "nothing"


def _native_core(core: Path | None, scratch: Path) -> Path:
    """The folder with libmemhook.so and sim/lib/: given, the package's, or built here."""
    for c in ([core] if core else [ROOT / "memhook"]):
        if (c / "libmemhook.so").is_file() and (c / "sim" / "lib" / "libcuda.so.1").is_file():
            return c
    if core:
        raise SystemExit(f"no libmemhook.so and sim/lib/libcuda.so.1 in {core}")
    out = scratch / "native"
    subprocess.run([sys.executable, str(ROOT / "csrc" / "build_native.py"), str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out / "memhook"


def _system_libcuda() -> Path:
    """The path the loader gives libcuda.so.1 here (to link against it)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("libcuda.so.1 ") and "x86-64" in line:
            return Path(line.rsplit("=>", 1)[1].strip())
    probe = ("import ctypes; ctypes.CDLL('libcuda.so.1'); "
             "print(next(l.split()[-1] for l in open('/proc/self/maps') if 'libcuda.so' in l))")
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if got.returncode != 0:
        raise SystemExit("--real: no libcuda.so.1 on this machine")
    return Path(got.stdout.strip())


@dataclass
class Config:
    side: str
    mode: str
    rows: list[dict[str, str]] = field(default_factory=list)
    failure: str = ""

    @property
    def name(self) -> str:
        return self.side if self.side == "none" else f"{self.side} {self.mode}"


def _run_one(exe: Path, cfg: Config, env: dict[str, str], args: list[str],
             timeout: int) -> dict[str, str] | str:
    cmd = [str(exe), "--side", cfg.side, "--mode", cfg.mode, *args]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout} s"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT ") and proc.returncode == 0:
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    tail = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()][-3:]
    return f"exit {proc.returncode}: " + " | ".join(tail)


def _ucx_why(exe: Path, cfg: Config, env: dict[str, str], args: list[str],
             timeout: int) -> str:
    """UCX's own reason for a failed install: its memory module's diagnostics."""
    env = dict(env, UCX_MEM_LOG_LEVEL="diag")
    cmd = [str(exe), "--side", cfg.side, "--mode", cfg.mode, *args]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ""
    why = [re.sub(r"^\[[^]]*\] \[[^]]*\]\s*", "", ln) for ln in
           (proc.stdout + proc.stderr).splitlines() if "failed to" in ln]
    return "UCX could not install: " + " | ".join(why[:2]) if why else ""


# memhook's own Python answer for the regions the C program asks about: the
# hooks in first (so the cache can vouch for host memory), then the driver.
PY_TYPES = r"""
import ctypes, json, sys
import memhook
memhook.install(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1")
u64, vp = ctypes.c_uint64, ctypes.c_void_p
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
cuda.cuMemAllocAsync.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t, vp]
ctx, stream, sync_p, async_p = vp(), vp(), u64(), u64()
for rc in (cuda.cuInit(0), cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0),
           cuda.cuCtxSetCurrent(ctx), cuda.cuStreamCreate(ctypes.byref(stream), 1),
           cuda.cuMemAlloc_v2(ctypes.byref(sync_p), 1 << 20),
           cuda.cuMemAllocAsync(ctypes.byref(async_p), 1 << 20, stream),
           cuda.cuStreamSynchronize(stream)):
    assert rc == 0, rc
host = ctypes.create_string_buffer(4096)
print(json.dumps({"type_sync": memhook.memory_type(sync_p.value).name,
                  "type_async": memhook.memory_type(async_p.value).name,
                  "type_host": memhook.memory_type(ctypes.addressof(host)).name}))
"""


def _memhook_python_types(mode: str, env: dict[str, str]) -> dict[str, str] | str:
    """memhook.memory_type's answers in a fresh process, or why there are none."""
    if importlib.util.find_spec("memhook") is None:
        return "memhook is not importable here (pip install -e ., or tools/gpu/device_setup.sh)"
    try:
        got = subprocess.run([sys.executable, "-c", PY_TYPES, mode], env=env,
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "timed out"
    if got.returncode != 0:
        tail = [ln for ln in got.stderr.splitlines() if ln.strip()][-1:]
        return f"exit {got.returncode}: {' '.join(tail)}"
    return json.loads(got.stdout.strip().splitlines()[-1])


def _med(rows: list[dict[str, str]], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--ucx", help="UCX: an unzipped libucx-cu13 wheel, its libucx folder, or "
                                  "the .whl (default: MEMHOOK_UCX, .ucx/, installed libucx)")
    ap.add_argument("--core", type=Path, help="folder with libmemhook.so and sim/lib/ "
                                              "(default: the package's, else built here)")
    ap.add_argument("--driver", choices=("sim", "stub", "real"), default="sim",
                    help="sim: memhook's simulator (default); stub: bench/ucx/ucx_stub_driver.c, "
                         "whose pair costs a few ns, so `added` is the hooks' own cost; "
                         "real: the system's libcuda.so.1")
    ap.add_argument("--real", action="store_true", help="same as --driver real")
    ap.add_argument("--quick", action="store_true", help="3 processes, 5 rounds, fewer pairs")
    ap.add_argument("--procs", type=int, help="processes per configuration (default 5)")
    ap.add_argument("--rounds", type=int, help="rounds before and after, per process (default 9)")
    ap.add_argument("--pairs", type=int, help="pairs per round (default 20000; sim 2000)")
    ap.add_argument("--install-procs", type=int,
                    help="extra install-only processes per configuration (default 6)")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--slim-wheel", type=Path, metavar="WHEEL",
                    help="only write the libraries this bench needs from WHEEL into "
                         ".ucx/<name>-slim.whl (about 2 MB) and exit")
    args = ap.parse_args(argv)
    if args.slim_wheel:
        print(f"wrote {slim_wheel(args.slim_wheel, ROOT / '.ucx')}")
        return 0
    if args.real:
        args.driver = "real"
    args.real = args.driver == "real"

    with tempfile.TemporaryDirectory(prefix="ucx_sbs_") as tmp_s:
        tmp = Path(tmp_s)
        ucx, looked = find_ucx(args.ucx, tmp)
        if ucx is None:
            print(f"skipped: no UCX found (looked at {looked}); pass --ucx PATH or set "
                  "MEMHOOK_UCX to an unzipped libucx-cu13 wheel or the .whl")
            return 0
        if not (ucx.module_dir / "libucm_cuda.so").is_file():
            print(f"skipped: UCX at {ucx.origin} has no {ucx.module_dir}/libucm_cuda.so "
                  "(not a CUDA build of UCX: nothing to compare against)")
            return 0
        if shutil.which(os.environ.get("CC", "cc")) is None:
            print("skipped: no C compiler (cc) to build bench/ucx/ucx_side_by_side.c")
            return 0
        return _bench(args, ucx, tmp)


def _bench(args: argparse.Namespace, ucx: UcxLocation, tmp: Path) -> int:
    core = _native_core(args.core, tmp)
    cc = os.environ.get("CC", "cc")
    if args.driver == "real":
        libcuda = _system_libcuda()
    elif args.driver == "stub":
        # hook_bench's stub with NVIDIA-shaped entries (see the file), built
        # as bench/hooks/hook_bench.py builds its stub.
        libcuda = tmp / "stub" / "libcuda.so.1"
        libcuda.parent.mkdir()
        subprocess.run([cc, *CFLAGS, "-fPIC", "-shared", "-fvisibility=hidden",
                        "-fno-optimize-sibling-calls", str(HERE / "ucx_stub_driver.c"),
                        "-o", str(libcuda), "-Wl,-soname,libcuda.so.1"], check=True)
    else:
        libcuda = core / "sim" / "lib" / "libcuda.so.1"
    exe = tmp / "ucx_side_by_side"
    subprocess.run([cc, *CFLAGS, str(HERE / "ucx_side_by_side.c"),
                    "-o", str(exe), str(libcuda), "-ldl", "-lpthread"], check=True)
    quick = args.quick
    procs = args.procs or (3 if quick else 5)
    rounds = args.rounds or (5 if quick else 9)
    pairs = args.pairs or {"sim": 1000 if quick else 2000, "stub": 20000 if quick else 200000,
                           "real": 5000 if quick else 20000}[args.driver]
    install_procs = args.install_procs if args.install_procs is not None else (3 if quick else 6)

    base_env = dict(os.environ)
    for k in [k for k in base_env if k.startswith(("UCX_", "MEMHOOK_CUDA_MODE"))]:
        del base_env[k]  # nothing from the caller's shell may change a configuration
    if not args.real:
        base_env["LD_LIBRARY_PATH"] = str(libcuda.parent) + (
            ":" + base_env["LD_LIBRARY_PATH"] if base_env.get("LD_LIBRARY_PATH") else "")
    common = ["--libmemhook", str(core / "libmemhook.so"), "--libucs", str(ucx.libucs)]

    def env_for(cfg: Config) -> dict[str, str]:
        if cfg.side != "ucx":
            return base_env
        return dict(base_env, UCX_MEMTYPE_CACHE="y", UCX_MODULE_DIR=str(ucx.module_dir),
                    UCX_MEM_CUDA_HOOK_MODE=cfg.mode)

    configs = [Config("none", "-")] + [Config(s, m) for m in MODES for s in ("memhook", "ucx")]
    installs: dict[str, list[float]] = {c.name: [] for c in configs}
    loads: dict[str, list[float]] = {c.name: [] for c in configs}
    print(f"ucx_side_by_side: driver {libcuda} ({args.driver}); "
          f"UCX {ucx.libucs} ({ucx.origin}); memhook {core / 'libmemhook.so'}", flush=True)
    print(f"  {procs} processes per configuration, interleaved; each {rounds} rounds of "
          f"{pairs} cuMemAllocAsync+cuMemFreeAsync pairs (64 B) before install and "
          f"{rounds} after; medians over rounds, then over processes", flush=True)
    timeout = 600
    for p in range(procs + install_procs):
        measuring = p < procs
        extra = (["--rounds", str(rounds), "--pairs", str(pairs)] if measuring
                 else ["--rounds", "0", "--pairs", "100"])
        for cfg in configs:
            if cfg.failure or (not measuring and cfg.side == "none"):
                continue
            got = _run_one(exe, cfg, env_for(cfg), [*common, *extra], timeout)
            if isinstance(got, str):
                if cfg.side == "ucx":
                    got = _ucx_why(exe, cfg, env_for(cfg), [*common, *extra], timeout) or got
                cfg.failure = got
                print(f"  {cfg.name}: could not run: {got}", flush=True)
                continue
            installs[cfg.name].append(float(got["install_us"]))
            loads[cfg.name].append(float(got["load_us"]))
            if measuring:
                cfg.rows.append(got)
                b, a, d = (float(got[k]) for k in ("before_ns", "after_ns", "added_ns"))
                print(f"  process {p + 1}/{procs} {cfg.name:<20} before {b:8.1f}  after {a:8.1f}"
                      f"  added {d:7.1f} ns  install {float(got['install_us']) / 1e3:7.2f} ms",
                      flush=True)

    by = {c.name: c for c in configs}
    print("\n1. hook cost on the cuMemAllocAsync+cuMemFreeAsync pair (median over processes of "
          "each process's median over rounds; added = after - before in one process)")
    print(f"{'config':<20} {'before ns':>10} {'after ns':>10} {'added ns':>9} {'added %':>8}  "
          f"{'added min..max':>19}  {'memhook/UCX added':>17}  goal (<= 0.5)")
    summary: dict[str, dict[str, object]] = {}
    for cfg in configs:
        if cfg.failure or not cfg.rows:
            print(f"{cfg.name:<20} not measured: {cfg.failure or 'no rows'}")
            summary[cfg.name] = {"failure": cfg.failure}
            continue
        before, after, added = (_med(cfg.rows, k) for k in ("before_ns", "after_ns", "added_ns"))
        pct = statistics.median(100 * float(r["added_ns"]) / float(r["before_ns"])
                                for r in cfg.rows)
        ratio_txt, goal = "", ""
        ratio: float | None = None
        if cfg.side == "memhook":
            u = by[f"ucx {cfg.mode}"]
            if u.rows and not u.failure:
                ua = _med(u.rows, "added_ns")
                if ua > 0:
                    ratio = added / ua
                    ratio_txt = f"{ratio:.2f}"
                    goal = "yes" if ratio <= 0.5 else "NO"
                else:
                    ratio_txt, goal = "UCX adds <= 0", "-"
            else:
                ratio_txt, goal = "no UCX figure", "-"
        each = [float(r["added_ns"]) for r in cfg.rows]
        spread = f"{min(each):.1f}..{max(each):.1f}"
        print(f"{cfg.name:<20} {before:10.1f} {after:10.1f} {added:9.1f} {pct:7.1f}%  "
              f"{spread:>19}  {ratio_txt:>17}  {goal}")
        summary[cfg.name] = {"before_ns": before, "after_ns": after, "added_ns": added,
                             "added_pct": pct, "ratio_to_ucx": ratio, "processes": len(cfg.rows)}
    print("(row `none`: nothing installed between before and after - the drift of the method "
          "itself; min..max: the added ns of each process)")

    print("\n2. install time (ms; median, min..max over "
          f"{procs + install_procs} fresh processes): memhook_hooks_install of the whole hook "
          "table beside UCX's first ucs_memtype_cache_lookup (creates the cache: loads "
          "libucm_cuda, installs its hooks, scans /proc/self/maps)")
    print(f"{'mode':<14} {'memhook':>24} {'UCX':>24}")

    def inst(name: str, table: dict[str, list[float]] = installs) -> str:
        v = table.get(name) or []
        if by[name].failure and not v:
            return "n/a"
        if not v:
            return "-"
        ms = [x / 1e3 for x in v]
        return f"{statistics.median(ms):.2f} ({min(ms):.2f}..{max(ms):.2f})"

    for mode in MODES:
        print(f"{mode:<14} {inst('memhook ' + mode):>24} {inst('ucx ' + mode):>24}")
        for side in ("memhook", "ucx"):
            v = installs.get(f"{side} {mode}") or []
            summary.setdefault(f"{side} {mode}", {})["install_ms_median"] = (
                statistics.median(v) / 1e3 if v else None)

    print("library load before it (dlopen, nothing installed yet; ms):")
    for mode in MODES:
        print(f"{mode:<14} {inst('memhook ' + mode, loads):>24} {inst('ucx ' + mode, loads):>24}")
    print("(UCX's load includes the mmap/munmap/mremap/shmat/shmdt/sbrk/brk/madvise hooks its "
          "memory module installs then, by bistro unless UCX_MEM_MMAP_HOOK_MODE says "
          "otherwise; each UCX bistro patch waits UCX_MEM_BISTRO_GRACE_DURATION, 50 ms by "
          "default, for threads inside the patched code)")

    print("\n3. the memory type each side gives a region (UCX: ucs_memtype_cache_lookup; "
          "memhook: the mem_type of its ALLOC event, which memhook's cache and memory_type "
          "answer from)")
    print(f"{'config':<26} {'cuMemAlloc_v2':>14} {'cuMemAllocAsync':>16} {'host malloc':>14}")
    for cfg in configs[1:]:
        if cfg.rows:
            r = cfg.rows[0]
            print(f"{cfg.name:<26} {r['type_sync']:>14} {r['type_async']:>16} "
                  f"{r['type_host']:>14}")
            summary[cfg.name]["types"] = {k: r[k] for k in ("type_sync", "type_async",
                                                            "type_host")}
    for mode in MODES:
        py = _memhook_python_types(mode, base_env)
        if isinstance(py, str):
            print(f"{'memhook ' + mode + ' (py)':<26} memory_type not asked: {py}")
            continue
        print(f"{'memhook ' + mode + ' (py)':<26} {py['type_sync']:>14} {py['type_async']:>16} "
              f"{py['type_host']:>14}")
        summary.setdefault(f"memhook {mode}", {})["python_types"] = py
    print("(py: memhook.memory_type in a fresh Python process, hooks installed before cuInit)")
    if any(c.failure for c in configs):
        print("\nnot measured:")
        for c in configs:
            if c.failure:
                print(f"  {c.name}: {c.failure}")
    if args.driver == "stub":
        print("\n(stub driver: its pair costs a few ns, so `added` is the hooks' own cost on "
              "this CPU; the goal is for the real driver on the H200: --real)")
    if args.driver == "sim":
        print("\n(simulator figures: its pair maps real pages, several us of system calls, so "
              "these say nothing about the goal; the goal is for the H200: --real)")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "installs_us": installs,
                                         "loads_us": loads,
                                         "rows": {c.name: c.rows for c in configs},
                                         "driver": args.driver, "ucx": str(ucx.libucs)}, indent=1))
    # memhook must run in every mode; a UCX mode it cannot install is UCX's limit.
    return 1 if any(c.failure for c in configs if c.side != "ucx") else 0


if __name__ == "__main__":
    sys.exit(main())
