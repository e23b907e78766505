"""bistro against the real NVIDIA libraries, in memory, on a GPU machine.

    python3 tools/gpu/bistro_on_gpu.py PATH/TO/libmemhook.so [OUT.json]

1. Live census: every exported function of the loaded libcuda.so.1 and
   libcudart.so.13, judged by memhook_bistro_analyze from the bytes mapped in
   this process (the same code bistro would patch), both jump forms.
2. Live patch: cuMemAlloc_v2 and cuMemFree_v2 of the real driver are patched
   (5-byte, then forced 12-byte) with hooks that count calls and forward to
   the trampoline; real allocations go through them; every byte is restored.
Uses ctypes only, so it runs where cffi is not installed.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from typing import Any

c_size_t, c_void_p, c_int, c_ull = (
    ctypes.c_size_t,
    ctypes.c_void_p,
    ctypes.c_int,
    ctypes.c_ulonglong,
)


class Analysis(ctypes.Structure):
    _fields_ = [
        ("patchable", c_int),
        ("jump_size", c_int),
        ("patch_offset", c_size_t),
        ("consumed", c_size_t),
        ("refusal", c_int),
        ("reason", ctypes.c_char * 256),
    ]


def _exports(path: str) -> list[tuple[str, int, int]]:
    """(name, value, size) of the defined dynamic functions, from nm."""
    out = subprocess.run(
        ["nm", "-D", "--defined-only", "-S", path], capture_output=True, text=True, check=True
    ).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in ("T", "t", "i"):
            rows.append((parts[3].split("@")[0], int(parts[0], 16), int(parts[1], 16)))
    return rows


def _base_of(handle_path: str) -> int:
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and os.path.realpath(fields[5].strip()) == os.path.realpath(
                handle_path
            ):
                start = int(fields[0].split("-")[0], 16)
                offset = int(fields[2], 16)
                if offset == 0:
                    return start
    raise RuntimeError(f"{handle_path} is not mapped")


def live_census(mh: ctypes.CDLL, lib_path: str) -> dict[str, Any]:
    base = _base_of(lib_path)
    result: dict[str, Any] = {"library": lib_path, "functions": 0}
    for jump in (5, 12):
        ok, refusals = 0, {}
        funcs = _exports(lib_path)
        for name, value, size in funcs:
            addr = base + value
            avail = size if size else 64
            code = ctypes.string_at(addr, avail)
            a = Analysis()
            mh.memhook_bistro_analyze(
                code,
                c_size_t(len(code)),
                c_ull(addr),
                c_size_t(size),
                c_int(jump),
                c_ull(addr + (1 << 30)),
                name.encode(),
                os.path.basename(lib_path).encode(),
                ctypes.byref(a),
            )
            if a.patchable:
                ok += 1
            else:
                refusals.setdefault(str(a.refusal), []).append(a.reason.decode(errors="replace"))
        result["functions"] = len(funcs)
        result[f"patchable_{jump}"] = ok
        result[f"refusals_{jump}"] = {
            k: {"count": len(v), "examples": v[:3]} for k, v in refusals.items()
        }
    return result


HOOK = ctypes.CFUNCTYPE(c_int, ctypes.POINTER(c_ull), c_size_t)
FREE_HOOK = ctypes.CFUNCTYPE(c_int, c_ull)


def live_patch(mh: ctypes.CDLL, cuda: ctypes.CDLL, jump: int) -> dict[str, Any]:
    counts = {"alloc": 0, "free": 0}
    target_alloc = ctypes.cast(cuda.cuMemAlloc_v2, c_void_p).value
    target_free = ctypes.cast(cuda.cuMemFree_v2, c_void_p).value
    before = (ctypes.string_at(target_alloc, 16), ctypes.string_at(target_free, 16))
    orig_alloc, orig_free = c_void_p(), c_void_p()
    patch_alloc, patch_free = c_void_p(), c_void_p()
    holder: dict[str, Any] = {}

    def alloc_hook(dptr, size):
        counts["alloc"] += 1
        return holder["alloc"](dptr, size)

    def free_hook(ptr):
        counts["free"] += 1
        return holder["free"](ptr)

    alloc_cb, free_cb = HOOK(alloc_hook), FREE_HOOK(free_hook)
    why = ctypes.create_string_buffer(512)
    rc1 = mh.memhook_bistro_install(
        c_void_p(target_alloc),
        ctypes.cast(alloc_cb, c_void_p),
        c_int(jump),
        ctypes.byref(orig_alloc),
        ctypes.byref(patch_alloc),
        why,
        c_size_t(512),
    )
    reason1 = why.value.decode()
    rc2 = mh.memhook_bistro_install(
        c_void_p(target_free),
        ctypes.cast(free_cb, c_void_p),
        c_int(jump),
        ctypes.byref(orig_free),
        ctypes.byref(patch_free),
        why,
        c_size_t(512),
    )
    out: dict[str, Any] = {"install": [rc1, rc2], "reason": [reason1, why.value.decode()]}
    if rc1 == 0 and rc2 == 0:
        holder["alloc"] = HOOK(orig_alloc.value)
        holder["free"] = FREE_HOOK(orig_free.value)
        out["patched_bytes"] = [
            ctypes.string_at(target_alloc, 16).hex(),
            ctypes.string_at(target_free, 16).hex(),
        ]
        ptrs, results = [], []
        for size in (1 << 10, 1 << 20, 1 << 26):
            p = c_ull()
            results.append(cuda.cuMemAlloc_v2(ctypes.byref(p), c_size_t(size)))
            ptrs.append(p.value)
        for p in ptrs:
            results.append(cuda.cuMemFree_v2(c_ull(p)))
        out["results"] = results
        out["counts"] = dict(counts)
        out["jump_size"] = [
            mh.memhook_bistro_patch_jump_size(patch_alloc),
            mh.memhook_bistro_patch_jump_size(patch_free),
        ]
        out["remove"] = [
            mh.memhook_bistro_remove(patch_alloc),
            mh.memhook_bistro_remove(patch_free),
        ]
    after = (ctypes.string_at(target_alloc, 16), ctypes.string_at(target_free, 16))
    out["restored"] = before == after
    # after removal, calls no longer reach the hooks
    p = c_ull()
    cuda.cuMemAlloc_v2(ctypes.byref(p), c_size_t(4096))
    cuda.cuMemFree_v2(p)
    out["counts_after_remove"] = dict(counts)
    return out


def main(argv: list[str]) -> int:
    mh = ctypes.CDLL(argv[1])
    mh.memhook_bistro_patch_jump_size.argtypes = [c_void_p]
    mh.memhook_bistro_remove.argtypes = [c_void_p]
    cuda = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_GLOBAL)
    cuda.cuInit(0)
    dev, ctx = c_int(), c_void_p()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    facts: dict[str, Any] = {}
    libs = {}
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[5].strip() if len(line.split(maxsplit=5)) == 6 else ""
            if os.path.basename(path).startswith("libcuda.so"):
                libs["libcuda"] = path
    try:
        import glob
        import site

        hits = [
            h
            for b in site.getsitepackages()
            for h in glob.glob(b + "/nvidia/**/libcudart.so.13", recursive=True)
        ]
        if hits:
            ctypes.CDLL(hits[0])
            libs["libcudart"] = os.path.realpath(hits[0])
    except OSError:
        pass
    facts["census"] = {k: live_census(mh, v) for k, v in libs.items()}
    facts["patch_5"] = live_patch(mh, cuda, 5)
    facts["patch_12"] = live_patch(mh, cuda, 12)
    text = json.dumps(facts, indent=1)
    if len(argv) > 2:
        with open(argv[2], "w") as fh:
            fh.write(text + "\n")
    for name, c in facts["census"].items():
        print(
            f"{name}: patchable 5-byte: {c['patchable_5']}/{c['functions']}, "
            f"12-byte: {c['patchable_12']}/{c['functions']}"
        )
    for key in ("patch_5", "patch_12"):
        p = facts[key]
        print(
            key,
            {
                k: p.get(k)
                for k in (
                    "install",
                    "results",
                    "counts",
                    "jump_size",
                    "remove",
                    "restored",
                    "counts_after_remove",
                )
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
