"""``memhook info [--sim] [--json]``: what a bug report about memhook needs.

* memhook's version and the core library it loads;
* the driver (path, ``cuDriverGetVersion``, ``cuInit``'s result, devices),
  or "no driver";
* the runtimes that load here (``cudaRuntimeGetVersion``) and cuda-python's
  version;
* the CUDA libraries mapped in this process once all that is loaded;
* for every hooked function: whether the loaded libraries export it, and
  the mechanism that covers it in each mode (found by really installing the
  hooks in this process in mode bistro, reloc and bistro,reloc, one after
  the other, and removing them); for each driver entry point bistro would
  refuse, the reason and the prologue bytes (``memhook_bistro_analyze`` on
  the exported entry, as the patch engine sees it).

``--sim`` loads memhook's CUDA simulator first (``memhook.sim.activate()``),
so the report describes the simulator instead of the host's driver.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
from typing import Any

from .._values.printable import printable
from .._objects.procmaps import file_paths
from .._objects.sonames import LIBCUDA_SONAME

__all__ = ["add_parser", "collect", "format_text", "run"]

MODES = ("bistro", "reloc", "bistro,reloc")
PROLOGUE_BYTES = 32
# Where bistro's islands land: the nearest free gap to the target, usually a
# few MiB away.  The analysis places the hypothetical trampoline there.
TRAMPOLINE_DISTANCE = 16 << 20
_LIBRARY_RE = re.compile(
    r"^lib(cuda|cudart|nvidia-|nvrtc|nvJitLink|cublas|cublasLt|cufft|curand|cusparse|cusolver|"
    r"nccl|cudnn|cupti|nvToolsExt|memhook)")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "info", help="driver, runtime, loaded CUDA libraries and hook coverage per mode",
        description="Print what a bug report needs: driver and runtime versions (or 'no "
                    "driver'), the CUDA libraries loaded, and per hooked function the "
                    "mechanism that covers it in each mode, with bistro's reason and the "
                    "prologue bytes where it would refuse.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--sim", action="store_true",
                   help="describe memhook's CUDA simulator instead of the host's driver")
    p.set_defaults(func=run)
    return p


# ------------------------------------------------------------------ probing

def _driver_info() -> tuple[dict, ctypes.CDLL | None]:
    from .._binding.cuda_errors import error_name

    try:
        cuda = ctypes.CDLL(LIBCUDA_SONAME)
    except OSError as exc:
        return {"loaded": False, "error": str(exc)}, None
    info: dict[str, Any] = {"loaded": True, "path": _object_path(cuda, "cuInit")}
    version = ctypes.c_int(0)
    rc = cuda.cuDriverGetVersion(ctypes.byref(version))
    info["version"] = version.value if rc == 0 else None
    info["version_text"] = _cuda_version(version.value) if rc == 0 else error_name(rc, False)
    rc = cuda.cuInit(0)
    info["cuInit"] = error_name(rc, False)
    devices = []
    if rc == 0:
        count = ctypes.c_int(0)
        if cuda.cuDeviceGetCount(ctypes.byref(count)) == 0:
            for ordinal in range(count.value):
                dev = ctypes.c_int(0)
                if cuda.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
                    continue
                name = ctypes.create_string_buffer(256)
                cuda.cuDeviceGetName(name, 256, dev)
                total = ctypes.c_size_t(0)
                cuda.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
                devices.append({"ordinal": ordinal, "name": name.value.decode(errors="replace"),
                                "memory_bytes": total.value})
    info["devices"] = devices
    return info, cuda


def _runtime_info(sim: bool) -> list[dict]:
    if sim:
        from .. import sim as _sim

        candidates = [os.path.join(_sim.library_dir(), _sim.RUNTIME_SONAME)]
    else:
        candidates = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    found, seen = [], set()
    for name in candidates:
        try:
            # Global, as an application's runtime is: the hooks see its exports.
            rt = ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
        except OSError:
            continue
        path = _object_path(rt, "cudaRuntimeGetVersion")
        if path in seen:
            continue
        seen.add(path)
        version = ctypes.c_int(0)
        rc = rt.cudaRuntimeGetVersion(ctypes.byref(version))
        found.append({"name": name, "path": path,
                      "version": version.value if rc == 0 else None,
                      "version_text": _cuda_version(version.value) if rc == 0 else f"error {rc}"})
    return found


def _python_packages() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("cuda-python", "cuda-bindings", "cupy-cuda12x", "cupy-cuda13x", "torch"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10} ({v})"


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


class _Elf64Sym(ctypes.Structure):
    _fields_ = [("st_name", ctypes.c_uint32), ("st_info", ctypes.c_ubyte),
                ("st_other", ctypes.c_ubyte), ("st_shndx", ctypes.c_uint16),
                ("st_value", ctypes.c_uint64), ("st_size", ctypes.c_uint64)]


def _dladdr1() -> Any:
    for name in (None, "libdl.so.2"):
        try:
            fn = ctypes.CDLL(name).dladdr1
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo),
                       ctypes.POINTER(ctypes.POINTER(_Elf64Sym)), ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    return None  # pragma: no cover - glibc has it


def _symbol(address: int) -> tuple[str, int]:
    """(object path, symbol size) of the function at ``address``."""
    fn = _dladdr1()
    if fn is None:  # pragma: no cover
        return "?", 0
    info = _DlInfo()
    sym = ctypes.POINTER(_Elf64Sym)()
    if not fn(address, ctypes.byref(info), ctypes.byref(sym), 1):  # RTLD_DL_SYMENT
        return "?", 0
    path = os.fsdecode(info.dli_fname) if info.dli_fname else "?"
    size = int(sym.contents.st_size) if sym and info.dli_saddr == address else 0
    return path, size


def _object_path(handle: ctypes.CDLL, symbol: str) -> str:
    try:
        address = ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value
    except AttributeError:
        return handle._name
    path, _ = _symbol(address or 0)
    return os.path.realpath(path) if path != "?" else handle._name


def _read_code(address: int, size: int) -> bytes:
    """Up to ``size`` bytes of this process's memory (never faults)."""
    try:
        with open("/proc/self/mem", "rb", buffering=0) as mem:
            return os.pread(mem.fileno(), size, address)
    except OSError:
        return b""


def _bistro_analysis(cuda: ctypes.CDLL | None, names: list[tuple[str, str]]) -> dict[str, dict]:
    """Per driver function the driver exports: bistro's verdict on its entry."""
    from .._binding.core import ffi, lib

    out: dict[str, dict] = {}
    if cuda is None:
        return out
    for name, api in names:
        if api != "driver":
            continue
        try:
            address = ctypes.cast(getattr(cuda, name), ctypes.c_void_p).value or 0
        except AttributeError:
            continue
        path, sym_size = _symbol(address)
        avail = min(sym_size, 4096) if sym_size else PROLOGUE_BYTES
        code = _read_code(address, avail)
        verdicts = {}
        for jump in (5, 12):
            result = ffi.new("memhook_bistro_analysis *")
            rc = lib.memhook_bistro_analyze(code or b"\0", len(code), address, sym_size, jump,
                                            address + TRAMPOLINE_DISTANCE, name.encode(),
                                            os.fsencode(path), result)
            if rc != 0:  # pragma: no cover - arguments are valid
                continue
            verdicts[jump] = {"patchable": bool(result.patchable),
                              "reason": ffi.string(result.reason).decode(errors="replace"),
                              "moved_bytes": int(result.consumed),
                              "endbr64_kept": int(result.patch_offset) == 4}
        out[name] = {"address": f"{address:#x}", "library": path, "symbol_size": sym_size,
                     "prologue": code[:PROLOGUE_BYTES].hex(" "),
                     "jmp_rel32": verdicts.get(5), "movabs_jmp": verdicts.get(12)}
    return out


def _coverage_per_mode() -> tuple[list[dict], dict[str, str]]:
    """Install the hooks in each mode, read status(), remove them."""
    import memhook

    rows: dict[str, dict] = {}
    errors: dict[str, str] = {}
    for mode in MODES:
        try:
            report = memhook.install(mode)
        except OSError as exc:
            errors[mode] = str(exc)
            report = memhook.status()
        for h in report.hooks:
            row = rows.setdefault(h.name, {"function": h.name, "api": h.api,
                                           "kind": "alloc" if int(h.kind) == 1 else "free",
                                           "present": h.present, "modes": {}})
            row["present"] = row["present"] or h.present
            mech = str(h.mechanism) if h.installed else "none"
            if h.bistro_jump:
                mech = mech.replace("bistro", f"bistro({h.bistro_jump}B)")
            row["modes"][mode] = {"mechanism": mech, "reason": h.reason}
    memhook.uninstall()
    return list(rows.values()), errors


def _loaded_libraries() -> list[str]:
    return [p for p in file_paths() if _LIBRARY_RE.match(os.path.basename(p))]


def collect(sim: bool = False) -> dict:
    """Everything ``memhook info`` reports, as plain data."""
    import memhook

    from .. import sim as _sim

    if sim:
        _sim.activate()
    driver, cuda = _driver_info()
    runtimes = _runtime_info(sim)
    names = [(h.name, h.api) for h in memhook.status().hooks]
    analysis = _bistro_analysis(cuda, names)  # before any hook: dlsym is not interposed yet
    functions, mode_errors = _coverage_per_mode()
    for row in functions:
        verdict = analysis.get(row["function"])
        if verdict is not None:
            row["bistro_analysis"] = verdict
    return {
        "memhook": memhook.__version__,
        "core": memhook.library_path(),
        "simulator": sim,
        "driver": driver,
        "runtimes": runtimes,
        "python_packages": _python_packages(),
        "loaded_libraries": _loaded_libraries(),
        "mode_errors": mode_errors,
        "functions": functions,
    }


# ------------------------------------------------------------------ output

def format_text(info: dict) -> str:
    out = [f"memhook {info['memhook']} (core {info['core']})"]
    if info["simulator"]:
        out.append("simulator: memhook's CUDA simulator is loaded (--sim)")
    d = info["driver"]
    if not d["loaded"]:
        out.append(f"driver:  no driver ({d['error']})")
        out.append("         (`memhook info --sim` describes memhook's CUDA simulator; "
                   "`memhook trace --sim` runs programs on it)")
    else:
        out.append(f"driver:  {d['path']}: CUDA {d['version_text']}; cuInit: {d['cuInit']}")
        for dev in d["devices"]:
            out.append(f"         device {dev['ordinal']}: {dev['name']}, "
                       f"{dev['memory_bytes'] / 2**30:.1f} GiB")
        if d["cuInit"] == "CUDA_SUCCESS" and not d["devices"]:
            out.append("         no devices")
    if info["runtimes"]:
        for rt in info["runtimes"]:
            out.append(f"runtime: {rt['path']}: CUDA {rt['version_text']}")
    else:
        out.append("runtime: none found (libcudart.so.13/.12/.so not on the library path)")
    if info["python_packages"]:
        out.append("python:  " + ", ".join(f"{k} {v}" for k, v in info["python_packages"].items()))
    out.append("loaded CUDA libraries:")
    out += [f"  {p}" for p in info["loaded_libraries"]] or ["  (none)"]
    for mode, err in info["mode_errors"].items():
        out.append(f"mode {mode}: {err}")
    # Paths, device names and the loader's messages are not ours to trust
    # on a terminal (memhook._values.printable); the lines below are memhook's own.
    out = [printable(line) for line in out]
    out.append("hooked functions: the mechanism covering each, per MEMHOOK_CUDA_MODE")
    out.append(f"  {'function':<30} {'api':<8} {'present':<8} " +
               " ".join(f"{m:<16}" for m in MODES))
    for row in info["functions"]:
        cells = " ".join(f"{row['modes'].get(m, {}).get('mechanism', '?'):<16}" for m in MODES)
        out.append(f"  {row['function']:<30} {row['api']:<8} "
                   f"{'yes' if row['present'] else 'no':<8} {cells}".rstrip())
    refusals = []
    for row in info["functions"]:
        a = row.get("bistro_analysis")
        bistro = row["modes"].get("bistro", {})
        refused_now = row["present"] and row["api"] == "driver" and \
            "bistro" not in bistro.get("mechanism", "")
        if a is None and not refused_now:
            continue
        near, far = (a or {}).get("jmp_rel32"), (a or {}).get("movabs_jmp")
        if a is not None and near and far and near["patchable"] and far["patchable"] \
                and not refused_now:
            continue
        reason = bistro.get("reason") if refused_now else ""
        if not reason and a is not None:
            bad = near if near and not near["patchable"] else far
            reason = bad["reason"] if bad else ""
        line = f"  {row['function']}: {reason or 'refused'}"
        if a is not None:
            line += f"\n      prologue at {a['address']} ({a['symbol_size']} bytes): {a['prologue']}"
            for label, v in (("jmp rel32", near), ("movabs+jmp", far)):
                if v is not None:
                    line += f"\n      {label}: " + ("patchable" if v["patchable"] else v["reason"])
        refusals.append(line)
    out.append("where bistro refuses (reason and prologue bytes):")
    out += refusals or ["  (nowhere: bistro can patch every driver entry point present)"
                        if d["loaded"] else "  (no driver loaded: bistro has nothing to patch)"]
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    try:
        info = collect(sim=args.sim)
    except Exception as exc:  # noqa: BLE001 (a report tool must report, not crash)
        print(f"memhook info: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_text(info))
    return 0
